"""The lessons in a real JupyterLab, in headless Chromium, as a student meets them.

Each edition, reference solutions filled in, runs all its cells in FAST mode; every cell must run,
with no error and nothing on stderr, every widget must be a live view and every figure an image.
A screenshot per notebook lands in ``build/browser/``. Two notebooks broken on purpose prove that
the test fails when a widget cannot render and when a cell raises.
"""

import json

import nbformat
import pytest
from lab_browser import CHROMIUM, LabServer, lab_environment, run_in_lab
from lesson_files import LESSONS, solved_edition, standalone_language, write

from course.settings import LANGUAGES
from graders.lessons import BUILD

# Executes notebooks too: left out wherever kernels are. One worker runs them all, so that a run
# starts one JupyterLab and one browser.
pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.xdist_group("browser")]
SHOTS = BUILD / "browser"

BROKEN_WIDGET = '''import ipywidgets, traitlets

class Unknown(ipywidgets.DOMWidget):
    """A widget whose front-end code exists nowhere: JupyterLab cannot build its view."""
    _model_module = traitlets.Unicode("no-such-widget-package").tag(sync=True)
    _view_module = traitlets.Unicode("no-such-widget-package").tag(sync=True)
    _model_name = traitlets.Unicode("UnknownModel").tag(sync=True)
    _view_name = traitlets.Unicode("UnknownView").tag(sync=True)

Unknown()'''


def _notebook(*sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server over the filled editions and the broken notebooks, and a browser."""
    from playwright.sync_api import sync_playwright

    root = tmp_path_factory.mktemp("lab")
    for language in LANGUAGES:
        (root / language).mkdir()
        for lesson in LESSONS:
            write(solved_edition(lesson, language), root / language / f"{lesson}.ipynb")
    (root / "broken").mkdir()
    write(_notebook("import ipywidgets\nipywidgets.IntSlider(3)", BROKEN_WIDGET),
          root / "broken" / "widget.ipynb")
    write(_notebook("print('before')", "1 / 0", "print('after')"), root / "broken" / "raises.ipynb")
    with LabServer(root, lab_environment(COURSE_FAST="1", COURSE_DEVICE="cpu")) as server, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield server, browser
        browser.close()


def _editions():
    """Every (lesson, language); ``make test`` leaves out the edition the stand-alone test runs,
    ``make test-browser`` runs all."""
    return [pytest.param(lesson, language, marks=[pytest.mark.second_edition]
                         if language == standalone_language(lesson) else [])
            for lesson in LESSONS for language in LANGUAGES]


@pytest.mark.parametrize(("lesson", "language"), _editions())
def test_lesson_runs_in_jupyterlab_with_live_widgets_and_figures(lab, lesson, language):
    server, browser = lab
    name = f"{lesson}-{language}"
    run = run_in_lab(browser, server, f"{language}/{lesson}.ipynb", SHOTS / f"{name}.png")
    (SHOTS / f"{name}.json").write_text(json.dumps(run.__dict__, indent=1))
    assert run.problems == []
    assert run.executed == run.code_cells


def test_a_widget_that_cannot_render_fails_the_test(lab, tmp_path):
    server, browser = lab
    run = run_in_lab(browser, server, "broken/widget.ipynb", tmp_path / "widget.png", timeout_s=60)
    assert run.widgets == 2
    assert len(run.problems) == 1 and "not as a live view" in run.problems[0]


def test_a_cell_that_raises_fails_the_test(lab, tmp_path):
    server, browser = lab
    run = run_in_lab(browser, server, "broken/raises.ipynb", tmp_path / "raises.png", timeout_s=60)
    assert run.problems[0].startswith("cell 2 ('1 / 0') raised ZeroDivisionError")
    assert run.problems[1].startswith("cell 3 (\"print('after')\") did not run")
