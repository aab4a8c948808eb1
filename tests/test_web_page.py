"""The chat page in a real browser: headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright; never `playwright install`) against `ggufspec serve` on the embedded default pair with
--api-key and --parallel 2 (tests/conftest.py: web_server).

Set GGUFSPEC_WEB_SCREENSHOT=docs/web-chat.png to keep the page's screenshot there (it always goes
to the test's temporary directory).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
sync_api = pytest.importorskip("playwright.sync_api")

from web_serve import API_KEY  # noqa: E402

pytestmark = pytest.mark.slow
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
TURNS = ["Name three colours.", "Now name three animals.", "Which of those animals is the largest?"]
REPLY_MS = 240_000


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """One Chromium profile (fresh user-data-dir) for the module: its tabs share localStorage."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=FLAGS, viewport={"width": 1280, "height": 1100},
        )
        context.set_default_timeout(60_000)
        yield context
        context.close()


def _open(browser, url: str):
    """A new tab on the page, with the API key entered when the page asks for it."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors  # type: ignore[attr-defined]
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    if page.is_visible("#key-form"):
        if "API key" in page.inner_text("#error"):
            page.fill("#api-key", API_KEY)
            page.click("#key-form button")
    page.wait_for_function("() => document.querySelector('#model').textContent.includes('slots')")
    return page


def _set(page, selector: str, value: str) -> None:
    page.fill(selector, value)
    page.dispatch_event(selector, "change")


def _say(page, text: str) -> None:
    page.click("#input")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def _wait_reply(page, n_messages: int) -> None:
    page.wait_for_function(
        f"() => document.querySelectorAll('#messages li').length === {n_messages} && "
        "document.querySelector('#messages li:last-child').classList.contains('assistant') && "
        "document.querySelector('#messages li:last-child').dataset.state === 'done' && "
        "!document.querySelector('#send').disabled", timeout=REPLY_MS)


def test_a_conversation_shows_provenance_statistics_cache_reuse_and_compare(web_server, browser, tmp_path) -> None:
    page = browser.new_page()
    page.goto(web_server.url)
    page.wait_for_selector("body[data-ready='1']")
    # --api-key: the page asks for the key before anything else
    assert page.is_visible("#key-form") and "API key" in page.inner_text("#error")
    page.fill("#api-key", API_KEY)
    page.click("#key-form button")
    page.wait_for_function("() => document.querySelector('#model').textContent.includes('2 slots')")
    assert not page.is_visible("#error")
    _set(page, "#max-tokens", "60")

    # Shift+Enter is a new line; nothing is sent
    page.click("#input")
    page.keyboard.type("Hello")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("there")
    assert page.input_value("#input") == "Hello\nthere" and page.locator("#messages li").count() == 0
    page.fill("#input", "")

    # the statistics change while the reply streams, not only at its end
    page.evaluate("""() => { window.tpsSeen = []; new MutationObserver(() => window.tpsSeen.push(
        document.querySelector('#st-tps').textContent)).observe(document.querySelector('#st-tps'),
        {childList: true, characterData: true, subtree: true}); }""")
    metas: list[str] = []
    totals: list[int] = []
    for i, text in enumerate(TURNS):
        _say(page, text)
        _wait_reply(page, 2 * (i + 1))
        metas.append(page.inner_text("#messages li:last-child .meta"))
        prompt = page.inner_text("#st-prompt")
        print(f"turn {i + 1}: {text!r} -> {page.inner_text('#messages li:last-child .body')!r}\n"
              f"  meta: {metas[-1]}\n  stats: tokens/s {page.inner_text('#st-tps')}, accept {page.inner_text('#st-accept')}, "
              f"mean accepted length {page.inner_text('#st-mal')}, prompt {prompt}, "
              f"rounds charted {page.get_attribute('#chart', 'data-rounds')}")
        total, cached = int(prompt.split(" ")[0]), int(prompt.split(", ")[1].split(" ")[0])
        # turns 2 and 3 reuse the conversation so far from the KV cache (cache_prompt): at least the
        # previous turn's whole prompt; turn 1 at most a shared template prefix (the server is shared
        # with other tests), never its own new message
        assert cached < total, prompt
        if i > 0:
            assert cached >= totals[-1], (prompt, totals)
        totals.append(total)
    assert len(set(page.evaluate("window.tpsSeen"))) >= 3

    # provenance: drafted tokens are marked, by a colour and an underline style each (not colour alone)
    kept = page.locator("#messages li.assistant .tok.by-draft, #messages li.assistant .tok.by-lookup")
    assert kept.count() > 0 and page.locator("#messages li.assistant .tok.by-target").count() > 0
    style = "(e) => getComputedStyle(e).textDecorationLine + ' ' + getComputedStyle(e).textDecorationStyle"
    assert page.eval_on_selector(".legend .by-draft", style) == "underline solid"
    assert page.eval_on_selector(".legend .by-lookup", style) == "underline dotted"
    first = kept.first
    assert first.evaluate(style).startswith("underline")
    assert float(page.inner_text("#st-tps")) > 0 and float(page.inner_text("#st-mal")) >= 1
    assert "%" in page.inner_text("#st-accept") and int(page.get_attribute("#chart", "data-rounds")) > 0
    assert page.locator("#chart rect").count() > 0

    # compare: the last turn again with the target alone, side by side, greedy: the same text
    page.click("#compare")
    page.wait_for_selector("#comparison:not([hidden])", timeout=REPLY_MS)
    verdict = page.inner_text("#cmp-verdict")
    print(f"compare: speculative {page.inner_text('#cmp-spec')} tok/s, target alone {page.inner_text('#cmp-base')} "
          f"tok/s; {verdict}")
    assert "identical text" in verdict and float(page.inner_text("#cmp-base")) > 0

    shot = tmp_path / "web-chat.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("GGUFSPEC_WEB_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["GGUFSPEC_WEB_SCREENSHOT"])

    # the marks toggle off (the text stays)
    page.uncheck("#marks-on")
    assert first.evaluate(style).startswith("none")

    # a reload keeps the conversation, its marks and the comparison
    conversation = page.get_attribute("body", "data-conversation")
    page.reload()
    page.wait_for_function("() => document.querySelector('#model').textContent.includes('slots')")
    assert page.get_attribute("body", "data-conversation") == conversation
    assert page.locator("#messages li").count() == 6 and not page.is_checked("#marks-on")
    assert page.locator("#messages li.assistant .tok.by-draft, #messages li.assistant .tok.by-lookup").count() == kept.count()
    assert page.is_visible("#comparison") and "identical text" in page.inner_text("#cmp-verdict")
    page.close()


def test_two_tabs_chat_at_once_on_two_slots(web_server, browser) -> None:
    tabs = [_open(browser, web_server.url) for _ in range(2)]
    ids = {t.get_attribute("body", "data-conversation") for t in tabs}
    assert len(ids) == 2  # each tab its own conversation
    before = [t.locator("#messages li").count() for t in tabs]
    for t in tabs:
        _set(t, "#max-tokens", "60")  # 2-3 s of both slots busy at once on 2 cores
    busy: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            busy.append(httpx.get(f"{web_server.url}/health", timeout=10).json()["slots_busy"])
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        _say(tabs[0], "Write a short poem about the sea.")
        _say(tabs[1], "Write a short poem about the mountains.")
        for t, n in zip(tabs, before):
            _wait_reply(t, n + 2)
    finally:
        done.set()
        watcher.join()
    assert max(busy) == 2, busy  # both replies generated at the same time
    for t, word in zip(tabs, ("sea", "mountains")):
        assert word in t.inner_text("#messages li.user:nth-last-child(2) .body")
        assert t.inner_text("#messages li:last-child .body").strip()
        assert not t.errors  # type: ignore[attr-defined]

    # stop, then regenerate, in one tab while the other chats on
    t = tabs[0]
    n = t.locator("#messages li").count()
    _set(t, "#max-tokens", "400")
    t.click("#regenerate")
    t.wait_for_function("() => document.querySelectorAll('#messages li:last-child .tok').length >= 3", timeout=REPLY_MS)
    t.click("#stop")
    _wait_reply(t, n)
    assert t.inner_text("#messages li:last-child .meta").startswith("stopped")
    for p in tabs:
        p.close()
