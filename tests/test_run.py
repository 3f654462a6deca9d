"""``course run`` (``make run``, graders/run/): it names what failed, refuses a lesson that silently ran
nothing, reports every lesson; and, end to end, papermill executes a lesson's source in a child
process, stock nbgrader grades what ran, the report is written.

One lesson proves the command end to end; every lesson's every cell is executed, in both editions,
and graded by stock nbgrader at full marks in test_answer_cells.py, which also tries each answer cell
right, stubbed, untouched, doing nothing and wrong. The browser test runs each lesson as a student
would: in JupyterLab, outside the repository, the course installed from its wheel.
"""

import json
import shutil

import nbformat
import pytest
from lesson_files import LESSONS
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from graders.run import runner
from graders.run.report import format_table
from graders.run.runner import LessonFailed, check_execution, execute_lesson, run_course

executes = pytest.mark.kernel


def _notebook(tmp_path, *sources, name="99_sample"):
    nb = new_notebook(cells=[new_markdown_cell("# sample")] + [new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _execute(path, tmp_path, lesson_timeout=120):
    return execute_lesson(path, tmp_path / "out" / path.name, fast=True, device="cpu",
                          cell_timeout=60, lesson_timeout=lesson_timeout, progress=False)


@executes
def test_a_clean_notebook_runs(tmp_path):
    assert _execute(_notebook(tmp_path, "x = 1", "print(x + 1)"), tmp_path) > 0


@executes
def test_a_failing_cell_is_named_with_its_error(tmp_path):
    path = _notebook(tmp_path, "x = 1", "def broken():\n    return 1 / 0\nbroken()", "print('after')")
    with pytest.raises(LessonFailed) as caught:
        _execute(path, tmp_path)
    message = str(caught.value)
    assert message.startswith("99_sample: cell 3 `def broken():` raised ZeroDivisionError")


@executes
def test_sys_exit_before_the_end_is_a_failure(tmp_path):
    path = _notebook(tmp_path, "import sys\nsys.exit(0)", "print('never')")
    with pytest.raises(LessonFailed, match="99_sample: cell 2 `import sys` raised SystemExit"):
        _execute(path, tmp_path)


@executes
def test_a_dead_kernel_is_a_failure(tmp_path):
    path = _notebook(tmp_path, "import os\nos._exit(1)", "print('never')")
    with pytest.raises(LessonFailed, match="99_sample: .*(DeadKernel|never did|raised)"):
        _execute(path, tmp_path)


@executes
def test_a_notebook_without_code_is_a_failure(tmp_path):
    with pytest.raises(LessonFailed, match="has no code cells, so nothing ran"):
        _execute(_notebook(tmp_path), tmp_path)


@executes
def test_a_lesson_past_its_time_is_stopped(tmp_path):
    path = _notebook(tmp_path, "import time\ntime.sleep(600)")
    with pytest.raises(LessonFailed, match="still running after 8 s, stopped"):
        _execute(path, tmp_path, lesson_timeout=8)


def test_cells_that_never_ran_are_reported():
    nb = new_notebook(cells=[new_code_cell("a = 1", execution_count=1), new_code_cell("b = 2")])
    with pytest.raises(LessonFailed, match="only 1 of 2 code cells ran; cell 2 `b = 2`"):
        check_execution(nb, "99_sample")


def test_report_table_lists_lesson_device_seconds_and_score():
    report = {"device": "cpu (2 threads)", "lessons": [
        {"name": "01_tensors", "seconds": 9.04, "score": 11.0, "max_score": 11.0, "error": ""},
        {"name": "02_autograd", "seconds": 1.0, "score": 0.0, "max_score": 0.0, "error": "boom | x"},
    ]}
    table = format_table(report)
    assert "| 01_tensors | cpu (2 threads) | 9.0 | 11 / 11 | ok |" in table
    assert "FAILED: boom \\| x" in table


def test_an_nbgrader_failure_is_that_lessons_error_and_the_run_goes_on(tmp_path, monkeypatch):
    """nbgrader really fails on lesson 01 (its submission is not a notebook); 02 is still graded."""
    def copy_without_running(notebook, output, **_):
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, output)
        return 0.1

    def submit_broken_01(course_dir, lesson, student, notebook):
        real_submit(course_dir, lesson, student, notebook)
        if lesson == "01_tensors":
            (course_dir / "submitted" / student / lesson / f"{lesson}.ipynb").write_text("not json")

    real_submit = runner.submit
    monkeypatch.setattr(runner, "execute_lesson", copy_without_running)
    monkeypatch.setattr(runner, "submit", submit_broken_01)
    report = runner.run_course(["01_tensors", "02_autograd"], fast=True, device="cpu", out_dir=tmp_path)
    first, second = report["lessons"]
    assert first["error"] == ("nbgrader autograde failed for reference/01_tensors: nbformat.reader."
                              "NotJSONError: Notebook does not appear to be JSON: 'not json'")
    assert second["error"] == "" and second["max_score"] > 0
    written = json.loads((tmp_path / "report.json").read_text())
    assert [lesson["name"] for lesson in written["lessons"]] == ["01_tensors", "02_autograd"]
    assert "FAILED: nbgrader autograde failed" in (tmp_path / "report.md").read_text()


@executes
def test_course_run_executes_a_lesson_and_it_earns_full_marks(tmp_path):
    lesson = LESSONS[0]
    report = run_course([lesson], fast=True, device="cpu", out_dir=tmp_path, progress=False)
    (result,) = report["lessons"]
    assert result["error"] == ""
    assert result["max_score"] > 0
    assert result["score"] == result["max_score"]
    assert result["seconds"] > 0  # how long it takes is `course run`'s table, not a test's verdict
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["fast"] is True and written["device"].startswith("cpu")
    assert {"name", "seconds", "score", "max_score", "metrics"} <= set(written["lessons"][0])
    assert lesson in (tmp_path / "report.md").read_text()
