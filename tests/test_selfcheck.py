"""``make check``: a student's notebook run, each visible check scored as nbgrader scores it."""

import os

import pytest
from lesson_files import write

from graders.selfcheck import run_visible_checks

pytestmark = pytest.mark.kernel


def test_the_report_names_each_check_and_the_first_error(tmp_path, make_notebook, grade_cell):
    nb = make_notebook("x = 2", grade_cell("assert x == 2", "right"),
                       grade_cell("assert x == 3, 'x should be 3'", "wrong"))
    report, all_passed = run_visible_checks(write(nb, tmp_path / "mine.ipynb"))
    assert not all_passed
    assert "pass  right (1)" in report
    assert "FAIL  wrong (1)  AssertionError: x should be 3" in report
    assert "Visible checks passed: 1 of 2 (1 of 2 points)." in report


def test_the_notebook_runs_under_grading_conditions_whatever_the_students_environment(
        tmp_path, make_notebook, grade_cell, monkeypatch):
    """Quick version and CPU, as grading runs it, even when the student's shell says otherwise; the
    report says so, with the cell time limit."""
    monkeypatch.setenv("COURSE_FAST", "0")
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    nb = make_notebook("import os\nimport course\n"
                       "FAST, DEVICE = course.fast_from_env(), course.device_from_env()",
                       grade_cell("assert FAST is True, f'FAST={FAST}'", "quick"),
                       grade_cell("assert DEVICE == 'cpu', f'DEVICE={DEVICE}'", "cpu"),
                       grade_cell("assert os.environ['COURSE_FAST'] == '1'", "environment"))
    report, all_passed = run_visible_checks(write(nb, tmp_path / "mine.ipynb"))
    assert all_passed, report
    assert ("Run as grading runs it: the quick version (COURSE_FAST=1), on the CPU, each cell stopped "
            "after 120 s.") in report
    assert os.environ["COURSE_FAST"] == "0", "this process's environment is left alone"


def test_a_cell_past_the_time_limit_is_stopped_as_grading_stops_it(tmp_path, make_notebook, grade_cell):
    nb = make_notebook(grade_cell("import time\ntime.sleep(30)", "slow"), grade_cell("assert True", "after"))
    report, all_passed = run_visible_checks(write(nb, tmp_path / "mine.ipynb"), cell_timeout=2)
    assert not all_passed
    assert "FAIL  slow (1)  KeyboardInterrupt" in report, report
    assert "pass  after (1)" in report and "each cell stopped after 2 s" in report
