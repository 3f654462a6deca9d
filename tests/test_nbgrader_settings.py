"""The course's nbgrader configuration, proven on real submissions of lesson 01."""

import re
import subprocess
import sys
from html import unescape

import nbformat
import pytest
from hostile import QUOTED_MARKERS, QUOTED_NOTE, quotes_markers
from lesson_files import (
    hidden_answers,
    read_edition,
    read_solution,
    replace_cell,
    without_cell,
    without_demonstrations,
)

from graders.lesson_checks.questions import draw, pool
from graders.lessons import solution_path
from graders.notebook_grading.autograde import generate_feedback
from graders.notebook_grading.redacted_feedback import hidden_lines
from graders.release.editions import solution_sources

pytestmark = [pytest.mark.kernel, pytest.mark.subprocess]  # and stock nbgrader's command line
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
    """``graded(student, nb)``: ``nb`` graded as a submission of lesson 01, handed in without the
    lesson's demonstrations: what these tests prove lies in the answers and grade cells."""
    return lambda student, nb: grade(LESSON, student, without_demonstrations(nb))


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


def test_marker_text_a_student_quotes_is_graded_and_gets_stock_nbgrader_feedback(course_dir, graded):
    """``nbgrader generate_feedback``, run in the course directory as an instructor runs it, raised
    on nbgrader's marker lines quoted in a student's own cells (issue 23)."""
    score = graded("quoter", quotes_markers())
    assert score.score == score.max_score
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_feedback", LESSON,
                           "--student", "quoter"], cwd=course_dir, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = unescape(re.sub(r"<[^>]+>", "", (course_dir / "feedback" / "quoter" / LESSON /
                                            f"{LESSON}.html").read_text()))
    quotes = [*"\n".join(QUOTED_MARKERS.values()).splitlines(), QUOTED_NOTE]
    assert all(quote in shown for quote in quotes)  # the student's cells as they wrote them
    secrets = hidden_lines(nbformat.read(solution_path(LESSON), 4), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    assert secrets and not [line for line in secrets if line in shown]


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


def test_one_wrong_concept_answer_costs_what_a_right_one_earns(course_dir, graded, solved):
    """Stock nbgrader grades the submitter's own draw: four right and one wrong earn 3 of 5 shares."""
    answers = solution_sources(read_solution(LESSON))["concept_check"]
    slip = draw("graders.lesson_checks.tensors", "one-slip")[0]
    question, truth = pool("tensors").questions[slip], hidden_answers(LESSON)[1][slip]
    wrong = ([c for c in question.choices if c != truth][0] if question.kind == "choice" else
             {"shape": (999,), "int": 999, "float": 999.5, "dtype": "torch.complex64"}[question.kind])
    one_slip = answers + f'\nANSWERS[{slip!r}] = {wrong!r}\n'
    score = graded("one-slip", replace_cell(solved(LESSON, "en"), "concept_check", one_slip))
    assert score.cells["test_concept_check"] == (1.2, 2)
    html = unescape(generate_feedback(course_dir, LESSON, "one-slip").read_text())
    assert "Questions of 'one-slip': right: " in html and f"; wrong: {slip}; unanswered: -." in html
