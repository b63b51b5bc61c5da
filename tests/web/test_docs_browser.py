"""/docs/ in a real headless Chromium (Debian's chromium + chromium-driver):
the operations, schemas and the New Plant webhook render, "Authorize" +
"Try it out" create and list a plant, and the page asks no host but the
service for anything. Saves artifacts/docs.png."""
import json
from urllib.parse import urlsplit

import pytest

from helpers import REPO
from plantstore import db
from plantstore.db.models import Plant
from plugins.chromium import headless_chromium, require_browser

pytestmark = pytest.mark.slow

SCREENSHOT = REPO / "artifacts" / "docs.png"
WAIT_SECONDS = 30
# The page is opened under a name that is neither "localhost" nor a loopback
# address (Chromium maps it to 127.0.0.1; every other name fails to resolve),
# so Swagger UI treats it as a public page: its validator badge would show.
SERVICE_HOST = "docs.plantstore.test"


@pytest.fixture
def browser():
    """A headless Chromium with a fresh profile that downloads nothing; the
    DevTools Network events of every request kept (the performance log)."""
    require_browser()
    with headless_chromium([SERVICE_HOST], WAIT_SECONDS, window="1280,2600") as driver:
        yield driver


def requested_urls(driver):
    """Every URL the browser asked for since the last call (DevTools'
    ``Network.requestWillBeSent`` events, redirects included)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_docs_page_renders_the_api_and_try_it_out_creates_and_lists(
        browser, gunicorn_server, app, alice):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    server = gunicorn_server(workers=1)
    service = f"{SERVICE_HOST}:{server.port}"
    wait = WebDriverWait(browser, WAIT_SECONDS)

    def find(css):
        """The visible element ``css`` selects, once it shows."""
        return wait.until(seen.visibility_of_element_located((By.CSS_SELECTOR, css)))

    def click(css):
        """Click the element ``css`` selects, once it is clickable."""
        wait.until(seen.element_to_be_clickable((By.CSS_SELECTOR, css))).click()

    def response_status(operation):
        """The status code Swagger UI shows for the call it made."""
        css = f"{operation} .live-responses-table tr.response .response-col_status"
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, css)
                   and browser.find_element(By.CSS_SELECTOR, css).text.strip())
        return browser.find_element(By.CSS_SELECTOR, css).text.strip()

    requested_urls(browser)  # forget the browser's own start page
    browser.get(f"http://{service}/docs/")
    find("#operations-plants-createPlant")
    operations = {element.get_attribute("id") for element in
                  browser.find_elements(By.CSS_SELECTOR, ".opblock-tag-section .opblock")}
    assert {"operations-plants-listPlants", "operations-plants-createPlant",
            "operations-plants-deletePlant"} == {
        operation for operation in operations if operation.startswith("operations-plants-")}
    assert "operations-webhook-receivers-createWebhook" in operations
    webhook = find("#operations-webhooks-newPlant")
    assert "/plant/webhook" in webhook.text and "New Plant" in webhook.text
    find("section.models .json-schema-2020-12__title")
    schemas = [element.text for element in browser.find_elements(
        By.CSS_SELECTOR, "section.models .json-schema-2020-12__title")]
    assert {"Error", "NewPlant", "Plant", "NewSubscription", "Delivery"} <= set(schemas)
    new_plant = browser.find_element(By.XPATH, (
        "//section[contains(@class, 'models')]"
        "//strong[text()='NewPlant']/ancestor::article[1]"))
    new_plant.find_element(By.CSS_SELECTOR, "button.json-schema-2020-12-accordion").click()
    wait.until(lambda _: "int64" in new_plant.text)
    properties = {line.split("Expand all")[0].strip(" *")
                  for line in new_plant.text.splitlines()[1:]}
    assert {"id", "name", "tag"} <= properties, new_plant.text

    # Authorize: paste the token into the bearerAuth dialog.
    click(".scheme-container button.authorize")
    token_input = find(".modal-ux input")
    token_input.send_keys(alice)
    click(".modal-ux .auth-btn-wrapper button.authorize")
    click(".modal-ux .auth-btn-wrapper button.btn-done")

    # Try it out: POST /plants.
    create = "#operations-plants-createPlant"
    click(f"{create} .opblock-summary-control")
    click(f"{create} .try-out__btn")
    body = find(f"{create} textarea.body-param__text")
    body.send_keys(Keys.CONTROL, "a")
    body.send_keys(Keys.DELETE)
    body.send_keys(json.dumps({"id": 4242, "name": "browser fern", "tag": "docs"}))
    click(f"{create} button.execute")
    assert response_status(create) == "200"
    answered = find(f"{create} .live-responses-table tr.response .response-col_description")
    assert '"browser fern"' in answered.text

    # Try it out: GET /plants lists it.
    listing = "#operations-plants-listPlants"
    click(f"{listing} .opblock-summary-control")
    click(f"{listing} .try-out__btn")
    click(f"{listing} button.execute")
    assert response_status(listing) == "200"
    listed = find(f"{listing} .live-responses-table tr.response .response-col_description").text
    assert '"browser fern"' in listed and '"docs"' in listed

    # Nothing but the service was asked for anything: no CDN, no validator badge.
    urls = requested_urls(browser)
    assert f"http://{service}/openapi.json" in urls
    elsewhere = [url for url in urls if urlsplit(url).scheme not in ("data", "blob")
                 and urlsplit(url).netloc != service]
    assert not elsewhere, f"the docs page called other hosts: {elsewhere}"

    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.execute_script("arguments[0].scrollIntoView()",
                           browser.find_element(By.CSS_SELECTOR, create))
    assert browser.save_screenshot(str(SCREENSHOT))

    with app.app_context():
        plant = Plant.get_by_id(4242)
        assert (plant.name, plant.tag) == ("browser fern", "docs")
        db.database.close()
