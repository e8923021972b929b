"""Headless Chromium for the report tests: open pages as a user would and measure them.

One browser start loads every page, each in its own 1280 px wide frame of a harness page;
a script there measures each page once it has loaded (width, images, the answer table)
and writes the measures into the harness's DOM, which ``--dump-dom`` prints. Nothing
but the local files is opened: the flags turn off every background connection.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
INSTALL = "apt-get update && apt-get install -y chromium (Debian, as root; `make test` does it)"

# Runs inside the harness: one frame per page; when every frame has loaded, the measures
# of each page go into <pre id="result"> as JSON.
_SCRIPT = """
const pages = JSON.parse(document.getElementById('pages').textContent);
const out = {};
let left = pages.length;
function measure(d) {
  const root = d.documentElement, view = root.clientWidth;
  const answer = d.querySelector('table.answer');
  const imgs = [...d.images], svgs = [...d.querySelectorAll('figure svg')];
  return {
    page_width_px: root.scrollWidth, view_width_px: view,
    images: imgs.length,
    broken_images: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
    svg_figures: svgs.length,
    empty_svgs: svgs.filter(s => s.getBoundingClientRect().height < 50).length,
    figures_past_edge: [...imgs, ...svgs].filter(
      e => e.getBoundingClientRect().right > view + 0.5).length,
    headline: (d.querySelector('.headline') || {}).textContent || null,
    answer_rows: answer ? answer.tBodies[0].rows.length : 0,
    answer_bottom_px: answer ? answer.getBoundingClientRect().bottom : null,
    best_marked: d.querySelectorAll('table.answer tr.best').length,
    details: d.querySelectorAll('details').length,
    ...zoom(d),
  };
}
function zoom(d) {  // click the first figure: its width before and after, the page's after
  const img = d.querySelector('figure img');
  if (!img) return {zoom_ratio: null, zoomed_page_width_px: null};
  const before = img.getBoundingClientRect().width;
  img.click();
  const after = img.getBoundingClientRect().width, page = d.documentElement.scrollWidth;
  img.click();
  return {zoom_ratio: after / before, zoomed_page_width_px: page};
}
for (const p of pages) {
  const f = document.createElement('iframe');
  f.style.cssText = 'width:1280px;height:900px;border:0;display:block';
  f.onload = () => {
    try { out[p] = measure(f.contentDocument); } catch (e) { out[p] = {error: String(e)}; }
    if (--left === 0) document.getElementById('result').textContent = JSON.stringify(out);
  };
  f.src = p;
  document.body.appendChild(f);
}
"""


def chromium() -> str | None:
    """The path of Debian's ``chromium`` (or a ``chromium-browser``/``google-chrome``),
    None when none is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args: list[str], timeout_s: float) -> str:
    """Chromium with :data:`FLAGS`, a fresh profile folder and ``args``; its stdout.
    Raises RuntimeError with its stderr when it fails or is missing."""
    exe = chromium()
    if exe is None:
        raise RuntimeError(f"chromium is not installed: {INSTALL}")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        res = subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "HOME": profile},  # why: no writes to the user's own profile
        )
    if res.returncode != 0:
        raise RuntimeError(f"chromium exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout


def measure_pages(pages: list[Path], timeout_s: float = 120) -> dict[Path, dict]:
    """Open every page (HTML files) in one headless Chromium, each in a 1280 x 900 px
    frame, and return per page: ``page_width_px`` (the document's scroll width: above
    ``view_width_px`` when something runs past the right edge), ``images``,
    ``broken_images`` (alt texts of images that did not decode), ``svg_figures``,
    ``empty_svgs``, ``figures_past_edge``, ``headline`` (text of ``.headline``),
    ``answer_rows`` (body rows of ``table.answer``), ``answer_bottom_px`` (its bottom edge
    from the top of the page: within 900 it is on the first screen), ``best_marked``
    (rows ``tr.best`` of the answer), ``details`` (folded sections), ``zoom_ratio`` (the
    first figure's width after a click over its width before; None without a figure) and
    ``zoomed_page_width_px`` (the page's width while it is zoomed).
    Raises RuntimeError when chromium is missing, fails or measures nothing."""
    urls = {p.resolve().as_uri(): p for p in pages}
    with tempfile.TemporaryDirectory(prefix="report-harness-") as tmp:
        harness = Path(tmp) / "harness.html"
        listing = json.dumps(list(urls)).replace("</", "<\\/")  # why: inert inside <script>
        harness.write_text(
            "<!doctype html><html><body style='margin:0'>"
            f"<script type='application/json' id='pages'>{listing}"
            "</script><pre id='result'>pending</pre>"
            f"<script>{_SCRIPT}</script></body></html>"
        )
        dom = _run(
            [
                "--allow-file-access-from-files",  # why: the harness reads its frames' DOM
                "--window-size=1300,1000",
                "--virtual-time-budget=20000",
                "--dump-dom",
                harness.as_uri(),
            ],
            timeout_s,
        )
    start = dom.find('<pre id="result">')
    end = dom.find("</pre>", start)
    text = html.unescape(dom[start + len('<pre id="result">') : end]) if start >= 0 else ""
    try:
        got = json.loads(text)
    except json.JSONDecodeError:
        raise RuntimeError(f"the harness measured nothing; its result: {text[:300]!r}") from None
    return {urls[u]: m for u, m in got.items()}


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 900) -> Path:
    """Write a ``width`` x ``height`` px PNG of the top of ``page`` as headless Chromium
    draws it (a first screen); returns ``png``. Raises RuntimeError when chromium fails."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}",
          page.resolve().as_uri()], 120)  # fmt: skip
    return png


if __name__ == "__main__":  # python -m tests.browser PAGE.html OUT.png: a first-screen screenshot
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m tests.browser PAGE.html OUT.png")
    print(screenshot(Path(sys.argv[1]), Path(sys.argv[2])))
