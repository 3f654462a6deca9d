"""Every lesson, executed for real: papermill runs it, stock nbgrader grades it.

Each test executes its own notebook; pytest-xdist spreads them over the cores. What each answer
cell earns in either edition, right, stubbed, untouched, doing nothing or wrong, is
test_answer_cells.py's.
"""

import json

import pytest
from lesson_files import LESSONS

from graders.run.runner import run_course

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_under_papermill_and_earns_full_marks(lesson, tmp_path):
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

