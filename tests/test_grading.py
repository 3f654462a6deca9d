"""The course's nbgrader configuration, proven on real submissions of lesson 01."""

import re
from html import unescape

import nbformat
import pytest
from lesson_files import read_edition, read_source, replace_cell, without_cell

from graders.lessons import solution_path
from graders.notebook_grading.autograde import generate_feedback
from graders.notebook_grading.feedback import hidden_lines
from graders.release.editions import solution_sources

pytestmark = [pytest.mark.kernel, pytest.mark.subprocess]  # nbgrader's gradebook runs alembic
LESSON = "01_tensors"
# Returns the matrix of exercise 3's example whatever the inputs: the visible check draws others.
HARD_CODED = """
def pairwise_distances(a, b):
    return torch.tensor([[0.0, 10.0, 3.0], [5.0, 5.0, 4.0]])
"""
# Right on every input the visible check draws (two points or more per side), wrong with one point.
FITTED_TO_VISIBLE = """
def pairwise_distances(a, b):
    return (a[:, None] - b[None]).pow(2).sum(-1).sqrt().squeeze()
"""


@pytest.fixture
def graded(grade):
    """``graded(student, nb)``: ``nb`` graded as a submission of lesson 01."""
    return lambda student, nb: grade(LESSON, student, nb)


def _shown(html: str, grade_id: str) -> str:
    """The text the feedback page shows for one grade cell: its score, source and outputs."""
    start = html.index(f"Grade cell: <code>{grade_id}</code>")
    end = html.find("Grade cell: <code>", start + 1)
    return unescape(re.sub(r"<[^>]+>", "", html[start:end if end > 0 else None]))


@pytest.mark.parametrize("answer", [HARD_CODED, FITTED_TO_VISIBLE], ids=["hard-coded", "fitted"])
def test_an_answer_fitted_to_the_visible_check_fails(graded, solved, answer):
    score = graded("hardcoder", replace_cell(solved(LESSON, "en"), "pairwise_distances", answer))
    assert score.cells["test_pairwise_distances"] == (0, 2)
    assert score.score == score.max_score - 2


def test_feedback_shows_visible_tests_and_the_score_but_not_hidden_ones(course_dir, graded, solved):
    score = graded("curious", replace_cell(solved(LESSON, "es"), "pairwise_distances", FITTED_TO_VISIBLE))
    html = generate_feedback(course_dir, LESSON, "curious").read_text()
    assert "BEGIN HIDDEN TESTS" not in html
    assert "1103" not in html and "torch.cdist(a, b)" not in html  # the hidden inputs and reference
    secrets = hidden_lines(nbformat.read(solution_path(LESSON), 4), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    shown = unescape(re.sub(r"<[^>]+>", "", html))
    assert secrets and not [line for line in secrets if line in shown]  # no line of any hidden test
    pairwise = _shown(html, "test_pairwise_distances")
    assert "lesson.check_pairwise_distances(pairwise_distances)" in pairwise  # the visible check stays
    assert "Una prueba oculta falló" in pairwise  # the notice, in the edition's language, where it failed
    assert "Score: 0.0 / 2.0" in pairwise and score.cells["test_pairwise_distances"] == (0, 2)
    total = re.search(rf"<h4>{LESSON} \(Score: ([0-9.]+) / ([0-9.]+)\)</h4>", html)
    assert total and (float(total[1]), float(total[2])) == (score.score, score.max_score)


def test_a_harmless_warning_does_not_cost_points(graded, solved):
    noisy = """
import warnings

def to_unit_float(images):
    warnings.warn("a harmless library warning", UserWarning)
    return images.float() / 255
"""
    score = graded("noisy", replace_cell(solved(LESSON, "en"), "to_unit_float", noisy))
    assert score.cells["test_to_unit_float"] == (1, 1)


def test_a_deleted_grade_cell_is_put_back_and_graded(graded, solved):
    nb = without_cell(read_edition(LESSON, "en"), "test_to_unit_float")
    score = graded("deleter", nb)
    assert score.cells["test_to_unit_float"] == (0, 1)  # graded (and failed), not skipped

    score = graded("deleter-solved", without_cell(solved(LESSON, "en"), "test_to_unit_float"))
    assert score.cells["test_to_unit_float"] == (1, 1)


def test_an_edited_grade_cell_is_restored_before_grading(graded):
    score = graded("editor", replace_cell(read_edition(LESSON, "en"), "test_pairwise_distances", "pass"))
    assert score.cells["test_pairwise_distances"] == (0, 2)


def test_a_concept_check_with_one_wrong_statement_earns_the_other_statements_share(course_dir, graded,
                                                                                   solved):
    answers = solution_sources(read_source(LESSON))["concept_check"]
    one_slip = answers + '\nANSWERS["view_copies"] = not ANSWERS["view_copies"]\n'
    score = graded("one-slip", replace_cell(solved(LESSON, "en"), "concept_check", one_slip))
    assert score.cells["test_concept_check"] == (1.67, 2)
    html = generate_feedback(course_dir, LESSON, "one-slip").read_text()
    assert "statements classified right: 5 of 6" in html and "review: view_copies" in html
