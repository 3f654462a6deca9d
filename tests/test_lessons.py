"""Every lesson, executed for real: papermill runs it, stock nbgrader grades it.

Each test executes its own notebooks; pytest-xdist spreads them over the cores. What each answer
cell earns, right, stubbed, doing nothing or wrong, is test_answer_cells.py's.
"""

import json

import pytest
from lesson_files import LESSONS, read_edition

from course.settings import LANGUAGES
from graders.nbgrader_adapter import grade_cells
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


@pytest.mark.parametrize(("lesson", "lang"), [(lesson, lang) for lesson in LESSONS for lang in LANGUAGES])
def test_untouched_edition_scores_zero(lesson, lang, grade):
    score = grade(lesson, f"blank-{lang}", read_edition(lesson, lang))
    assert score.max_score > 0
    assert score.score == 0, f"points without any answer: {score.cells}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_spanish_and_english_editions_grade_alike(lesson, course_dir, grade, solved):
    """The filled Spanish edition earns every cell's points, as the English reference does (above)."""
    score = grade(lesson, "filled-es", solved(lesson, "es"))
    assert score.cells == {cell: (points, points) for cell, points in grade_cells(course_dir, lesson).items()}
