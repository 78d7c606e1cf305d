"""The web page in a real browser: Debian's Chromium, headless, driven by Selenium through
chromium-driver. The page is served by the API server on 127.0.0.1, answers stream from the LLM
stub, and the sources' permalinks point at a local stand-in for the repository's web host, so
following one is a real navigation. No browser here is a failure, not a skip: .ci/run installs
one."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from face_rig import ApiRig
from stub_http import LocalServer
from stub_llm_api import Reply, Request, StubLLMServer, block_number, use_llm

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
    "--window-size=1100,1100",
]  # fmt: skip


class WebHost(LocalServer):
    """Where the permalinks lead: answers any page and remembers which."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/{path:.*}", self.page)

    async def page(self, request: web.Request) -> web.Response:
        self.seen.append(request.path)
        return web.Response(text="<title>blob</title><p>the file</p>", content_type="text/html")


def reply(req: Request) -> Reply:
    try:
        n = block_number(req, "thirty seconds")
    except AssertionError:
        n = 1
    return Reply(f"The default timeout is thirty seconds [{n}]. Set it in widget.toml, under "
                 f"the network section [{n}].", gap=0.1)  # fmt: skip


def chrome(profile: Path) -> Any:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail("the web page test needs a real browser: apt-get install chromium "
                    "chromium-driver (.ci/run installs them)")  # fmt: skip
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(driver))


# The contrast ratio (WCAG) of an element's text colour on the page background.
CONTRAST_JS = """
const rgb = (c) => c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
const lum = (c) => { const v = rgb(c).map((x) => { x /= 255;
  return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
const bg = getComputedStyle(document.body).backgroundColor;
return [...arguments].map((el) => { const a = lum(getComputedStyle(el).color), b = lum(bg);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); });
"""


def drive(url: str, sha: str, tmp: Path) -> dict[str, Any]:
    """Everything a person does on the page, in the browser; returns what it saw."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    d = chrome(tmp / "profile")
    seen: dict[str, Any] = {}
    try:
        wait = WebDriverWait(d, 60)
        d.get(url + "/")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#instance option"))
        assert d.find_element(By.ID, "instance").get_attribute("value") == "widget"
        assert d.execute_script(
            "return [...document.querySelectorAll('select, textarea, input')]"
            ".every((e) => e.labels.length > 0)"
        )  # every control has its label
        # Ask with the keyboard alone: Enter in the question sends it.
        question = d.find_element(By.ID, "question")
        question.click()
        question.send_keys("What is the default timeout?", Keys.ENTER)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".turn .sources a.source"))
        card = d.find_element(By.CSS_SELECTOR, ".turn")
        seen["answer"] = card.find_element(By.CSS_SELECTOR, ".answer").text
        link = card.find_element(By.CSS_SELECTOR, ".sources a.source")
        seen["href"] = link.get_attribute("href")
        # [1] in the answer leads to source 1.
        card.find_element(By.CSS_SELECTOR, "a.cite").click()
        seen["hash"] = d.execute_script("return location.hash")
        # The quoted text, on expand.
        card.find_element(By.CSS_SELECTOR, ".sources summary").click()
        quoted = card.find_element(By.CSS_SELECTOR, ".sources details pre")
        wait.until(lambda d: quoted.is_displayed())
        seen["quoted"] = quoted.text
        # A fence opens a line; "```x``" inside a line (quoted reStructuredText) is not one.
        seen["inline"] = d.execute_script(
            "const b = document.createElement('div');"
            "renderAnswer(b, '• a.rst: ```x`` y.` [1]\\n• b.rst: ```z`` w.` `argv[0]` [2]"
            "\\n\\n```py\\nxs[3]\\n```', 7);"
            "return [b.querySelectorAll('a.cite').length, b.querySelectorAll('pre').length];"
        )
        # A source's further passage (retrieval.passages): its own line range and link.
        seen["passage"] = d.execute_script(
            "const c = document.createElement('div');"
            "renderSources(c, [{n: 1, collection: 'code', path: 'a.py', start_line: 1,"
            " end_line: 3, issue: null, title: 'a.py', url: 'https://h/a.py#L1-L3', text: 't',"
            " passages: [{title: 'f', start_line: 10, end_line: 12,"
            " url: 'https://h/a.py#L10-L12', text: 'def f(): pass'}]}], 9);"
            "return [...c.querySelectorAll('.passage a.source')].map("
            "(a) => [a.textContent, a.getAttribute('href')])"
            ".concat([...c.querySelectorAll('.passage pre')].map((p) => [p.textContent]));"
        )
        # Follow the source link: a new tab at the permalink.
        main = d.current_window_handle
        link.click()
        wait.until(lambda d: len(d.window_handles) == 2)
        d.switch_to.window(next(h for h in d.window_handles if h != main))
        wait.until(lambda d: d.title == "blob")
        seen["opened"] = d.current_url
        d.close()
        d.switch_to.window(main)
        # 👍
        up = card.find_element(By.CSS_SELECTOR, '.feedback button[data-verdict="up"]')
        up.click()
        wait.until(lambda d: up.get_attribute("aria-pressed") == "true")
        seen["status"] = d.find_element(By.ID, "status").text
        # A follow-up, in the same conversation.
        question.send_keys("and where is it set?", Keys.ENTER)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".turn .feedback")) == 2)
        body = d.find_element(By.TAG_NAME, "h1")
        muted = d.find_element(By.ID, "question-hint")
        seen["contrast"] = d.execute_script(CONTRAST_JS, body, link, muted)
        d.save_screenshot(str(tmp / "page.png"))
        d.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark"}]})  # fmt: skip
        seen["dark"] = d.execute_script("return getComputedStyle(document.body).backgroundColor")
        seen["contrast"] += d.execute_script(CONTRAST_JS, body, link, muted)
        # On a phone: nothing wider than the screen.
        d.set_window_size(390, 844)
        seen["overflow"] = d.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        d.save_screenshot(str(tmp / "page-phone.png"))
    finally:
        d.quit()
    return seen


@pytest.mark.asyncio
async def test_the_page_in_a_real_browser(
    sample: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    host, stub = WebHost(), StubLLMServer()
    await host.start()
    await stub.start()
    tmp: Path = sample["tmp"]
    f = tmp / "instances" / "widget.yaml"
    f.write_text(f.read_text().replace("https://github.com/acme/widget",
                                       host.address("/acme/widget")))  # fmt: skip
    use_llm(sample, stub, "openai", monkeypatch)
    stub.responder = reply
    api = await ApiRig(sample["app"]).start()
    try:
        seen = await asyncio.to_thread(drive, api.url, sample["sha"], tmp)
    finally:
        await api.close()
        await stub.stop()
        await host.stop()
    sha = sample["sha"]
    assert seen["answer"].startswith("The default timeout is thirty seconds [1]")
    assert seen["href"].startswith(host.address(f"/acme/widget/blob/{sha}/README.md#L"))
    assert seen["opened"] == seen["href"] and f"/acme/widget/blob/{sha}/README.md" in host.seen
    assert seen["hash"] == "#s-1-1" and "thirty seconds" in seen["quoted"]
    # both citations linked (not the code span's `argv[0]`); the one real fence is code
    assert seen["inline"] == [2, 1]
    assert seen["passage"] == [["a.py:10-12", "https://h/a.py#L10-L12"], ["def f(): pass"]]
    assert seen["status"] == "Thank you: your feedback was recorded."
    assert len(seen["contrast"]) == 6 and min(seen["contrast"]) >= 4.5  # light and dark
    assert seen["dark"] == "rgb(18, 20, 23)" and seen["overflow"] <= 0
    assert (tmp / "page.png").stat().st_size > 10_000 and (tmp / "page-phone.png").exists()
    assert api.store is not None
    store = await type(api.store).open(api.app.layout.conversations)
    try:
        [rec] = await store.feedback("widget")
        assert (rec.platform, rec.user, rec.verdict) == ("web", "local", "up")
        turns = await store.history("web", rec.thread)
        assert [t.question for t in turns] == [
            "What is the default timeout?",
            "and where is it set?",
        ]
    finally:
        await store.close()
    assert [r.body.get("stream") for r in stub.requests] == [True, True]  # the page streams
