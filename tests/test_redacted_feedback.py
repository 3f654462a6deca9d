"""Feedback redaction: no output line may repeat a line of a hidden test; a student's own cells,
marker text and all, are shown as written. A feedback fault never costs the grade."""

from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from graders.notebook_grading.redacted_feedback import (
    REDACTED,
    FeedbackHTMLExporter,
    HideHiddenTests,
    hidden_lines,
    redact,
)

LESSON = "01_tensors"

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
GRADE_CELL = f"""check_close(f(torch.ones(3)), torch.full((3,), 2.0), name="f")
{BEGIN}
secret = torch.arange(1103.0)
check_close(f(secret), secret * 2, name="f")
{END}"""


def _test_cell(source, grade_id="t"):
    """An instructor's test cell, as nbgrader marks one."""
    return new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": grade_id, "points": 1,
                                                        "solution": False, "locked": True}})


def _answer_cell(source, grade_id="f"):
    """A student's answer cell, as nbgrader marks one."""
    return new_code_cell(source, metadata={"nbgrader": {"grade": False, "grade_id": grade_id,
                                                        "solution": True, "locked": False}})


def test_hidden_lines_are_the_ones_only_hidden_tests_hold():
    nb = new_notebook(cells=[new_code_cell("import torch\nfrom graders import checks"),
                             _test_cell(GRADE_CELL)])
    assert hidden_lines(nb, BEGIN, END) == {"secret = torch.arange(1103.0)",
                                            'check_close(f(secret), secret * 2, name="f")'}


def test_a_line_shared_with_visible_code_or_too_short_is_not_a_secret():
    nb = new_notebook(cells=[_test_cell(f"x = compute(1)\n{BEGIN}\nx = compute(1)\nok()\n{END}")])
    assert hidden_lines(nb, BEGIN, END) == set()


def test_redact_replaces_each_line_that_repeats_a_secret_plain_or_html_escaped():
    secrets = {'check_close(f(secret), secret * 2, name="f")'}
    text = ('before\n>>> check_close(f(secret), secret * 2, name="f")\n'
            'check_close(f(secret), secret * 2, name=&quot;f&quot;)\nafter')
    assert redact(text, secrets, REDACTED["en"]).splitlines() == [
        "before", REDACTED["en"], REDACTED["en"], "after"]
    assert redact("nothing to hide\n", secrets, "x") == "nothing to hide\n"


def test_feedback_redacts_a_spy_that_printed_hidden_tests_in_any_cell(tmp_path):
    """The preprocessor as nbgrader runs it, on a notebook whose outputs leaked a hidden line."""
    spied = new_code_cell("x = 1", outputs=[new_output("stream", name="stdout",
                                                       text="LEAK secret = torch.arange(1103.0)\n")])
    grade = _test_cell(GRADE_CELL)
    grade.outputs = [new_output("display_data", data={"text/plain": "check_close(f(secret), secret * 2, "
                                                                     'name="f")'})]
    nb = new_notebook(cells=[spied, grade], metadata={"course": {"language": "es"}})
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].outputs[0].text == REDACTED["es"] + "\n"
    assert nb.cells[1].outputs[0].data["text/plain"] == REDACTED["es"]
    assert BEGIN not in nb.cells[1].source and "1103" not in nb.cells[1].source


def test_html_a_student_wrote_or_printed_never_runs_in_the_feedback_page():
    attack = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    printed = new_code_cell("show()", outputs=[new_output("display_data", data={"text/html": attack})])
    nb = new_notebook(cells=[new_markdown_cell(attack), printed], metadata={"course": {"language": "en"}})
    body, _ = FeedbackHTMLExporter().from_notebook_node(nb)
    assert "alert(1)" in body and "alert(2)" in body  # shown, as text
    page = _Elements()
    page.feed(body)
    assert not [attrs for tag, attrs in page.tags if any(name.startswith("on") for name, _ in attrs)]
    assert not [script for script in page.scripts if "alert(" in script]


class _Elements(HTMLParser):
    """The elements of a page as a browser parses them: tags with their attributes, scripts' text."""

    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._in_script = [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


QUOTES = {  # what a student may write in their own cells: nbgrader's marker lines, quoted
    "begin only": f"# nbgrader hides what follows {BEGIN}",
    "end only": f"# ...and stops at {END}",
    "both": f"# {BEGIN}\n# {END}",
    "solution markers": "# ### BEGIN SOLUTION\n# ### END SOLUTION\n# YOUR CODE HERE",
}


@pytest.mark.parametrize("quote", QUOTES.values(), ids=QUOTES)
@pytest.mark.parametrize("make", [_answer_cell, new_code_cell, new_markdown_cell],
                         ids=["answer cell", "added code cell", "added text cell"])
def test_marker_text_in_a_students_own_cell_is_shown_and_breaks_nothing(make, quote):
    """nbgrader's ClearHiddenTests raised on these (no END; a hidden region outside a grade cell),
    failing the student's feedback; the test cell's hidden tests still go."""
    answer = f"{quote}\ndef f(x):\n    return 2 * x  # the student's code, kept"
    nb = new_notebook(cells=[make(answer), _test_cell(GRADE_CELL)], metadata={"course": {"language": "en"}})
    secrets = hidden_lines(nb, BEGIN, END)
    assert secrets == {"secret = torch.arange(1103.0)", 'check_close(f(secret), secret * 2, name="f")'}
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].source == answer
    assert BEGIN not in nb.cells[1].source and "1103" not in nb.cells[1].source


# -- a feedback fault never costs the grade (issue 23) ------------------------------------------
class FailingFeedback:
    """nbgrader's API whose ``generate_feedback`` reports a failure, as it did on marker text."""

    coursedir = SimpleNamespace(root="/nowhere")

    def generate_feedback(self, lesson, student, force):
        return {"success": False, "log": "Traceback (most recent call last):\n  ...\n"
                "RuntimeError: No end hidden tests statement found\n", "error": None}


def test_a_worker_reports_a_feedback_fault_beside_the_scores_instead_of_failing():
    from graders.grade.worker import feedback_or_fault

    reply = feedback_or_fault(FailingFeedback(), LESSON, "ana")
    assert reply["feedback"] is None
    assert reply["feedback_fault"]["cause"] == ("nbgrader generate_feedback failed for ana/01_tensors: "
                                                "RuntimeError: No end hidden tests statement found")
    assert "nbgrader's log:" in reply["feedback_fault"]["error"]


def test_a_graded_submission_whose_feedback_failed_keeps_its_score_and_is_not_graded_again(tmp_path):
    from lesson_files import solved_edition, write

    from graders import nbgrader_adapter as adapter
    from graders.grade.classroom import FEEDBACK_MISSING, Classroom, Options
    from graders.grade.pool import Outcome
    from graders.grade.submissions import find_submissions
    from graders.release.editions import build_course

    (tmp_path / "in").mkdir()
    write(solved_edition(LESSON, "en"), tmp_path / "in" / "Ana.ipynb")
    room = Classroom(Options(LESSON, tmp_path / "in", tmp_path / "out", workers=1, sandbox="off"))
    for folder in (room.scratch, room.out / "feedback"):
        folder.mkdir(parents=True)
    build_course(room.master, "en", [LESSON])
    room.grade_cells = adapter.grade_cells(room.master, LESSON)
    (ana,) = room.to_grade(find_submissions(tmp_path / "in", LESSON, room.scratch))
    fault = {"cause": "nbgrader generate_feedback failed: RuntimeError: boom", "error": "the whole story"}
    reply = {"cells": {name: [points, points] for name, points in room.grade_cells.items()}, "incidents": [],
             "autograded": str(ana.path), "feedback": None, "feedback_fault": fault}

    row = room._record_outcome(ana, Outcome({"job": 0}, reply=reply))
    sid = ana.student_id
    assert (row.status, row.total) == ("graded", 11)
    assert row.reason.startswith("feedback not generated, the score stands: nbgrader generate_feedback "
                                 "failed: RuntimeError: boom") and "\n" not in row.reason
    assert f"logs/{sid}.log" in row.reason  # what to do, too:
    assert f"nbgrader generate_feedback {LESSON} --student {sid}" in row.reason
    assert "the whole story" in (room.out / "logs" / f"{sid}.log").read_text()
    page = (room.out / "feedback" / f"{sid}.html").read_text()
    assert "<b>11 / 11</b> (graded)" in page and FEEDBACK_MISSING in page and "boom" not in page
    with adapter.gradebook(room.master) as book:
        assert book.find_submission(LESSON, sid).score == 11
    assert room.to_grade([ana]) == []  # recorded as graded: the next run leaves it alone
