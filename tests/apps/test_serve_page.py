"""The apps.serve web page in a real browser (Debian's chromium + chromium-driver, driven by Selenium,
headless, nothing downloaded), against `apps.serve --nproc 2` serving a random GPT (no --checkpoint)
with a 64-token context: a chat of two turns kept by the server's session (restored on reload,
forgotten by "New chat"), the first one 200 tokens long (past the context), the statistics of each
request, the live tokens/s chart and stage table, and a refused request's error; and a server with an
API key, whose page asks for the key before it chats."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from tests.apps.serving import TINY_GPT, serving

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
PAGE_GPT = [*TINY_GPT, "-o", "model.options.n_embd=64"]  # 64-token context, a few ms a token

# Records, on every change of the answer, its length and the status shown at that moment: tokens
# that appear before the stream ends show up as records with text and status "streaming".
OBSERVE = """
window.__seen = [];
new MutationObserver(() => {
  const a = document.getElementById('answer');   // the answer being streamed
  window.__seen.push([a ? a.textContent.length : 0, document.getElementById('stat-status').textContent]);
}).observe(document.getElementById('conversation'), {childList: true, subtree: true, characterData: true});
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


def turns(browser) -> list[tuple[str, str]]:
    return [
        tuple(t)
        for t in browser.execute_script(
            "return [...document.querySelectorAll('#conversation .turn')].map(t => [t.classList[1], "
            "t.querySelector('.text').textContent])"
        )
    ]


def chart(browser) -> tuple[str, float]:
    return browser.execute_script(
        "return [document.querySelector('#tps-chart polyline').getAttribute('points'), "
        "Number(document.getElementById('tps-peak').textContent)]"
    )


def test_page_chats_streams_past_the_context_and_shows_statistics_and_live_stages(browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with serving("--nproc", "2", *PAGE_GPT, stop=signal.SIGINT) as server:  # Ctrl-C: every rank exits 0 (checked)
        assert "RANDOMLY INITIALISED" in server.output()
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda d: "RANDOMLY INITIALISED" in d.find_element(By.ID, "model").text)
        wait.until(lambda d: d.find_element(By.ID, "prompt").get_attribute("value") == "ROMEO:")  # defaults that fit
        max_tokens = browser.find_element(By.ID, "max_tokens")
        assert max_tokens.get_attribute("value") == "200"  # past the 64-token context: it fits all the same
        wait.until(lambda d: len(d.execute_script("return document.querySelectorAll('#stages tr.stage')")) == 2)
        before = chart(browser)
        browser.execute_script(OBSERVE)
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "stat-status").text in ("done", "error"))
        assert browser.find_element(By.ID, "error").text == ""
        seen = browser.execute_script("return window.__seen")
        assert any(n > 0 and status == "streaming" for n, status in seen), seen  # tokens before the end
        stat = {
            k: browser.find_element(By.ID, f"stat-{k}").text
            for k in ("status", "tokens", "ttft", "total", "tps", "finish", "restarts")
        }
        assert stat["status"] == "done" and stat["tokens"] == "200" and stat["finish"] == "length", stat
        assert int(stat["restarts"]) >= 2, stat  # the window moved: past the context
        assert stat["ttft"].endswith(" ms") and stat["total"].endswith(" ms") and float(stat["tps"]) > 0, stat
        first = turns(browser)
        assert [r for r, _ in first] == ["user", "assistant"] and first[0][1] == "ROMEO:" and len(first[1][1]) > 0
        # the live view moved: the chart has this request's tokens/s, each stage its micro-batches
        wait.until(lambda d: chart(d)[1] > 0 and chart(d) != before)
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#stages tr.stage')].map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [r[1] for r in rows] == ["0", "1"] and all(int(r[-1]) > 0 for r in rows), rows
        browser.save_screenshot(str(tmp_path / "apps_serve_page.png"))

        # a second turn of the same session; the server keeps both, so a reload shows the conversation again
        prompt = browser.find_element(By.ID, "prompt")
        prompt.clear()
        prompt.send_keys("JULIET:")
        max_tokens.clear()
        max_tokens.send_keys("10")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "stat-status").text == "done")
        second = turns(browser)
        assert len(second) == 4 and second[2] == ("user", "JULIET:") and len(second[3][1]) > 0, second
        browser.refresh()
        wait.until(lambda d: len(turns(d)) == 4)
        assert turns(browser) == second
        browser.find_element(By.ID, "new-chat").click()
        wait.until(lambda d: len(turns(d)) == 0)
        with server.client() as c:
            assert c.get("/memory/status").json()["sessions"] == 0  # the server forgot it too

        # a bad value: the server's 400 is shown, naming the field
        browser.find_element(By.ID, "top_p").send_keys("5")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "stat-status").text == "error")
        assert "top_p" in browser.find_element(By.ID, "error").text
    assert (tmp_path / "apps_serve_page.png").stat().st_size > 0


def test_page_asks_for_the_key_of_a_keyed_server_and_then_chats(browser, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started with an API key: the page shows its key field (no request answered without it),
    a wrong key is refused with a message, the right one loads the model and chats."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.apps.serving import RANDOM_GPT

    key = "sk-page-0123456789"
    monkeypatch.setenv("PYCOMM_SERVE_API_KEY", key)  # where the docs advise it, not on the command line
    with serving("--nproc", "1", *RANDOM_GPT) as server:
        browser.get(server.url + "/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda d: d.find_element(By.ID, "key-row").is_displayed())
        assert "requires its API key" in browser.find_element(By.ID, "model").text

        def enter(text: str) -> None:
            browser.find_element(By.ID, "api-key").send_keys(text)
            browser.find_element(By.ID, "use-key").click()

        enter("sk-wrong")
        wait.until(lambda d: "refused this API key" in d.find_element(By.ID, "error").text)
        assert browser.find_element(By.ID, "key-row").is_displayed()
        enter(key)
        wait.until(lambda d: "RANDOMLY INITIALISED" in d.find_element(By.ID, "model").text)
        assert not browser.find_element(By.ID, "key-row").is_displayed()
        max_tokens = browser.find_element(By.ID, "max_tokens")
        max_tokens.clear()
        max_tokens.send_keys("5")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.ID, "stat-status").text in ("done", "error"))
        assert browser.find_element(By.ID, "error").text == "" and turns(browser)[1][0] == "assistant"
        assert browser.find_element(By.ID, "stat-tokens").text == "5"
