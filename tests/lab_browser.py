"""JupyterLab in headless Chromium: run a notebook as a student would and say what went wrong.

``LabServer`` starts ``jupyter lab`` on a free loopback port with a token, with the notebook's
windowing off (every cell stays in the page, so every output can be inspected) and the app exposed
to the page (``window.jupyterapp``, as JupyterLab's own UI tests do). ``run_in_lab`` opens one
notebook, runs all cells and compares what the kernel sent (the notebook model) with what the page
shows: a widget output must be a live widget view, an image output a loaded image.
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# Debian's package; Ubuntu calls its own chromium-browser
CHROMIUM = os.environ.get("COURSE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# A widget view that ipywidgets built; its error view has no ``widget-…`` class.
LIVE_VIEW = '.jp-OutputArea-output .jupyter-widgets[class*="widget-"]'
# What ipywidgets shows instead of a view it could not build.
BROKEN_WIDGET_TEXTS = ("Loading widgets", "Error displaying widget", "javascript error")
SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}

NOTEBOOK = "window.jupyterapp.shell.currentWidget"
KERNEL_READY = f"""path => {{ const nb = window.jupyterapp && {NOTEBOOK};
  return !!(nb && nb.context && nb.context.path === path && nb.model && nb.sessionContext
            && nb.sessionContext.session && nb.sessionContext.session.kernel
            && nb.sessionContext.session.kernel.status === 'idle'); }}"""
FINISHED = f"""() => {{ const nb = {NOTEBOOK};
  const cells = [...nb.model.cells].filter(c => c.type === 'code');
  const failed = cells.some(c => [...Array(c.outputs.length).keys()]
                                   .some(i => c.outputs.get(i).type === 'error'));
  const idle = nb.sessionContext.session.kernel.status === 'idle';
  return idle && (failed || cells.every(c => c.executionCount !== null)); }}"""
MODEL = f"""() => [...{NOTEBOOK}.model.cells].map(c => ({{
  type: c.type, source: c.sharedModel.getSource(),
  count: c.type === 'code' ? c.executionCount : null,
  outputs: c.type === 'code'
    ? [...Array(c.outputs.length).keys()].map(i => c.outputs.get(i).toJSON()) : [] }}))"""
# Top-level outputs only: an Output widget nests output areas of its own.
PAGE = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map(cell => {
  const area = cell.querySelector('.jp-OutputArea');
  if (!area) return [];
  return [...area.children].filter(child => child.classList.contains('jp-OutputArea-child'))
    .map(child => child.querySelector(':scope > .jp-OutputArea-output')).filter(Boolean)
    .map(out => ({ live: !!out.querySelector('.jupyter-widgets[class*="widget-"]'),
                   text: out.innerText.slice(0, 300),
                   image: [...out.querySelectorAll('img')]
                            .some(img => img.complete && img.naturalWidth > 0) }));
})"""


@dataclass
class LabRun:
    """What one notebook did in JupyterLab."""

    code_cells: int = 0
    executed: int = 0
    widgets: int = 0
    closed_widgets: int = 0
    images: int = 0
    seconds: float = 0.0
    problems: list = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LabServer:
    """``jupyter lab`` serving ``root`` on loopback, for the length of a ``with`` block, run by
    ``python`` with ``env``."""

    def __init__(self, root: Path, env: dict, python=sys.executable):
        self.root = Path(root)
        self.python = python
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.env = env

    def __enter__(self):
        settings = self.root.parent / f"{self.root.name}-lab-settings"
        for name, values in SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        self.log = open(self.root.parent / f"{self.root.name}-lab.log", "w")
        self.process = subprocess.Popen(
            [self.python, "-m", "jupyterlab", "--no-browser", "--allow-root",
             f"--port={self.port}", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
             f"--ServerApp.root_dir={self.root}", "--LabApp.expose_app_in_browser=True",
             f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={settings}"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_until_up()
        return self

    def _wait_until_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}; see {self.log.name}")
            try:
                urllib.request.urlopen(f"{self.url('api/status')}", timeout=2)
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer within {timeout} s; see {self.log.name}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def __exit__(self, *_):
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


# A lesson's FAST run takes under a minute alone; two test workers and a loaded machine multiply
# that several times, and the test is about what the lesson shows, not how fast.
LESSON_TIMEOUT_S = 900


def run_in_lab(browser, server: LabServer, notebook: str, screenshot: Path,
               timeout_s: float = LESSON_TIMEOUT_S) -> LabRun:
    """Open ``notebook`` (relative to the server's root), run all cells, inspect every output."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    start = time.monotonic()
    try:
        # ``reset``: a fresh workspace, not the notebooks the previous page left open
        page.goto(server.url(f"lab/tree/{notebook}") + "&reset")
        page.wait_for_function(KERNEL_READY, arg=notebook, timeout=90_000, polling=250)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(FINISHED, timeout=timeout_s * 1000, polling=500)
        run = LabRun(seconds=time.monotonic() - start)
        model = page.evaluate(MODEL)
        _wait_for_views(page, sum(_count(cell, WIDGET_MIME) for cell in model))
        _inspect(run, model, page.evaluate(PAGE))
        _show_first_widget(page)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot))
        return run
    finally:
        page.evaluate(f"() => {NOTEBOOK} && {NOTEBOOK}.sessionContext.shutdown()")
        context.close()


def _count(cell: dict, mime: str) -> int:
    return sum(mime in output.get("data", {}) for output in cell["outputs"])


def _wait_for_views(page, widgets: int) -> None:
    """Widget views render after the kernel is idle; give them a moment, then judge."""
    try:
        page.wait_for_function(
            "([selector, n]) => document.querySelectorAll(selector).length >= n",
            arg=[LIVE_VIEW, widgets], timeout=15_000, polling=250)
    except Exception:  # noqa: BLE001 - missing views are reported output by output below
        pass


def _inspect(run: LabRun, model: list, page_outputs: list) -> None:
    for number, (cell, shown) in enumerate(zip(model, page_outputs, strict=True), start=1):
        if cell["type"] != "code":
            continue
        run.code_cells += 1
        run.executed += cell["count"] is not None
        first_line = (cell["source"].strip().splitlines() or [""])[0][:60]
        where = f"cell {number} ({first_line!r})"
        if cell["count"] is None and cell["source"].strip():
            run.problems.append(f"{where} did not run")
        if len(shown) != len(cell["outputs"]):
            run.problems.append(f"{where}: {len(cell['outputs'])} outputs sent, {len(shown)} shown")
        for output, element in zip(cell["outputs"], shown, strict=False):
            _judge_output(run, where, output, element)


def _judge_output(run: LabRun, where: str, output: dict, element: dict) -> None:
    kind = output["output_type"]
    if kind == "error":
        run.problems.append(f"{where} raised {output['ename']}: {output['evalue'][:200]}")
    elif kind == "stream" and output["name"] == "stderr":
        run.problems.append(f"{where} wrote to stderr: {output['text'][:200]!r}")
    elif WIDGET_MIME in output.get("data", {}):
        run.widgets += 1
        if not element["live"] and not element["text"].strip():
            run.closed_widgets += 1  # closed by the kernel (a finished progress bar): its view is gone
        elif not element["live"] or any(text in element["text"] for text in BROKEN_WIDGET_TEXTS):
            run.problems.append(f"{where}: a widget shown as {element['text'][:80]!r}, not as a live view")
    elif "image/png" in output.get("data", {}):
        run.images += 1
        if not element["image"]:
            run.problems.append(f"{where}: a figure that did not render as an image")


def _show_first_widget(page) -> None:
    page.evaluate("selector => { const view = document.querySelector(selector); "
                  "if (view) view.scrollIntoView({block: 'center'}); }", LIVE_VIEW)
