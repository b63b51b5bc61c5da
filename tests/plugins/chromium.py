"""Debian's headless Chromium, driven by selenium, for the browser tests
(``tests/web/test_docs_browser.py``, ``plugins/portal_browser.py``): what
is missing to run one, and one started with a fresh profile that asks no
host but those it is given."""
import contextlib
import os
import shutil
import tempfile

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def require_browser(*modules):
    """Skip the test when Chromium, its driver or a Python module it needs
    (selenium, and ``modules``) is missing; fail it instead under CI."""
    missing = None
    for module in ("selenium", *modules):
        try:
            __import__(module)
        except ImportError:
            missing = f"{module} is not installed (pip install -e '.[test]')"
            break
    for path in (CHROMIUM, CHROMEDRIVER):
        if missing is None and not os.access(path, os.X_OK):
            missing = f"{path} is missing (apt-get install -y chromium chromium-driver)"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests must run under CI: {missing}")
        pytest.skip(missing)


@contextlib.contextmanager
def headless_chromium(hosts, wait_seconds, window="1200,900", logs=("performance",)):
    """A headless Chromium with a fresh profile, removed after: each name of
    ``hosts`` resolves to 127.0.0.1 and every other name to nothing; the
    DevTools logs named in ``logs`` are kept (``driver.get_log``); a page
    load or a script given up after ``wait_seconds``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="plantstore-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    resolving = ", ".join([*(f"MAP {host} 127.0.0.1" for host in hosts), "MAP * ~NOTFOUND"])
    for flag in ("--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", f"--window-size={window}",
                 f"--host-resolver-rules={resolving}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", dict.fromkeys(logs, "ALL"))
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(wait_seconds)
    driver.set_script_timeout(wait_seconds)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
