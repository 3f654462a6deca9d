"""``make check``: a student's notebook run, each visible check scored as nbgrader scores it."""

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
