"""Item analysis without grading: the maths, where a failure happened, and one message per error."""

import statistics

import pytest

from graders.grade import item_analysis as ia
from graders.grade.resilient_execute import INCIDENT
from graders.grade.results import Row

GRADE_SOURCE = "\n".join([
    "HINT = 'h'",                       # 1
    "got = f(1)",                       # 2
    "checks.check_close(got, 2.0)",     # 3
    "### BEGIN HIDDEN TESTS",           # 4
    "checks.check_close(f(5), 10.0)",   # 5
    "### END HIDDEN TESTS",             # 6
])


def _error(ename: str, evalue: str, line: int | None = None) -> dict:
    frames = [] if line is None else [
        f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[9]\x1b[39m\x1b[32m, line {line}\x1b[39m\n  ..."]
    return {"output_type": "error", "ename": ename, "evalue": evalue,
            "traceback": ["\x1b[31m-----", *frames, f"\x1b[31m{ename}\x1b[39m: {evalue}"]}


def _cell(grade_id: str | None, outputs: list, source: str = GRADE_SOURCE) -> dict:
    meta = {"nbgrader": {"grade": True, "grade_id": grade_id, "points": 1}} if grade_id else {}
    return {"cell_type": "code", "source": source, "metadata": meta, "outputs": outputs}


CHECK = "CheckFailed"


@pytest.mark.parametrize("output, kind", [
    (_error(CHECK, "f(1): the values differ", line=3), "visible"),
    (_error(CHECK, "f(5): the values differ", line=5), "hidden"),
    (_error(CHECK, "no line said", line=None), "hidden"),  # as the feedback treats it: never shown
    (_error("CellTimeoutError", ""), "timeout"),
    (_error("KeyboardInterrupt", "", line=2), "timeout"),  # the kernel's side of that interrupt
    (_error(INCIDENT, "cell 3 did not stop: it ran past 60 s and then ignored the interrupt"), "timeout"),
    (_error(INCIDENT, "not run: the notebook ran past its 900 s"), "timeout"),
    (_error(INCIDENT, "cell 3 killed the kernel (os._exit, a crash or too much memory)"), "incident"),
])
def test_a_failure_is_sorted_by_where_it_happened(output, kind):
    failures = ia.notebook_failures({"cells": [_cell("test_f", [output])]})
    assert failures["test_f"].kind == kind


def _rerun(submitted_source: str | None) -> dict:
    """A notebook run again without its cell ``answer_f`` (it killed the kernel), and its failures."""
    died = _cell(None, [_error(INCIDENT, "cell 2 killed the kernel (os._exit, a crash or too much memory)")],
                 source="raise RuntimeError('cell 2 killed the kernel')")
    died["metadata"] = {"nbgrader": {"solution": True, "grade_id": "answer_f"}}
    stub = {**_cell(None, [], source="# YOUR CODE HERE"),
            "metadata": {"nbgrader": {"solution": True, "grade_id": "concept"}}}
    nb = {"cells": [_cell("test_before", [_error(CHECK, "early", line=3)]), died,
                    _cell("test_missing", [_error("NameError", "name 'f' is not defined", line=2)]), stub,
                    _cell("test_stub", [_error("NameError", "name 'ANSWERS' is not defined", line=1)]),
                    _cell("test_wrong", [_error(CHECK, "f(1): the values differ", line=3)]),
                    _cell("test_uses_f", [_error("NameError", "name 'f' is not defined", line=2)]),
                    _cell("test_passed", [])]}
    submitted = None if submitted_source is None else {"cells": [
        {**died, "source": submitted_source, "outputs": []}]}
    return ia.notebook_failures(nb, submitted)


def test_after_a_rerun_without_a_killing_cell_only_its_missing_names_are_the_incidents():
    failures = _rerun("import os\ndef f(x):\n    os._exit(1)\nf(0)")
    assert failures["test_before"].kind == "visible"
    assert failures["test_missing"].kind == "incident"  # f was defined by the skipped cell
    assert failures["test_missing"].message.startswith("after a grader incident (cell 2 killed")
    assert failures["test_stub"].kind == "visible"  # ANSWERS was never written: the student's
    assert failures["test_wrong"].kind == "visible"  # an ordinary failure stays one
    assert failures["test_uses_f"].kind == "incident"  # another exercise, but f was the skipped cell's
    assert "test_passed" not in failures


def test_a_missing_name_after_the_exercises_own_answer_was_skipped_is_the_incidents():
    died = _cell(None, [_error(INCIDENT, "cell 1 killed the kernel")], source="raise RuntimeError()")
    died["metadata"] = {"nbgrader": {"solution": True, "grade_id": "answer_f"}}
    stub = {**_cell(None, [_error("NotImplementedError", "")], source="raise NotImplementedError()"),
            "metadata": {"nbgrader": {"solution": True, "grade_id": "answer_g"}}}
    submitted = {"cells": [{**died, "source": "import os\nos._exit(1)"}]}  # it never defined f
    missing = [_error("NameError", "name 'f' is not defined", line=2)]
    failures = ia.notebook_failures({"cells": [died, _cell("test_f", missing), stub,
                                               _cell("test_g", missing)]}, submitted)
    assert failures["test_f"].kind == "incident"  # its own answer killed the kernel
    assert failures["test_g"].kind == "visible"  # another exercise, whose answer ran


def test_when_the_skipped_source_is_unknown_every_missing_name_is_the_incidents():
    assert _rerun(None)["test_stub"].kind == "incident"
    assert _rerun("%time f = 1")["test_stub"].kind == "incident"  # a magic: not Python to parse
    assert ia.defined_names("import torch.nn as tnn, os.path\nfor i, (a, b) in x: pass\nclass K: pass") == \
        {"tnn", "os", "i", "a", "b", "K"}


def test_a_grade_cell_that_wrote_to_stderr_failed_visibly():
    stderr = {"output_type": "stream", "name": "stderr", "text": "UserWarning: careful\nmore\n"}
    failure = ia.notebook_failures({"cells": [_cell("test_f", [stderr])]})["test_f"]
    assert (failure.kind, failure.message) == ("visible", "wrote to stderr: UserWarning: careful")


def test_the_same_error_with_other_numbers_or_in_spanish_counts_once():
    english = ("pairwise_distances(a (7, 3), b (5, 3)): the shape is not the expected one\n"
               "  expected: (7, 5)\n  got: (2, 3)\n  hint: square it, sum over dim=-1")
    spanish = ("pairwise_distances(a (1, 16), b (9, 16)): la forma (shape) no es la esperada\n"
               "  esperado: (1, 9)\n  obtenido: (2, 3)\n  pista: eleva al cuadrado")
    longer = english.replace("(7, 5)", "(7, 5, 4)")
    assert ia.normalise(english) == ia.normalise(spanish) == ia.normalise(longer)
    assert ia.normalise(english) != ia.normalise(english.replace("shape", "dtype"))
    assert "float32" in ia.normalise("expected: torch.float32 got: torch.float64")  # names keep digits
    assert ia.normalise("got: torch.float32") != ia.normalise("got: torch.float64")


def test_a_message_is_shown_in_english_without_its_hint():
    failure = ia.Failure("visible", "CheckFailed: f(x): los valores no coinciden\n  esperado: 1\n"
                                    "  obtenido: 2\n  pista: divide entre 255")
    item = ia._item("test_f", 1.0, [0.0], [0.0], [failure])
    assert item.messages == [("visible", "CheckFailed: f(x): the values differ\n  expected: 1\n  got: 2", 1)]


def test_discrimination_is_the_correlation_with_the_rest_of_the_total():
    item = [0.0, 1.0, 1.0, 0.0, 1.0]
    totals = [3.0, 9.0, 7.0, 2.0, 6.0]
    rest = [t - s for s, t in zip(item, totals, strict=True)]
    assert ia.discrimination(item, totals) == pytest.approx(statistics.correlation(item, rest))
    assert ia.discrimination(item, totals) > 0.8  # strong students solve it, weak ones do not
    assert ia.discrimination([1.0, 0.0, 1.0], [1.0, 5.0, 1.0]) < 0  # it favours weak students
    assert ia.discrimination([1.0, 1.0, 1.0], [3.0, 5.0, 4.0]) is None  # everyone alike: undefined
    assert ia.discrimination([1.0], [3.0]) is None


def _row(name: str, scores: dict, status: str = "graded") -> Row:
    return Row(name, name, "digest", status, "", {k: [v, 2.0] for k, v in scores.items()})


def test_analyse_counts_the_gap_and_flags_beyond_a_third(tmp_path):
    hidden = {"cells": [_cell("test_f", [_error(CHECK, "f(5): the values differ", line=5)]),
                        _cell("test_g", [])]}
    passed = {"cells": [_cell("test_f", []), _cell("test_g", [])]}
    rows, notebooks = [], {}
    for number in range(6):
        name = f"s{number}"
        fails = number < 3  # three of six pass the visible checks and fail the hidden tests
        rows.append(_row(name, {"test_f": 0.0 if fails else 2.0, "test_g": 2.0}))
        notebooks[name] = hidden if fails else passed
    rows.append(_row("broken", {}, status="invalid"))
    _write_autograded(tmp_path, notebooks)
    analysis = ia.analyse(tmp_path, "lesson", rows, {"test_f": 2.0, "test_g": 2.0})
    f, g = analysis.items
    assert (analysis.analysed, analysis.left_out) == (6, {"invalid": 1})
    assert (f.gap, f.students, f.flagged, f.mean, f.full, f.zero) == (3, 6, True, 1.0, 0.5, 0.5)
    assert f.messages == [("hidden", "CheckFailed: f(5): the values differ", 3)]
    assert (g.gap, g.flagged, g.discrimination) == (0, False, None)
    assert [item.name for item in analysis.flagged] == ["test_f"]

    rows[0].cells["test_f"] = [2.0, 2.0]  # two of six is not more than a third
    assert not ia.analyse(tmp_path, "lesson", rows, {"test_f": 2.0, "test_g": 2.0}).items[0].flagged


def _write_autograded(course_dir, notebooks: dict) -> None:
    import json

    for name, nb in notebooks.items():
        path = course_dir / "autograded" / name / "lesson" / "lesson.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))


def test_the_report_writes_page_table_and_picture(tmp_path):
    item = ia.Item("test_f", 2.0, 4, 1.0, 0.5, 0.25, 0.4, {"visible": 1, "hidden": 2, "timeout": 0,
                                                           "incident": 0},
                   [("hidden", "CheckFailed: <f> failed", 2)])
    paths = ia.write_report(ia.ItemAnalysis("lesson", [item], 4, {}), tmp_path)
    page = paths["html"].read_text()
    assert "⚑ test_f" in page and "&lt;f&gt; failed" in page and "item_analysis.png" in page
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    header, line = paths["csv"].read_text().splitlines()
    assert line.startswith("test_f,2,4,1.000,0.500,0.250,0.400,1,2,0,0,1,CheckFailed: <f> failed,hidden,2")
    assert header.split(",")[:12] == list(ia.CSV_COLUMNS)
