"""What a search shows in the MLflow UI, opened in headless Chromium (issue 30, item 4).

    pip install playwright          # its Python package only: not a project dependency
    apt-get install chromium        # the browser it drives (no `playwright install`)
    python benchmarks/check_mlflow_pages.py             # about a minute on 2 cores
    python benchmarks/check_mlflow_pages.py --refresh   # update benchmarks/results/mlflow_pages.md

Runs small searches (Llama-2-7B on one Ascend node: TPE and NSGA-II with 20 trials each, and
the grid) into a fresh SQLite tracking store in a temporary folder, starts ``mlflow server`` on
127.0.0.1 on a free port against it, and opens in headless Chromium, for each search's run, in
a fresh browser context each (nothing cached):

- the run page (``#/experiments/E/runs/R``), loaded once its description and metrics show;
- ``plots.html`` in the UI's artifact view (``.../artifacts/plots.html``), loaded once every
  plot of its preview is drawn;
- ``plots.html`` itself, fetched from the server and opened as a file (offline, as one who
  downloads it), loaded once every plot is drawn.

It fails (exit 1, one line per problem on stderr) on a console error or an uncaught exception
of a page, or a page that takes more than ``--limit-s`` (5) seconds from navigation until it
is loaded so. Console errors of MLflow's own UI that no run causes are listed in :data:`KNOWN`
with their reason, reported and not counted (``--strict`` counts them). Not a test and not in
CI: the browser is no dependency of the project.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from _results import add_output_options
from _results import write_result

REPO = Path(__file__).resolve().parents[1]
SEARCH = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1")
SEARCHES = {  # name -> the search's own options
    "tpe": ("search.sampler=tpe", "search.n_trials=20"),
    "nsga2": ("search.sampler=nsga2", "search.n_trials=20"),
    "grid": ("search.sampler=grid",),
}
# Chromium's own outbound connections are refused on a closed network: off.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# Console errors of MLflow's UI itself, whatever the run: (URL ending, text part, reason).
KNOWN = (
    (
        "/ajax-api/2.0/mlflow/users/current",
        "404",
        "MLflow's UI asks for the signed-in user of its basic-auth app, which a server "
        "started without `--app-name basic-auth` does not serve (MLflow 3.17)",
    ),
)
WAIT_S = 30.0  # longest wait for a page to load (past --limit-s it fails all the same)
SETTLE_MS = 1000  # after loading, how long late console messages are still collected
# Plots drawn on the page (plotly marks a drawn plot's div with _fullLayout and an svg).
DRAWN = (
    "[...document.querySelectorAll('.js-plotly-plot')]"
    ".filter(d => d._fullLayout && d.querySelector('.main-svg')).length"
)


@dataclass
class Page:
    """One page opened: how long it took to load and what its console said."""

    search: str
    name: str
    url: str
    seconds: float | None = None  # None: not loaded within WAIT_S
    errors: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)

    def problems(self, limit_s: float, strict: bool) -> list[str]:
        """One line per problem of this page."""
        where = f"{self.search} {self.name}"
        lines = [f"{where}: console error: {error}" for error in self.errors]
        if strict:
            lines += [f"{where}: console error (MLflow's own): {k}" for k in self.known]
        if self.seconds is None:
            lines.append(f"{where}: not loaded within {WAIT_S:.0f} s ({self.url})")
        elif self.seconds > limit_s:
            lines.append(f"{where}: loaded in {self.seconds:.2f} s, over {limit_s:g} s")
        return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_search(name: str, folder: Path, uri: str) -> dict[str, Any]:
    """The JSON object of one search (``output=json``) recorded in ``uri``."""
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", *SEARCH, *SEARCHES[name], f"tracking.uri={uri}"]
        + [f"launch_dir={folder / 'launch' / name}", "output=json"],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"error: the {name} search failed: {proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout))


@contextmanager
def mlflow_server(uri: str, folder: Path) -> Iterator[str]:
    """``mlflow server`` on a free loopback port against ``uri``: its base URL, once healthy."""
    port = free_port()
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, server, folder / "server.log")
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _wait_healthy(base: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"error: mlflow server ended: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"error: mlflow server not healthy within 120 s: {log.read_text()[-2000:]}")


def _experiment(base: str, run_id: str) -> str:
    url = f"{base}/api/2.0/mlflow/runs/get?run_id={run_id}"
    with urllib.request.urlopen(url, timeout=20) as answer:  # noqa: S310 - loopback
        return str(json.load(answer)["run"]["info"]["experiment_id"])


def _download(base: str, run_id: str, path: str, target: Path) -> Path:
    query = urllib.parse.urlencode({"path": path, "run_uuid": run_id})
    with urllib.request.urlopen(f"{base}/get-artifact?{query}", timeout=60) as answer:  # noqa: S310
        target.write_bytes(answer.read())
    return target


def _known(url: str, text: str) -> str | None:
    """The reason of a known MLflow console error (None for any other)."""
    path = urllib.parse.urlsplit(url).path
    for ending, part, reason in KNOWN:
        if path.endswith(ending) and part in text:
            return f"{text} ({path}): {reason}"
    return None


def _drawn(page: Any, plots: int) -> bool:
    """Whether some frame of ``page`` has drawn all ``plots``."""
    for frame in page.frames:
        try:
            if frame.evaluate(DRAWN) >= plots:
                return True
        except Exception:  # noqa: BLE001 - a frame going away while looked at
            continue
    return False


def _wait(ready: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.05)
    return False


def open_page(browser: Any, page: Page, ready: Callable[[Any], bool]) -> Page:
    """Open ``page.url`` in a fresh context; time it until ``ready(page)``; collect its
    console errors and uncaught exceptions (every frame's)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()

    def console(message: Any) -> None:
        if message.type != "error":
            return
        url = message.location.get("url", "")
        known = _known(url, message.text)
        if known is not None:
            page.known.append(known)
        else:
            page.errors.append(f"{message.text} ({url})" if url else message.text)

    tab.on("console", console)
    tab.on("pageerror", lambda error: page.errors.append(f"uncaught: {error}"))
    started = time.perf_counter()
    try:
        tab.goto(page.url, wait_until="load", timeout=WAIT_S * 1000)
    except Exception as exc:  # noqa: BLE001 - Playwright's timeout or a refused page
        page.errors.append(f"navigation failed: {str(exc).splitlines()[0]}")
    else:
        if _wait(lambda: ready(tab)):
            page.seconds = time.perf_counter() - started
    tab.wait_for_timeout(SETTLE_MS)
    context.close()
    return page


def _run_page_ready(tab: Any) -> bool:
    """The run page shows its description and its metrics."""
    return bool(
        tab.get_by_text("Best layout:").count() and tab.get_by_text("best_step_time_s").count()
    )


def check_run(browser: Any, base: str, name: str, run_id: str, folder: Path) -> list[Page]:
    """The three pages of one search's run."""
    experiment = _experiment(base, run_id)
    plots_file = _download(base, run_id, "plots.html", folder / f"plots-{name}.html")
    plots = plots_file.read_text().count("Plotly.newPlot(")
    run_url = f"{base}/#/experiments/{experiment}/runs/{run_id}"
    return [
        open_page(browser, Page(name, "run page", run_url), _run_page_ready),
        open_page(
            browser,
            Page(name, "plots.html in the UI", f"{run_url}/artifacts/plots.html"),
            lambda tab: _drawn(tab, plots),
        ),
        open_page(
            browser,
            Page(name, "plots.html as a file", plots_file.as_uri()),
            lambda tab: _drawn(tab, plots),
        ),
    ]


def _launch(playwright: Any, chromium: str) -> Any:
    return playwright.chromium.launch(executable_path=chromium, args=list(CHROMIUM_FLAGS))


def report(
    pages: list[Page], outputs: dict[str, dict[str, Any]], versions: str, limit_s: float
) -> str:
    """The Markdown result: each page's load time and console, each search's pick and gap."""
    lines = [
        f"Headless-Chromium check of a search's MLflow pages ({versions}; limit {limit_s:g} s "
        "per page, from navigation until the run's description and metrics, or every plot, "
        "show; a fresh browser context per page). `python benchmarks/check_mlflow_pages.py`",
        "",
        "| search | page | loaded in | console errors | MLflow's own (not counted) |",
        "|---|---|---|---|---|",
    ]
    for page in pages:
        loaded = "not loaded" if page.seconds is None else f"{page.seconds:.2f} s"
        lines.append(
            f"| {page.search} | {page.name} | {loaded} | {len(page.errors)} | {len(page.known)} |"
        )
    known = sorted({k for page in pages for k in page.known})
    if known:
        lines += ["", "MLflow's own console errors, on every run page:", ""]
        lines += [f"- {k}" for k in known]
    lines += ["", "The searches (chosen layout; sampler gap):", ""]
    for name, payload in outputs.items():
        gap = payload.get("sampler_gap")
        gap_text = "no sampler" if gap is None else _gap_text(gap)
        lines.append(f"- {name}: {_layout_text(payload['best'])}; {gap_text}")
    return "\n".join(lines)


def _gap_text(gap: dict[str, Any]) -> str:
    if gap["gap_pct"] is None:
        return f"gap unknown ({gap['unknown']})"
    return f"gap {gap['gap_pct']:.2f}%"


def _layout_text(layout: dict[str, Any]) -> str:
    keys = ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute")
    return " ".join(f"{k}={layout[k]}" for k in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser to drive")
    parser.add_argument("--limit-s", type=float, default=5.0, help="most seconds per page")
    parser.add_argument("--strict", action="store_true", help="count MLflow's own errors too")
    parser.add_argument("--searches", default=",".join(SEARCHES), help=f"of {', '.join(SEARCHES)}")
    add_output_options(parser)
    args = parser.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit(
            "error: needs Playwright's Python package: pip install playwright"
        ) from None
    if not Path(args.chromium).is_file():
        raise SystemExit(f"error: no browser at {args.chromium}: apt-get install chromium")
    names = [n for n in args.searches.split(",") if n]
    if not names or set(names) - set(SEARCHES):
        raise SystemExit(f"error: --searches takes names of {', '.join(SEARCHES)}")
    with tempfile.TemporaryDirectory(prefix="mlflow-pages-") as temporary:
        folder = Path(temporary)
        uri = f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}"
        outputs = {name: run_search(name, folder, uri) for name in names}
        with mlflow_server(uri, folder) as base, sync_playwright() as playwright:
            browser = _launch(playwright, args.chromium)
            pages = [
                page
                for name, payload in outputs.items()
                for page in check_run(browser, base, name, payload["mlflow_run_id"], folder)
            ]
            versions = f"MLflow {_mlflow_version()}, Chromium {browser.version}"
            browser.close()
    write_result(args, "mlflow_pages.md", report(pages, outputs, versions, args.limit_s))
    problems = [line for page in pages for line in page.problems(args.limit_s, args.strict)]
    for line in problems:
        print(line, file=sys.stderr)
    sys.exit(1 if problems else 0)


def _mlflow_version() -> str:
    from importlib.metadata import version

    return version("mlflow")


if __name__ == "__main__":
    main()
