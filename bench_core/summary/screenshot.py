"""A report opened in headless Chromium with the network cut off: a screenshot of its first screen
(docs/report.png), and what the page asked of the network and logged (tests/test_report.py checks it).

    python -m bench_core.summary.screenshot outputs/default/report.html docs/report.png

Needs playwright (the test extra) and a Chromium: the system one (Debian's chromium) when it is on
the PATH, else playwright's own (`playwright install chromium`).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from bench_core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ConfigError

WIDTH, HEIGHT = 1200, 900    # the first screen of a laptop browser window, CSS pixels
NETWORK = re.compile(r"^(https?|wss?|ftp)://", re.IGNORECASE)
# Every interactive table of the report has been set up by DataTables (which adds the class).
TABLES_READY = ("() => [...document.querySelectorAll('table[id^=itables_]')]"
                ".every(t => t.classList.contains('dataTable'))")
READY_TIMEOUT_MS = 30_000


@dataclass
class PageLog:
    """What the page did while it was open."""

    requests: list[str] = field(default_factory=list)        # every URL asked for (file:, data:, blob: too)
    failed: list[str] = field(default_factory=list)          # "URL: reason" of each request that failed
    console_errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions

    @property
    def network(self) -> list[str]:
        return [url for url in self.requests if NETWORK.match(url)]


def chromium() -> str | None:
    """The system Chromium, if there is one (playwright cannot download its own everywhere)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def offline_page(report: Path, width: int = WIDTH, height: int = HEIGHT,
                 scripts: bool = True) -> Iterator[tuple[object, PageLog]]:
    """The report opened in headless Chromium, offline, every network request refused, its tables
    set up; yields (playwright page, PageLog). `scripts=False` opens it as a mail previewer does:
    no script runs, the tables are their static previews."""
    from playwright.sync_api import (
        sync_playwright,  # a test extra, needed only by this tool
    )

    log = PageLog()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": width, "height": height}, offline=True,
                                          java_script_enabled=scripts)
            context.route(NETWORK, lambda route: route.abort("internetdisconnected"))
            page = context.new_page()
            page.on("request", lambda request: log.requests.append(request.url))
            page.on("requestfailed", lambda request: log.failed.append(f"{request.url}: {request.failure}"))
            page.on("console", lambda message: log.console_errors.append(message.text)
                    if message.type == "error" else None)
            page.on("pageerror", lambda error: log.console_errors.append(str(error)))
            page.goto(Path(report).resolve().as_uri(), wait_until="load")
            if scripts:
                page.wait_for_function(TABLES_READY, timeout=READY_TIMEOUT_MS)
            yield page, log
        finally:
            browser.close()


def save_screenshot(report: Path, out_png: Path, width: int = WIDTH, height: int = HEIGHT) -> PageLog:
    """The report's first screen (width x height) as a PNG, written atomically."""
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_png.parent, prefix=f".{out_png.name}.", suffix=".png")
    os.close(fd)
    try:
        with offline_page(report, width, height) as (page, log):
            page.screenshot(path=tmp)
        os.replace(tmp, out_png)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return log


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench_core.summary.screenshot",
                                description="Screenshot of the first screen of a report.html, opened offline "
                                            "in headless Chromium (for docs/report.png).")
    p.add_argument("report", help="the report.html to open")
    p.add_argument("out", help="the PNG file to write")
    p.add_argument("--width", type=int, default=WIDTH, help=f"window width in CSS pixels (default {WIDTH})")
    p.add_argument("--height", type=int, default=HEIGHT, help=f"window height in CSS pixels (default {HEIGHT})")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        report, out = Path(args.report), Path(args.out)
        if not report.is_file() or report.suffix.lower() not in (".html", ".htm"):
            raise ConfigError("report", f"{str(report)!r} is not an .html file; allowed: a report.html written by "
                              "bench report / bench sweep")
        if out.suffix.lower() != ".png":
            raise ConfigError("out", f"must be a .png file, got {str(out)!r}")
        for name, value in (("--width", args.width), ("--height", args.height)):
            if not 200 <= value <= 10_000:
                raise ConfigError(name, f"must be 200 to 10000 CSS pixels, got {value}")
    except ConfigError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        log = save_screenshot(report, out, args.width, args.height)
    except ImportError:
        print(f"{parser.prog}: error: needs playwright (pip install -e '.[test]')", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - a browser that would not start or a page that never got ready
        print(f"{parser.prog}: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return EXIT_FAILED
    for line in log.console_errors + log.failed:
        print(f"{parser.prog}: warning: the page logged: {line}", file=sys.stderr)
    print(out)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
