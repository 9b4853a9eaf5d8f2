"""The apps.serve web page in a real browser (Debian's chromium + chromium-driver, driven by Selenium,
headless, nothing downloaded), against `apps.serve --nproc 2` serving a random GPT (no --checkpoint)."""
from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.apps.serving import serving

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")

# Records, on every change of the answer, its length and the status shown at that moment: tokens
# that appear before the stream ends show up as records with text and status "streaming".
OBSERVE = """
window.__seen = [];
new MutationObserver(() => {
  const a = document.getElementById('answer');
  window.__seen.push([a ? a.textContent.length : 0, document.getElementById('stat-status').textContent]);
}).observe(document.getElementById('output'), {childList: true, subtree: true, characterData: true});
"""


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (scripts/setup.sh --test installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_page_streams_tokens_and_shows_statistics_and_stages(browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with serving("--nproc", "2", stop=signal.SIGINT) as server:   # Ctrl-C: every rank exits 0 (checked on exit)
        assert "RANDOMLY INITIALISED" in server.output()
        with server.client() as c:
            assert c.get("/config").json()["random_init"] is True
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda d: "RANDOMLY INITIALISED" in d.find_element(By.ID, "model").text)
        prompt = browser.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("ROMEO:")
        max_tokens = browser.find_element(By.ID, "max_tokens")
        max_tokens.clear()
        max_tokens.send_keys("120")
        browser.execute_script(OBSERVE)
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "stat-status").text in ("done", "error"))
        assert browser.find_element(By.ID, "error").text == ""
        seen = browser.execute_script("return window.__seen")
        assert any(n > 0 and status == "streaming" for n, status in seen), seen   # tokens before the end
        assert browser.find_element(By.ID, "stat-status").text == "done"
        assert browser.find_element(By.ID, "stat-tokens").text == "120"
        for stat in ("stat-ttft", "stat-total"):
            assert browser.find_element(By.ID, stat).text.endswith(" ms")
        assert float(browser.find_element(By.ID, "stat-tps").text) > 0
        answer = browser.find_element(By.ID, "answer").text
        assert len(answer.replace("\n", "")) > 0
        # the table is redrawn from /metrics twice a second: read it in one go
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#stages tr.stage')].map(r => [...r.cells].map(c => c.textContent))")
        assert [r[1] for r in rows] == ["0", "1"], rows                 # one row per rank
        assert all(int(r[-1]) > 0 for r in rows), rows                  # micro-batches computed on each stage
        browser.save_screenshot(str(tmp_path / "apps_serve_page.png"))
    assert (tmp_path / "apps_serve_page.png").stat().st_size > 0
