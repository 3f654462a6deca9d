"""Feedback redaction: no output line may repeat a line of a hidden test."""

from nbformat.v4 import new_code_cell, new_notebook, new_output

from graders.notebook_grading.feedback import REDACTED, hidden_lines, redact

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
GRADE_CELL = f"""check_close(f(torch.ones(3)), torch.full((3,), 2.0), name="f")
{BEGIN}
secret = torch.arange(1103.0)
check_close(f(secret), secret * 2, name="f")
{END}"""


def test_hidden_lines_are_the_ones_only_hidden_tests_hold():
    nb = new_notebook(cells=[new_code_cell("import torch\nfrom graders import checks"),
                             new_code_cell(GRADE_CELL)])
    assert hidden_lines(nb, BEGIN, END) == {"secret = torch.arange(1103.0)",
                                            'check_close(f(secret), secret * 2, name="f")'}


def test_a_line_shared_with_visible_code_or_too_short_is_not_a_secret():
    nb = new_notebook(cells=[new_code_cell(f"x = compute(1)\n{BEGIN}\nx = compute(1)\nok()\n{END}")])
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
    from graders.notebook_grading.feedback import HideHiddenTests

    spied = new_code_cell("x = 1", outputs=[new_output("stream", name="stdout",
                                                       text="LEAK secret = torch.arange(1103.0)\n")])
    grade = new_code_cell(GRADE_CELL, metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 1,
                                                             "solution": False, "locked": True}})
    grade.outputs = [new_output("display_data", data={"text/plain": "check_close(f(secret), secret * 2, "
                                                                     'name="f")'})]
    nb = new_notebook(cells=[spied, grade], metadata={"course": {"language": "es"}})
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].outputs[0].text == REDACTED["es"] + "\n"
    assert nb.cells[1].outputs[0].data["text/plain"] == REDACTED["es"]
    assert BEGIN not in nb.cells[1].source and "1103" not in nb.cells[1].source
