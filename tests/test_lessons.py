"""Every lesson, executed for real: papermill runs it, stock nbgrader grades it.

Each test executes its own notebooks; pytest-xdist spreads them over the cores.
"""

import json

import pytest
from lesson_files import (
    LESSONS,
    cell_source,
    first_lost_points,
    read_edition,
    read_source,
    replace_cell,
    solution_cells,
)
from nbformat.v4 import new_code_cell

from course.settings import LANGUAGES
from graders.nbgrader_adapter import grade_cells
from graders.run.runner import run_course

pytestmark = pytest.mark.kernel

STUBBED = [(lesson, grade_id) for lesson in LESSONS for grade_id in solution_cells(read_source(lesson))]


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


@pytest.mark.parametrize(("lesson", "grade_id"), STUBBED)
def test_every_solution_cell_is_graded(lesson, grade_id, tmp_path):
    stub = cell_source(read_edition(lesson, "en"), grade_id)
    submission = replace_cell(read_source(lesson), grade_id, stub)
    assert first_lost_points(submission, tmp_path) is not None, f"stubbing {grade_id} lost no points"


def test_first_lost_points_scores_as_nbgrader_and_stops_there(tmp_path, make_notebook, grade_cell):
    """A passing cell earns its points, an error or a partial score is a loss, later cells never run."""
    cells = [new_code_cell("x = 1"), grade_cell("assert x == 1", "passes"),
             grade_cell("0.5", "partial"), grade_cell("open('ran', 'w').close()", "after")]
    assert first_lost_points(make_notebook(*cells), tmp_path) == "partial"
    assert not (tmp_path / "ran").exists()
    failing = make_notebook("x = 2", grade_cell("assert x == 1", "fails"))
    assert first_lost_points(failing, tmp_path) == "fails"
    assert first_lost_points(make_notebook(*cells[:2]), tmp_path) is None
