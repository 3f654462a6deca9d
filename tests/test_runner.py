"""The papermill runner names what failed, and refuses a lesson that silently ran nothing."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from graders.run import LessonFailed, check_execution, execute_lesson, format_table


def _notebook(tmp_path, *sources, name="99_sample"):
    nb = new_notebook(cells=[new_markdown_cell("# sample")] + [new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _execute(path, tmp_path, lesson_timeout=120):
    return execute_lesson(path, tmp_path / "out" / path.name, fast=True, device="cpu",
                          cell_timeout=60, lesson_timeout=lesson_timeout, progress=False)


def test_a_clean_notebook_runs(tmp_path):
    assert _execute(_notebook(tmp_path, "x = 1", "print(x + 1)"), tmp_path) > 0


def test_a_failing_cell_is_named_with_its_error(tmp_path):
    path = _notebook(tmp_path, "x = 1", "def broken():\n    return 1 / 0\nbroken()", "print('after')")
    with pytest.raises(LessonFailed) as caught:
        _execute(path, tmp_path)
    message = str(caught.value)
    assert message.startswith("99_sample: cell 3 `def broken():` raised ZeroDivisionError")


def test_sys_exit_before_the_end_is_a_failure(tmp_path):
    path = _notebook(tmp_path, "import sys\nsys.exit(0)", "print('never')")
    with pytest.raises(LessonFailed, match="99_sample: cell 2 `import sys` raised SystemExit"):
        _execute(path, tmp_path)


def test_a_dead_kernel_is_a_failure(tmp_path):
    path = _notebook(tmp_path, "import os\nos._exit(1)", "print('never')")
    with pytest.raises(LessonFailed, match="99_sample: .*(DeadKernel|never did|raised)"):
        _execute(path, tmp_path)


def test_a_notebook_without_code_is_a_failure(tmp_path):
    with pytest.raises(LessonFailed, match="has no code cells, so nothing ran"):
        _execute(_notebook(tmp_path), tmp_path)


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
