"""The lessons in a real JupyterLab, in headless Chromium, as a student meets them: on a student's
machine (:mod:`student_machine`), where JupyterLab runs from a fresh venv in which the course is not
installed, outside this repository, until a lesson's first cell installs it from the course's wheel.

Each edition, reference solutions filled in, runs all its cells in FAST mode; every cell must run,
with no error and nothing on stderr, every widget must be a live view and every figure an image.
A screenshot per notebook lands in ``build/browser/``. Two notebooks broken on purpose prove that
the test fails when a widget cannot render and when a cell raises.
"""

import json

import nbformat
import pytest
from lab_browser import CHROMIUM, LabServer, run_in_lab
from lesson_files import LESSONS, browser_language, solved_edition, write
from student_machine import fresh_venv, student_environment, student_home, where_course_is

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
def lab(tmp_path_factory, wheel, shared_dependencies):
    """JupyterLab from a student's fresh venv, in their home, over the filled editions and the broken
    notebooks; a browser; and a function that says where the venv finds the course."""
    from playwright.sync_api import sync_playwright

    machine = tmp_path_factory.mktemp("student")
    python = fresh_venv(machine / "venv", shared_dependencies)
    home = student_home(machine / "home")
    root = home / "course"
    for language in LANGUAGES:
        (root / language).mkdir(parents=True)
        for lesson in LESSONS:
            write(solved_edition(lesson, language), root / language / f"{lesson}.ipynb")
    (root / "broken").mkdir()
    write(_notebook("import ipywidgets\nipywidgets.IntSlider(3)", BROKEN_WIDGET),
          root / "broken" / "widget.ipynb")
    write(_notebook("print('before')", "1 / 0", "print('after')"), root / "broken" / "raises.ipynb")
    env = student_environment(python, home, wheel, COURSE_FAST="1", COURSE_DEVICE="cpu")
    assert where_course_is(python, env, root) == "", "the course is importable before a lesson installs it"
    with LabServer(root, env, python) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield server, browser, lambda: where_course_is(python, env, root)
        browser.close()


def _editions():
    """Every (lesson, language); ``make test`` runs one edition of each lesson (the walks of
    test_answer_cells.py run both), ``make test-browser`` runs all."""
    return [pytest.param(lesson, language, marks=[pytest.mark.second_edition]
                         if language != browser_language(lesson) else [])
            for lesson in LESSONS for language in LANGUAGES]


@pytest.mark.parametrize(("lesson", "language"), _editions())
def test_lesson_runs_in_jupyterlab_with_live_widgets_and_figures(lab, lesson, language):
    server, browser, course_found = lab
    name = f"{lesson}-{language}"
    run = run_in_lab(browser, server, f"{language}/{lesson}.ipynb", SHOTS / f"{name}.png")
    (SHOTS / f"{name}.json").write_text(json.dumps(run.__dict__, indent=1))
    assert run.problems == []
    assert run.executed == run.code_cells
    assert course_found().startswith(str(server.python.parent.parent)), "not the wheel, in the venv"


def test_a_widget_that_cannot_render_fails_the_test(lab, tmp_path):
    server, browser, _ = lab
    run = run_in_lab(browser, server, "broken/widget.ipynb", tmp_path / "widget.png", timeout_s=60)
    assert run.widgets == 2
    assert len(run.problems) == 1 and "not as a live view" in run.problems[0]


def test_a_cell_that_raises_fails_the_test(lab, tmp_path):
    server, browser, _ = lab
    run = run_in_lab(browser, server, "broken/raises.ipynb", tmp_path / "raises.png", timeout_s=60)
    assert run.problems[0].startswith("cell 2 ('1 / 0') raised ZeroDivisionError")
    assert run.problems[1].startswith("cell 3 (\"print('after')\") did not run")
