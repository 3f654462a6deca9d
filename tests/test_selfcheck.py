"""``make check``: a student's notebook run, each visible check scored as nbgrader scores it."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from graders.selfcheck import run_visible_checks

pytestmark = pytest.mark.notebook


def _grade_cell(source, cell_id):
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "points": 1,
                                 "grade_id": cell_id}
    return cell


def test_the_report_names_each_check_and_the_first_error(tmp_path):
    nb = new_notebook(cells=[new_code_cell("x = 2"), _grade_cell("assert x == 2", "right"),
                             _grade_cell("assert x == 3, 'x should be 3'", "wrong")])
    path = tmp_path / "mine.ipynb"
    nbformat.write(nb, path)
    report, all_passed = run_visible_checks(path)
    assert not all_passed
    assert "pass  right (1)" in report
    assert "FAIL  wrong (1)  AssertionError: x should be 3" in report
    assert "Visible checks passed: 1 of 2 (1 of 2 points)." in report
