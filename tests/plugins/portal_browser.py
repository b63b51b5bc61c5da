"""The portal in a real browser (tests/portal/test_browser.py): Debian's headless Chromium driven by
selenium, a real gunicorn with the portal on, a webhook worker, and a page
that moves through the portal waiting on what it shows (never on time).

Every page a test visits is checked by ``Browser.check``: no serious or
critical accessibility violation by axe-core (``axe-selenium-python``
bundles it), no script of anybody's ran (``PWNED`` unset, the title
untouched), no Content-Security-Policy violation in the console; and, with
``PORTAL_SCREENSHOTS=1``, the pages of the whole flow are saved to
docs/portal/<name>.png (docs/portal.md shows them).
"""
import os
from urllib.parse import urlsplit

import pytest
import requests

from helpers import REPO, bearer, plantstore_env
from plugins.chromium import headless_chromium, require_browser
from plugins.servers import Gunicorn
from plugins.webhooks import PATIENT_SENDS

WAIT_SECONDS = 60  # a page answers in milliseconds; a loaded machine's worst, many times over
# The portal's public name, and another site's, for cross-site requests:
# Chromium resolves both to loopback (and no other name).
PORTAL_HOST = "portal.plantstore.test"
ATTACKER_HOST = "attacker.plantstore.test"
SCREENSHOTS = REPO / "docs" / "portal"
PWNED = "__pwned"  # what every payload of the attack tests sets on ``window``
SETTINGS = {"PORTAL_SECRET_KEY": "browser-" + "k" * 40,
            "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            # A failed send waits an hour: the test resends it.
            "WEBHOOK_RETRY_SCHEDULE": "3600", "WORKER_POLL_INTERVAL": 0.1,
            **PATIENT_SENDS}
SERIOUS = ("serious", "critical")


@pytest.fixture
def driver():
    """A headless Chromium with a fresh profile; its console is logged."""
    require_browser("axe_selenium_python")
    with headless_chromium([PORTAL_HOST, ATTACKER_HOST], WAIT_SECONDS,
                           logs=("browser", "performance")) as chromium:
        yield chromium


class Portal:
    """gunicorn with the portal on, and one webhook worker. ``url`` is the
    portal's public address (``PORTAL_HOST``, for the browser alone), links
    are minted at the server's own (``server.url``)."""

    def __init__(self, database_url, start_worker):
        self.server = Gunicorn(database_url, workers=1)
        self.url = f"http://{PORTAL_HOST}:{self.server.port}"
        settings = {**SETTINGS, "PORTAL_URL": self.url}
        self.server.env.update(plantstore_env(database_url, **settings))
        self.server.start()
        self.worker = start_worker({**os.environ, **plantstore_env(database_url, **settings)})
        self.worker.wait_started()

    def link(self, token, **body):
        """A new portal link, minted through the API with ``token``."""
        answer = requests.post(self.server.url + "/webhooks/portal-links", json=body,
                               headers=bearer(token), timeout=WAIT_SECONDS)
        assert answer.status_code == 201, answer.text
        url = answer.json()["url"]
        assert url.startswith(self.url + "/portal/enter/plk_")
        return url


@pytest.fixture
def portal(app, database_url, start_worker):
    started = Portal(database_url, start_worker)
    yield started
    started.server.stop()


class Browser:
    """The driver, with waits on what pages show and every page's checks."""

    def __init__(self, driver):
        from selenium.webdriver.support.ui import WebDriverWait
        self.driver = driver
        self.wait = WebDriverWait(driver, WAIT_SECONDS)
        self.checked = []
        self.console = []

    def find(self, css):
        """The visible element ``css`` selects, once it shows."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as seen
        return self.wait.until(seen.visibility_of_element_located((By.CSS_SELECTOR, css)))

    def present(self, css):
        """The element ``css`` selects, once it is in the page (shown or not)."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as seen
        return self.wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, css)))

    def all(self, css):
        from selenium.webdriver.common.by import By
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css="main"):
        return self.find(css).text

    def click(self, css):
        """Click what ``css`` selects and wait for the page it leads to."""
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions as seen
        page = self.driver.find_element(By.TAG_NAME, "html")
        self.wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, css))).click()
        self.wait_for_page_after(page)

    def wait_for_page_after(self, page):
        """Wait until ``page`` (the ``html`` element before an action) is
        gone: stale, or, while Chromium swaps the documents, no longer of
        the document (its answer in that instant, which selenium's
        ``staleness_of`` does not take for gone)."""
        from selenium.common.exceptions import (
            StaleElementReferenceException,
            WebDriverException,
        )

        def gone(_):
            try:
                page.is_enabled()
            except StaleElementReferenceException:
                return True
            except WebDriverException as error:
                if "does not belong to the document" in (error.msg or ""):
                    return True
                raise
            return False
        self.wait.until(gone)

    def button(self, label, within="main"):
        """The button (or link) whose text is ``label``, under ``within``."""
        from selenium.webdriver.common.by import By
        xpath = (f"//{within}//*[self::button or self::a][normalize-space()='{label}']")
        return self.wait.until(lambda _: self.driver.find_element(By.XPATH, xpath))

    def submit(self, element):
        """Click ``element`` and wait for the page it leads to."""
        from selenium.webdriver.common.by import By
        page = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        self.wait_for_page_after(page)

    def reload_until(self, css, count=1, text=None):
        """Reload the page until ``css`` selects at least ``count`` elements
        (the first of them showing ``text``, when given)."""
        def shown(driver):
            driver.refresh()
            found = self.all(css)
            return len(found) >= count and (text is None or found[0].text == text)
        self.wait.until(shown)

    def csp_violations(self):
        """The console's Content-Security-Policy messages since the last call."""
        entries = self.driver.get_log("browser")
        self.console += entries
        return [entry["message"] for entry in entries
                if "Content Security Policy" in entry["message"]]

    def check(self, name, screenshot=False):
        """The page's checks (see the module); with ``screenshot``, its
        screenshot when ``PORTAL_SCREENSHOTS=1`` asks for them."""
        from axe_selenium_python import Axe
        axe = Axe(self.driver)
        axe.inject()
        violations = [violation for violation in axe.run()["violations"]
                      if violation["impact"] in SERIOUS]
        assert not violations, f"{name}: {axe.report(violations)}"
        title, untouched = self.driver.execute_script(
            f"return [document.title, window.{PWNED} === undefined]")
        assert untouched and "pwned" not in title.lower(), f"{name}: a script ran ({title})"
        assert not self.csp_violations(), f"{name}: {self.console}"
        self.checked.append(name)
        if screenshot and os.environ.get("PORTAL_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(exist_ok=True)
            assert self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))

    def path(self):
        """The path (and query) of the page shown."""
        parts = urlsplit(self.driver.current_url)
        return parts.path + (f"?{parts.query}" if parts.query else "")

    def history(self):
        """Every URL in the tab's history (DevTools' navigation history)."""
        entries = self.driver.execute_cdp_cmd("Page.getNavigationHistory", {})["entries"]
        return [entry["url"] for entry in entries]


@pytest.fixture
def browser(driver):
    return Browser(driver)
