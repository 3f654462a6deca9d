"""The course's nbgrader configuration, proven on real submissions of lesson 01."""

import pytest
from lesson_files import read_edition, read_source, replace_cell, without_cell, write

from graders.notebook_grading.autograde import autograde, generate_feedback, submit
from graders.release.editions import fill_solutions, solution_sources

pytestmark = pytest.mark.notebook
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


def _solved(language="en"):
    return fill_solutions(read_edition(LESSON, language), solution_sources(read_source(LESSON)))


def _grade(course_dir, tmp_path, student, nb):
    submit(course_dir, LESSON, student, write(nb, tmp_path / f"{student}.ipynb"))
    return autograde(course_dir, LESSON, student)


@pytest.mark.parametrize("answer", [HARD_CODED, FITTED_TO_VISIBLE], ids=["hard-coded", "fitted"])
def test_an_answer_fitted_to_the_visible_check_fails(course_dir, tmp_path, answer):
    score = _grade(course_dir, tmp_path, "hardcoder", replace_cell(_solved(), "pairwise_distances",
                                                                   answer))
    assert score.cells["test_pairwise_distances"] == (0, 2)
    assert score.score == score.max_score - 2


def test_feedback_shows_visible_tests_but_not_hidden_ones(course_dir, tmp_path):
    nb = replace_cell(_solved("es"), "pairwise_distances", FITTED_TO_VISIBLE)
    _grade(course_dir, tmp_path, "curious", nb)
    html = generate_feedback(course_dir, LESSON, "curious").read_text()
    assert "BEGIN HIDDEN TESTS" not in html
    assert "1103" not in html and "torch.cdist(a, b)" not in html  # the hidden inputs and reference
    assert "Una prueba oculta falló" in html  # the notice, in the edition's language
    assert "test_to_unit_float" in html or "to_unit_float(x)" in html  # visible tests stay


def test_a_harmless_warning_does_not_cost_points(course_dir, tmp_path):
    noisy = """
import warnings

def to_unit_float(images):
    warnings.warn("a harmless library warning", UserWarning)
    return images.float() / 255
"""
    score = _grade(course_dir, tmp_path, "noisy", replace_cell(_solved(), "to_unit_float", noisy))
    assert score.cells["test_to_unit_float"] == (1, 1)


def test_a_deleted_grade_cell_is_put_back_and_graded(course_dir, tmp_path):
    nb = without_cell(read_edition(LESSON, "en"), "test_to_unit_float")
    score = _grade(course_dir, tmp_path, "deleter", nb)
    assert score.cells["test_to_unit_float"] == (0, 1)  # graded (and failed), not skipped

    solved = without_cell(_solved(), "test_to_unit_float")
    score = _grade(course_dir, tmp_path, "deleter-solved", solved)
    assert score.cells["test_to_unit_float"] == (1, 1)


def test_an_edited_grade_cell_is_restored_before_grading(course_dir, tmp_path):
    nb = replace_cell(read_edition(LESSON, "en"), "test_pairwise_distances", "pass")
    score = _grade(course_dir, tmp_path, "editor", nb)
    assert score.cells["test_pairwise_distances"] == (0, 2)


def test_a_concept_check_with_one_wrong_statement_earns_the_other_statements_share(course_dir, tmp_path):
    answers = solution_sources(read_source(LESSON))["concept_check"]
    one_slip = answers + '\nANSWERS["view_copies"] = not ANSWERS["view_copies"]\n'
    score = _grade(course_dir, tmp_path, "one-slip", replace_cell(_solved(), "concept_check", one_slip))
    assert score.cells["test_concept_check"] == (1.67, 2)
    html = generate_feedback(course_dir, LESSON, "one-slip").read_text()
    assert "statements classified right: 5 of 6" in html and "review: view_copies" in html
