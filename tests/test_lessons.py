"""``course run`` (``make run``) end to end: papermill executes a lesson's source in a child process,
stock nbgrader grades what ran, the report is written.

One lesson proves the command; every lesson's every cell is executed, in both editions, and graded
by stock nbgrader at full marks in test_answer_cells.py, which also tries each answer cell right,
stubbed, untouched, doing nothing and wrong. The browser test runs each lesson as a student would: in
JupyterLab, outside the repository, the course installed from its wheel.
"""

import json

import pytest
from lesson_files import LESSONS

from graders.run.runner import run_course

pytestmark = pytest.mark.kernel


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
