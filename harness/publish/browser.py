"""A rendered report as a reader's browser shows it: headless Chromium, driven over the DevTools
protocol through a pipe (`--remote-debugging-pipe`: JSON messages ended by NUL on file descriptors 3
and 4), so nothing beyond the standard library and the `chromium` command is needed.

`check_page` opens one `index.html` at a viewport width and says what a reader would meet: images
that did not load, console errors (scripts, failed resource loads), elements that stick out past the
viewport without a scrolling box to hold them, whether the last column of the page's first table can
be scrolled into view, and a PNG of the first screen.

    python -m harness.publish.browser --out .cache/screenshots results/*/report/index.html
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import UserError

# Runs in the page after its load event. "Too wide" is an element whose right edge passes the
# viewport and that no ancestor with its own horizontal scrolling (or clipping) holds inside it.
_PROBE = r"""
(() => {
  const vw = document.documentElement.clientWidth;
  // A figure's smallest text as shown: its size in the picture's pixels (data-text-px, or
  // data-narrow-text-px where the viewport picked the narrow source) times the scale it is drawn at.
  const images = [...document.images].map(i => {
    const narrow = i.currentSrc && i.currentSrc !== i.src && i.dataset.narrowTextPx;
    const px = parseFloat(narrow ? i.dataset.narrowTextPx : i.dataset.textPx);
    const width = i.getBoundingClientRect().width;
    return {src: (i.getAttribute('src') || '').slice(0, 120), loaded: i.complete && i.naturalWidth > 0, width,
            narrow: Boolean(narrow), textShown: (px && i.naturalWidth) ? px * width / i.naturalWidth : null};
  });
  // Tables with no data cell that holds text (a header and nothing under it, or blank cells).
  const emptyTables = [...document.querySelectorAll('main table, body > table')].filter(
    (t) => ![...t.querySelectorAll('td')].some((c) => c.textContent.trim())).length;
  // The answer figure: where its top sits with the page at the top.
  const fig = document.querySelector('#fig-answer img');
  const answerFigure = fig ? {top: fig.getBoundingClientRect().top + window.scrollY,
                              width: fig.getBoundingClientRect().width} : null;
  const held = (el) => {
    for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
      if (/(auto|scroll|hidden|clip)/.test(getComputedStyle(a).overflowX)) return true;
    }
    return false;
  };
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.right + window.scrollX > vw + 1 && !held(el)) {
      wide.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''} right=${Math.round(r.right)}`);
    }
  }
  let lastColumn = null;
  const table = document.querySelector('table');
  if (table && table.rows.length) {
    const row = table.rows[0];
    const cell = row.cells[row.cells.length - 1];
    // A reader scrolls boxes with overflow auto/scroll and the page; a hidden/clip box only a script can.
    let clippedBy = null;
    const c0 = cell.getBoundingClientRect();
    for (let a = cell.parentElement; a && a !== document.documentElement; a = a.parentElement) {
      if (/(hidden|clip)/.test(getComputedStyle(a).overflowX) && c0.right > a.getBoundingClientRect().right + 1) {
        clippedBy = a.tagName.toLowerCase(); break;
      }
    }
    cell.scrollIntoView({block: 'nearest', inline: 'end'});
    const r = cell.getBoundingClientRect();
    lastColumn = {text: cell.textContent.trim().slice(0, 60), left: r.left, right: r.right, clippedBy,
                  visible: clippedBy === null && r.left >= -1 && r.right <= vw + 1 && r.width > 0};
    window.scrollTo(0, 0);
    for (let a = cell.parentElement; a; a = a.parentElement) a.scrollLeft = 0;
  }
  // The answer-first table: the first table after the "The answer" heading. Where its top sits with
  // the page at the top, and whether its ratio column can be brought into view.
  let answer = null;
  const heading = document.getElementById('the-answer');
  const after = heading && Array.from(document.querySelectorAll('table')).find(
    (t) => heading.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING);
  if (after && after.rows.length > 1) {
    window.scrollTo(0, 0);
    const top = after.getBoundingClientRect().top + window.scrollY;
    const head = Array.from(after.rows[0].cells);
    let col = head.findIndex((c) => /ratio/i.test(c.textContent));
    if (col < 0) col = head.length - 1;
    const cell = after.rows[1].cells[col];
    cell.scrollIntoView({block: 'nearest', inline: 'end'});
    const r = cell.getBoundingClientRect();
    answer = {top, ratioText: cell.textContent.trim().slice(0, 40),
              ratioVisible: r.left >= -1 && r.right <= vw + 1 && r.width > 0};
    window.scrollTo(0, 0);
    for (let a = cell.parentElement; a; a = a.parentElement) a.scrollLeft = 0;
  }
  // Tables wider than their box (they scroll inside it): a reader at a desktop width should not have to.
  const scrolling = [...document.querySelectorAll('main table, body > table')].filter(
    (t) => t.scrollWidth > t.clientWidth + 1).map((t) => {
      const head = t.rows.length ? [...t.rows[0].cells].map((c) => c.textContent.trim()).join(' | ') : '';
      return `${head.slice(0, 80)} (${t.scrollWidth} > ${t.clientWidth} px)`;
    });
  return JSON.stringify({viewport: vw, scrollWidth: document.documentElement.scrollWidth, scrolling,
                         title: document.title, images, wide: wide.slice(0, 20), nWide: wide.length,
                         lastColumn, answer, emptyTables, answerFigure});
})()
"""


# The smallest text a figure may show, in CSS px: a reader on a phone reads 7 px text without zooming
# (barely); a figure drawn wider than its column shows its 8 pt text at 4 px (harness.publish.narrow).
LEGIBLE_PX = 7.0


@dataclass(kw_only=True)
class PageCheck:
    """What one page showed at one viewport width."""

    page: Path
    width: int
    title: str
    images: list[dict[str, Any]]
    console_errors: list[str]
    too_wide: list[str]
    n_too_wide: int
    scroll_width: int
    last_column: dict[str, Any] | None
    answer: dict[str, Any] | None = None   # the answer table: its top (px from the page's top), ratio column
    answer_figure: dict[str, Any] | None = None   # the answer matrix (#fig-answer): its top and width
    empty_tables: int = 0
    scrolling_tables: list[str] = field(default_factory=list)   # tables wider than their box
    height: int = 900
    screenshot: Path | None = None
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        bad = [i["src"] for i in self.images if not i["loaded"] or not i.get("width", 1)]
        if bad:
            self.problems.append(f"{len(bad)} image(s) did not load or are drawn zero wide: {bad[:3]}")
        small = [f"{i['src'][:40]}… text {i['textShown']:.1f} px" for i in self.images
                 if i.get("textShown") is not None and i["textShown"] < LEGIBLE_PX]
        if small:
            self.problems.append(f"{len(small)} figure(s) show text under {LEGIBLE_PX:g} px: {small[:3]}")
        if self.empty_tables:
            self.problems.append(f"{self.empty_tables} empty table(s)")
        if self.console_errors:
            self.problems.append(f"console errors: {self.console_errors[:3]}")


def find_chromium(name: str = "chromium") -> str | None:
    """The Chromium command: `name` on PATH, else the usual Debian/Ubuntu names."""
    for n in (name, "chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(n)
        if exe:
            return exe
    return None


class Chromium:
    """One headless Chromium and a DevTools session on one tab, over the debugging pipe."""

    def __init__(self, exe: str, *, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.mkdtemp(prefix="harness-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends go above 9 first: `3<&r 4>&w` would clobber w if it were fd 3 itself.
        to_browser_r, from_browser_w = (self._high(fd) for fd in (to_browser_r, from_browser_w))
        self._log = open(Path(self._profile) / "chromium.log", "w+b")
        args = ["--headless", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--no-sandbox", "--disable-extensions", "--mute-audio",
                "--hide-scrollbars", f"--user-data-dir={self._profile}", "about:blank"]
        # The protocol wants its pipe on fds 3 (commands in) and 4 (replies out); bash puts them there
        # (dash, Debian's sh, takes no fd above 9).
        self._proc = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w}', exe, *args],
            pass_fds=(to_browser_r, from_browser_w), stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=self._log, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    @staticmethod
    def _high(fd: int) -> int:
        import fcntl

        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    def _log_tail(self) -> str:
        self._log.seek(0)
        lines = [ln for ln in self._log.read().decode(errors="replace").splitlines() if ln.strip()]
        return f" (its last output: {lines[-1]})" if lines else ""

    def _read_message(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("chromium: no answer from the DevTools pipe")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium: the DevTools pipe closed (the browser exited)" + self._log_tail())
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False) -> dict[str, Any]:
        """Send one command and wait for its answer; events that arrive meanwhile are kept."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"chromium: {method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            ev = self._read_message(deadline)
            if ev.get("method") == method:
                return ev
            self.events.append(ev)

    def close(self) -> None:
        try:
            os.write(self._to_browser, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self._proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self._proc.pid, 9)
            self._proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            self._log.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    """Errors a reader's console would show; a served page's missing /favicon.ico, which the browser
    asks for by itself, is none of the page's."""
    errs = []
    for ev in events:
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errs.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            errs.append(str(d.get("exception", {}).get("description") or d.get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            if str(e.get("url", "")).endswith("/favicon.ico"):
                continue
            errs.append(f"{e.get('text')} {e.get('url', '')}".strip())
    return errs


def check_page(browser: Chromium, page: Path, *, width: int, height: int = 900,
               screenshot: Path | None = None, url: str | None = None) -> PageCheck:
    """Open `page` (at `url` where given: a served site, whose scripts a file:// page may not load)
    in a fresh tab state at `width` x `height` CSS pixels and look at it."""
    page = page.resolve()
    if not page.is_file():
        raise UserError(f"{page}: no such page")
    s = {"session": True}
    browser.events.clear()
    for domain in ("Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", **s)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, **s)
    browser.send("Page.navigate", {"url": url or page.as_uri()}, **s)
    browser.wait_event("Page.loadEventFired")
    # Late console messages (scripts run on load) arrive as events; a no-op round trip collects them.
    time.sleep(0.3)
    browser.send("Runtime.evaluate", {"expression": "1"}, **s)
    got = browser.send("Runtime.evaluate", {"expression": _PROBE, "returnByValue": True}, **s)
    if "exceptionDetails" in got:
        raise RuntimeError(f"chromium: the page probe raised on {page}: {got['exceptionDetails'].get('text')}")
    probe = json.loads(got["result"]["value"])
    shot = None
    if screenshot is not None:
        data = browser.send("Page.captureScreenshot", {"format": "png"}, **s)["data"]
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(data))
        shot = screenshot
    return PageCheck(page=page, width=width, title=probe["title"], images=probe["images"],
                     console_errors=_console_errors(browser.events), too_wide=probe["wide"],
                     n_too_wide=probe["nWide"], scroll_width=probe["scrollWidth"],
                     last_column=probe["lastColumn"], answer=probe.get("answer"), height=height, screenshot=shot,
                     answer_figure=probe.get("answerFigure"), empty_tables=probe.get("emptyTables", 0),
                     scrolling_tables=probe.get("scrolling", []))


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on a free port of 127.0.0.1, for as long as the block runs: a site's pages
    load their scripts as modules, which a browser refuses from file:// pages. Yields the base URL."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:   # noqa: A002  (the base class's name)
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as srv:
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            yield f"http://127.0.0.1:{srv.server_address[1]}/"
        finally:
            srv.shutdown()
            t.join()


def shot_name(page: Path, width: int) -> str:
    """`results/h200/report/index.html` at 400 px → `h200-400.png` (the study folder names it)."""
    p = page.resolve()
    study = p.parent.parent.name if p.parent.name == "report" else p.parent.name
    return f"{study}-{width}.png"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.publish.browser",
                                 description="Screenshots and checks of rendered reports in headless Chromium.")
    ap.add_argument("pages", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path(".cache/screenshots"))
    ap.add_argument("--width", type=int, action="append", help="viewport widths (default 1400 and 400)")
    ap.add_argument("--chromium", default="chromium")
    a = ap.parse_args(argv)
    exe = find_chromium(a.chromium)
    if exe is None:
        print(f"error: {a.chromium}: command not found (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    bad = 0
    with Chromium(exe) as b:
        for page in a.pages:
            for w in a.width or [1400, 400]:
                try:
                    c = check_page(b, page, width=w, screenshot=a.out / shot_name(page, w))
                except UserError as e:
                    print(f"error: {e}", file=sys.stderr)
                    return 2
                bad += bool(c.problems)
                print(f"{page} @{w}px: {c.screenshot}  images {len(c.images)}, "
                      f"too wide {c.n_too_wide}, console errors {len(c.console_errors)}"
                      + (f"  PROBLEMS: {'; '.join(c.problems)}" if c.problems else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
