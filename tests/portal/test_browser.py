"""The portal in a real browser (Debian's chromium and chromium-driver,
see tests/plugins/portal_browser.py): the whole flow by mouse and by keyboard alone,
every page free of serious accessibility violations, and an attacker's
payloads, cross-site forms and cookie theft getting nowhere.

``PORTAL_SCREENSHOTS=1`` saves each page to docs/portal/ (docs/portal.md
shows them)."""
import http.server
import threading

import pytest

from plantstore.db.models import PortalLink, PortalSession, Subscription
from plantstore.portal.links import LINK_COOKIE
from plugins.portal_browser import ATTACKER_HOST, PORTAL_HOST, PWNED
from plugins.webhooks import Answer, verify

pytestmark = pytest.mark.slow

FIRST_ANSWER = b"busy: try again in a minute"


def failing_once(receiver_requests):
    """A receiver's answers: 500 to the first request, 200 after."""
    def answer(_):
        if not receiver_requests():
            return Answer(500, body=FIRST_ANSWER)
        return Answer(200, body=b"thanks")
    return answer


def enter(browser, link, by_keyboard=False, screenshot=False):
    """Open ``link``, then its entry page's button (by mouse, or by Tab and
    Enter): the endpoints page, at a URL and history without its key."""
    key = link.rsplit("/", 1)[1]
    browser.driver.get(link)
    assert "Open the portal" in browser.text("h1")
    assert browser.path() == "/portal/enter"
    browser.check("enter", screenshot=screenshot)
    if by_keyboard:
        tab_to(browser, "#open-portal")
        enter_key(browser)
    else:
        browser.click("#open-portal")
    browser.find("#nav-endpoints")
    assert browser.path() == "/portal/endpoints"
    assert not [url for url in browser.history() if key in url], browser.history()
    assert browser.driver.execute_script("return document.referrer") == ""


def test_the_whole_flow_from_link_to_logout(browser, portal, alice, make_receiver):
    receiver = make_receiver()
    receiver.answer = failing_once(lambda: receiver.requests)
    link = portal.link(alice)
    enter(browser, link, screenshot=True)
    assert "no endpoints yet" in browser.text("#empty")
    browser.check("endpoints-empty", screenshot=True)

    browser.click("#add-endpoint")
    browser.check("endpoint-form", screenshot=True)
    browser.find("#url").send_keys(receiver.url)
    browser.find("#bearer").send_keys("receiver-bearer")
    browser.click("#save")
    secret = browser.find("#secret").get_attribute("value")
    assert secret.startswith("whsec_")
    browser.check("endpoint-added", screenshot=True)

    browser.click("#back")
    assert receiver.url in browser.text("#endpoints tbody")
    browser.check("endpoints", screenshot=True)
    browser.submit(browser.button("Send a test event"))
    browser.reload_until("#attempts tbody tr")
    assert "HTTP 500" in browser.text("#attempts")
    assert FIRST_ANSWER.decode() in browser.text("#attempts")
    browser.check("delivery", screenshot=True)
    [received] = receiver.wait_for(1)
    assert verify(secret, received)["tag"] == "test"
    assert received.headers["authorization"] == "Bearer receiver-bearer"

    browser.submit(browser.button("Send it again now"))
    assert "Sent again" in browser.text("#notice")
    browser.reload_until("#attempts tbody tr", count=2)
    browser.reload_until("#status", text="delivered")
    assert "HTTP 200" in browser.all("#attempts tbody tr")[1].text
    browser.check("delivery-resent", screenshot=True)

    browser.click("#nav-deliveries")
    assert "plant.test" in browser.text("#deliveries")
    browser.check("deliveries", screenshot=True)

    browser.click("#nav-endpoints")
    browser.submit(browser.button("Rotate the secret"))
    rotated = browser.find("#secret").get_attribute("value")
    assert rotated.startswith("whsec_") and rotated != secret
    browser.check("secret-rotated", screenshot=True)
    browser.click("#back")
    for action, name in (("Edit", "endpoint-edit"), ("Recover", "recover"),
                         ("Delete", "confirm-delete")):
        browser.click(f"#endpoints a[href$='/{action.lower()}']")
        browser.check(name, screenshot=True)
        browser.click("#nav-endpoints")

    browser.click("#logout")
    assert "logged out" in browser.text("h1").lower()
    browser.check("logged-out", screenshot=True)
    browser.driver.get(link)
    assert browser.text("h1") == "This link was already used"
    browser.check("link-used", screenshot=True)
    browser.driver.get(portal.url + "/portal/endpoints")
    assert browser.text("h1") == "You are not signed in"
    browser.check("signed-out", screenshot=True)


def tab_to(browser, css, most=40):
    """Press Tab until the element ``css`` selects has the focus."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    target = browser.present(css)  # a skip link shows only once focused
    for _ in range(most):
        ActionChains(browser.driver).send_keys(Keys.TAB).perform()
        if browser.driver.switch_to.active_element == target:
            return target
    raise AssertionError(f"{css} never took the focus in {most} presses of Tab")


def press(browser, *keys):
    """Type ``keys`` into whatever has the focus."""
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(browser.driver).send_keys(*keys).perform()


def enter_key(browser):
    """Press Enter and wait for the page it leads to."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    page = browser.driver.find_element(By.TAG_NAME, "html")
    press(browser, Keys.ENTER)
    browser.wait_for_page_after(page)


def test_the_main_flow_by_keyboard_alone(browser, portal, alice, make_receiver):
    receiver = make_receiver()
    enter(browser, portal.link(alice), by_keyboard=True)
    tab_to(browser, "a.skip")
    tab_to(browser, "#add-endpoint")
    enter_key(browser)
    tab_to(browser, "#url")
    press(browser, receiver.url)
    tab_to(browser, "#save")
    enter_key(browser)
    secret = browser.find("#secret").get_attribute("value")
    tab_to(browser, "#back")
    enter_key(browser)
    tab_to(browser, "#endpoints form[action$='/test'] button")
    enter_key(browser)
    browser.reload_until("#attempts tbody tr")
    assert "HTTP 200" in browser.text("#attempts")
    assert verify(secret, receiver.wait_for(1)[0])["tag"] == "test"
    tab_to(browser, "#nav-deliveries")
    enter_key(browser)
    assert "plant.test" in browser.text("#deliveries")
    tab_to(browser, "#deliveries tbody a")
    enter_key(browser)
    assert browser.text("#status") == "delivered"
    tab_to(browser, "#logout")
    enter_key(browser)
    assert "logged out" in browser.text("h1").lower()


PAYLOAD = (f"<script>window.{PWNED}=1;document.title='pwned'</script>"
           f"\"><img src=x onerror=\"window.{PWNED}=2\">"
           f"<a href=\"javascript:window.{PWNED}=3\">x</a>"
           f"'><svg onload=window.{PWNED}=4>")


def test_payloads_from_a_receiver_and_a_user_run_no_script(
        browser, portal, alice, make_receiver):
    receiver = make_receiver(answer=Answer(
        500, headers={"Content-Type": "text/html"}, body=PAYLOAD.encode()))
    enter(browser, portal.link(alice))
    browser.click("#add-endpoint")
    browser.find("#url").send_keys(f"javascript:window.{PWNED}=5")
    browser.click("#save")
    assert browser.all("#error-url, #error-form"), "a javascript: URL was accepted"
    browser.check("endpoint-form-refused")
    url = browser.find("#url")
    url.clear()
    url.send_keys(receiver.url + "?q=" + PAYLOAD.replace(" ", "%20"))
    browser.find("#bearer").send_keys(PAYLOAD)
    browser.click("#save")
    assert "bearer token" in browser.text("#error-bearer")  # refused, the URL shown again
    assert PWNED in browser.find("#url").get_attribute("value")
    browser.check("attack-form-shown-again")
    browser.click("#save")
    browser.check("attack-secret")
    browser.click("#back")
    browser.check("attack-endpoints")
    browser.submit(browser.button("Send a test event"))
    browser.reload_until("#attempts tbody tr")
    assert "<script>" in browser.text("#attempts")  # shown as text, never run
    browser.check("attack-delivery")
    assert PWNED in receiver.wait_for(1)[0].path
    for path in ("/portal/deliveries", "/portal/endpoints"):
        browser.driver.get(portal.url + path)
        browser.check(f"attack{path.replace('/', '-')}")
    subscription_id = Subscription.select().first().id
    for action in ("edit", "delete", "recover"):
        browser.driver.get(f"{portal.url}/portal/endpoints/{subscription_id}/{action}")
        browser.check(f"attack-{action}")

    # The policy is in force, and the console shows it refusing: a script
    # the page itself inserts (as an injected one would) does not run.
    browser.driver.execute_script(
        "const s = document.createElement('script');"
        f"s.textContent = 'window.{PWNED} = 6'; document.body.appendChild(s);")
    browser.wait.until(lambda _: browser.csp_violations())
    assert browser.driver.execute_script(f"return window.{PWNED} === undefined")


class AttackerSite:
    """A page on another port that posts a form to the portal on opening."""

    def __init__(self, target):
        page = (f"<!doctype html><title>win a prize</title><form id=f method=post "
                f"action='{target}'><input name=csrf_token value=guessed></form>"
                "<script>document.getElementById('f').submit()</script>").encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def visit_attacker(browser, portal, host, path):
    """Open an ``AttackerSite`` on ``host`` posting to the portal's ``path``;
    the heading of the portal page the browser lands on (its checks passed)."""
    attacker = AttackerSite(portal.url + path)
    try:
        browser.driver.get(f"http://{host}:{attacker.port}/")
        browser.wait.until(lambda driver: driver.current_url.startswith(portal.url))
        heading = browser.find("h1").text
        browser.check(f"cross-site-{host.split('.')[0]}{path.replace('/', '-')}")
        return heading
    finally:
        attacker.stop()


@pytest.mark.parametrize("host", [PORTAL_HOST, ATTACKER_HOST],
                         ids=["same-host-other-port", "other-site"])
def test_a_form_posted_from_another_origin_changes_nothing(
        browser, portal, alice, make_receiver, app, host):
    receiver = make_receiver()
    enter(browser, portal.link(alice))
    browser.click("#add-endpoint")
    browser.find("#url").send_keys(receiver.url)
    browser.click("#save")
    with app.app_context():
        before = Subscription.select().first()
    refused = visit_attacker(browser, portal, host, f"/portal/endpoints/{before.id}/disable")
    assert refused in ("Refused", "You are not signed in")
    with app.app_context():
        after = Subscription.get_by_id(before.id)
    assert after.is_active and after.secret == before.secret
    browser.driver.get(portal.url + "/portal/endpoints")
    assert "active" in browser.text(f"#endpoint-{before.id}")


@pytest.mark.parametrize("host", [PORTAL_HOST, ATTACKER_HOST],
                         ids=["same-host-other-port", "other-site"])
def test_a_form_posted_from_another_origin_spends_no_link_the_browser_holds(
        browser, portal, alice, app, host):
    link = portal.link(alice)
    browser.driver.get(link)
    browser.find("#open-portal")  # the link's key held, its page not sent
    assert visit_attacker(browser, portal, host, "/portal/enter") in (
        "Refused", "Open your link again")
    with app.app_context():
        assert PortalLink.get().used_at is None and PortalSession.select().count() == 0
    enter(browser, link)  # its owner still can


def test_the_session_cookie_is_out_of_scripts_reach(browser, portal, alice):
    enter(browser, portal.link(alice))
    [cookie] = [c for c in browser.driver.get_cookies() if c["name"] == "plantstore_portal"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert "plantstore_portal" not in browser.driver.execute_script("return document.cookie")


def test_the_links_key_is_out_of_scripts_reach_on_its_page(browser, portal, alice):
    browser.driver.get(portal.link(alice))
    browser.find("#open-portal")  # on /portal/enter, the cookie's path
    [cookie] = [c for c in browser.driver.get_cookies() if c["name"] == LINK_COOKIE]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/portal/enter"
    assert LINK_COOKIE not in browser.driver.execute_script("return document.cookie")
