"""The demo page driven in headless Debian Chromium through Playwright: upload an image, click Caption, see
the caption; a bad file gives a readable message; no request leaves 127.0.0.1. Screenshots are saved under
``$CAPTIONER_ARTIFACTS`` (default ``tests/artifacts/``)."""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest
from PIL import Image

from captioner.demo import build_app, launch
from tests.demo_fakes import FakePipeline

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} not found: install it with `scripts/setup.sh --dev` (Debian chromium)"),
    pytest.mark.filterwarnings("ignore:'future.no_silent_downcasting'", "ignore:The copy keyword is deprecated"),
]


def artifacts_dir() -> Path:
    d = Path(os.environ.get("CAPTIONER_ARTIFACTS") or Path(__file__).parent / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAPTIONER_HOME", str(tmp_path_factory.mktemp("demo-home")))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        app = build_app(FakePipeline())
        try:
            launch(app, host="127.0.0.1", port=port, block=False, quiet=True)
            yield app
        finally:
            app.close()


@pytest.fixture(scope="module")
def page(server, tmp_path_factory):
    """One Chromium with a fresh profile in tmp; every request the page makes is recorded."""
    sync_api = pytest.importorskip("playwright.sync_api")
    sync_api.expect.set_options(timeout=30_000)  # a loaded two-core machine: 5 s is not always enough
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1280, "height": 1000})
        try:
            pg = ctx.new_page()
            pg.requests = []
            pg.on("request", lambda r: pg.requests.append(r.url))
            pg.set_default_timeout(30_000)
            pg.goto(server.local_url, wait_until="networkidle")
            yield pg
        finally:
            ctx.close()


def upload_and_caption(page, path):
    page.locator("#caption-image input[type=file]").set_input_files(str(path))
    page.locator("#caption-btn").click()


def test_upload_click_and_the_caption_appears(page, tmp_path):
    from playwright.sync_api import expect

    red = tmp_path / "red.png"
    Image.new("RGB", (160, 120), (255, 0, 0)).save(red)
    upload_and_caption(page, red)
    expect(page.locator("#caption-out textarea")).to_have_value("decoded: a red fire truck.")
    expect(page.locator("#caption-table")).to_contain_text("a red fire truck.")
    expect(page.locator("#caption-timings")).to_contain_text("rotate + retrieve")
    page.screenshot(path=str(artifacts_dir() / "demo-caption.png"), full_page=True)


def test_a_file_that_is_not_an_image_gives_a_message(page, tmp_path):
    from playwright.sync_api import expect

    bad = tmp_path / "notes.png"
    bad.write_text("definitely not a PNG")
    upload_and_caption(page, bad)
    expect(page.locator("#caption-status")).to_contain_text("could not read 'notes.png'")
    expect(page.locator("#caption-out textarea")).to_have_value("")
    page.screenshot(path=str(artifacts_dir() / "demo-bad-image.png"), full_page=True)


def test_an_example_click_then_caption(page, server):
    """Clicking an example loads it into the image box; its caption is what the handler gives that file."""
    from playwright.sync_api import expect

    first = page.locator("#caption-examples button, #caption-examples img").first
    first.click()
    name = Path(server.examples[0]).stem
    # the example loads through an event of its own: click Caption only once it is in the image box
    expect(page.locator("#caption-image img").first).to_have_attribute("src", re.compile(re.escape(name)))
    page.locator("#caption-btn").click()
    want = server.handlers.caption(server.examples[0])[0]
    assert want
    expect(page.locator("#caption-out textarea")).to_have_value(want)
    expect(page.locator("#caption-status")).to_have_text("")


def test_zero_shot_tab_shows_top5_bars(page, tmp_path):
    from playwright.sync_api import expect

    green = tmp_path / "green.png"
    Image.new("RGB", (64, 64), (0, 255, 0)).save(green)
    page.get_by_role("tab", name="Zero-shot").click()
    page.locator("#zeroshot-image input[type=file]").set_input_files(str(green))
    page.locator("#labels textarea").fill("red\ngreen\nblue\ncat\ndog\nfish")
    page.locator("#classify-btn").click()
    expect(page.locator("#classify-out")).to_contain_text("green")
    expect(page.locator("#classify-table")).to_contain_text("green")
    page.screenshot(path=str(artifacts_dir() / "demo-zeroshot.png"), full_page=True)


def test_alignment_tab(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Alignment").click()
    page.locator("#alignment-btn").click()
    expect(page.locator("#alignment-table")).to_contain_text("mutual_knn")
    expect(page.locator("#alignment-summary")).to_contain_text("150 image-caption pairs")
    expect(page.locator("#alignment-plot img, #alignment-plot svg").first).to_be_visible()
    page.screenshot(path=str(artifacts_dir() / "demo-alignment.png"), full_page=True)


def test_no_request_leaves_loopback(page, server):
    """Runs last in this module: everything the page fetched so far (scripts, fonts, uploads, results)."""
    host = server.local_url.rstrip("/")
    outside = [u for u in page.requests if not u.startswith((host, "data:", "blob:"))]
    assert page.requests and outside == []
