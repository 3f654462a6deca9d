"""The judge (graders/judge/): plain data from a kernel, decoded strictly, and the concept
questions' verdict decided from it and from what only the grader knows."""

import json
import math

import nbformat
import numpy as np
import pytest
import torch
from lesson_files import LESSONS, hidden_answers, read_solution, solved_edition
from wrong_answers import WRONG_ANSWERS

from graders.grade.resilient_execute import ResilientExecute
from graders.judge import calls, concepts, wire
from graders.judge.wire import Malformed, Refused
from graders.lesson_checks.questions import draw
from graders.lessons import lesson_names, solution_path
from graders.nbgrader_adapter import grade_id

LESSON = "01_tensors"
MODULE = f"graders.lesson_checks.{lesson_names(LESSON).check_module}"
CLASS = [["ana", "Ana García"], ["ben"], ["cruz"]]


def _sent(namespace: dict, names: list[str], asked=()) -> str:
    """What a kernel holding ``namespace`` answers to the probe, as IPython shows it."""
    exec(wire.probe(names, list(asked)), namespace)
    return repr(namespace[wire.RESULT])


def _received(namespace: dict, names: list[str]) -> dict:
    text = wire.reply_text({"status": "ok", "data": {"text/plain": _sent(namespace, names)}})
    return wire.decode_reply(text)[0]


def test_plain_values_arrive_as_they_were():
    values = {"n": 3, "x": 0.1, "nan": math.nan, "s": "ok", "none": None, "flag": True,
              "shape": torch.Size([2, 3]), "pair": (1, (2, "a")), "items": [1, [2]], "dtype": torch.bfloat16,
              "table": {"a": 1, 2: (3,), None: [4]}, "numpy": np.int64(7),
              "tensor": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 3,
              "ints": torch.tensor([[2**60, -1]]), "mask": torch.tensor([True, False])}
    got = _received(dict(values), list(values) + ["absent"])
    assert "absent" not in got and math.isnan(got.pop("nan"))
    tensors = {name: got.pop(name) for name in ("tensor", "ints", "mask")}
    expected = {name: value for name, value in values.items() if name not in ("nan", *tensors)}
    assert got == {**expected, "shape": (2, 3), "numpy": 7}
    for name, tensor in tensors.items():
        assert type(tensor) is torch.Tensor
        torch.testing.assert_close(tensor, values[name], rtol=0, atol=0)


def test_a_subclass_or_any_other_object_is_refused_and_named():
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return True

    class Everything(dict):
        def __contains__(self, key):
            return True

    got = _received({"liar": torch.zeros(2).as_subclass(Liar), "sheet": Everything(a=1),
                     "answer": [object()], "parameter": torch.nn.Parameter(torch.zeros(1))},
                    ["liar", "sheet", "answer", "parameter"])
    assert got["liar"] == Refused(f"{__name__}.test_a_subclass_or_any_other_object_is_refused_and_named"
                                  ".<locals>.Liar")
    assert isinstance(got["sheet"], Refused) and got["answer"] == [Refused("builtins.object")]
    assert got["parameter"] == Refused("torch.nn.parameter.Parameter")


@pytest.mark.parametrize("reply", [
    {"status": "error"}, {"status": "ok", "data": {"text/plain": "__import__('os')"}},
    {"status": "ok", "data": {"text/plain": "b'bytes'"}}, {"status": "ok", "data": {"text/plain": 42}},
    {"status": "ok", "data": {"text/plain": "'" + "x" * (2 * wire.MAX_BYTES) + "'"}}])
def test_a_reply_that_is_not_a_string_literal_is_refused(reply):
    with pytest.raises(Malformed):
        wire.reply_text(reply)


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"values": {}}', '{"values": {}, "calls": {}, "more": 1}',
    '{"values": [], "calls": {}}',
    '{"values": {}, "calls": {"c": 1}}', '{"error": "NameError"}', '{"x": {"pickle": "gASV"}}',
    '{"x": {"float": 1.5}}', '{"x": {"dtype": "Tensor"}}', '{"x": {"device": "moon"}}',
    '{"x": {"tensor": {"dtype": "float32", "shape": [2], "values": ["1.0"]}}}',
    '{"x": {"dict": [[{"list": []}, 1]]}}', '{"x": ' + '{"list": [' * 40 + "]}" * 40 + "}",
    '{"x": {"a": 1, "b": 2}}'])
def test_json_not_of_the_encoders_shape_is_refused(text):
    if text.startswith('{"x"'):
        text = '{"values": ' + text + ', "calls": {}}'
    with pytest.raises(Malformed):
        wire.decode_reply(text)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lessons_concept_cell_is_read_without_running_it(lesson):
    cell = concepts.concept_cell(read_solution(lesson).cells)
    assert cell.module == f"graders.lesson_checks.{lesson_names(lesson).check_module}"
    assert cell.truths == hidden_answers(lesson)[1]


def _verdict(values, submitter=CLASS[1], points=2.0, why=""):
    cell = concepts.concept_cell(read_solution(LESSON).cells)
    return concepts.verdict(cell, values, why, submitter, CLASS, points, "en")


def _answers_for(identity: str) -> dict:
    truths = hidden_answers(LESSON)[1]
    return {qid: truths[qid] for qid in draw(MODULE, identity)}


def test_a_notebook_answering_its_own_draw_earns_full_marks():
    decided = _verdict({"ANSWERS": _answers_for("ben"), "STUDENT_ID": "ben"})
    assert decided.score == 2.0
    assert decided.draw == {"identity": "ben", "status": "own", "named": "", "questions": draw(MODULE, "ben")}


def test_a_copied_notebook_is_graded_on_its_submitters_draw_whatever_it_claims():
    decided = _verdict({"ANSWERS": _answers_for("ana"), "STUDENT_ID": "ana"})
    overlap = set(draw(MODULE, "ana")) & set(draw(MODULE, "ben"))
    assert decided.score == round(2 * len(overlap) / 5, 2)
    assert decided.draw["status"] == "another_student" and decided.draw["named"] == "ana"
    assert any("another student of the class" in line for line in decided.lines)


def test_no_data_or_refused_answers_earn_nothing_and_say_why():
    nothing = _verdict(None, why="the notebook did not run to its end")
    assert nothing.score == 0 and "did not run to its end" in nothing.lines[0]
    assert nothing.draw["identity"] == "ben"
    sheet = _verdict({"ANSWERS": Refused("__main__.Everything"), "STUDENT_ID": "ben"})
    assert sheet.score == 0 and "ANSWERS is not plain data (__main__.Everything)" in sheet.lines[0]


def test_a_refused_answer_counts_as_wrong_the_others_still_count():
    answers = _answers_for("ben")
    first = next(iter(answers))
    decided = _verdict({"ANSWERS": {**answers, first: Refused("builtins.object")}, "STUDENT_ID": "ben"})
    assert decided.score == round(2 * 3 / 5, 2)  # four right, one wrong
    assert any(f"ANSWERS['{first}'] is not plain data" in line for line in decided.lines)


def test_the_probe_asks_for_names_and_calls_and_sends_json():
    text = wire.probe(["ANSWERS"], [{"cell": "c", "function": "double", "args": [[wire.encode((1, 2.5))]]}])
    assert "pickle" not in text
    namespace = {"ANSWERS": {"q": (1, 2)}, "double": lambda pair: [pair, pair]}
    exec(text, namespace)
    assert json.loads(namespace[wire.RESULT]) == {
        "values": {"ANSWERS": {"dict": [["q", {"tuple": [1, 2]}]]}},
        "calls": {"c": [{"list": [{"tuple": [1, {"float": "2.5"}]}] * 2}]}}


# ------------------------------------------------------------------------- judged calls
def _kernel_with(answers: dict) -> dict:
    """A namespace holding lesson 01's reference answers, some replaced."""
    namespace = {"torch": torch, "np": np}
    for cell in solved_edition(LESSON, "en").cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(cell.source, namespace)
    return {**namespace, **answers}


def _judged(namespace: dict, secret: str = "term") -> dict:
    """Each judged cell's score for a kernel holding ``namespace``."""
    exec(wire.probe(concepts.NAMES, calls.probe_calls(LESSON, secret)), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged(LESSON)}
    return calls.cell_scores(LESSON, secret, solution_path(LESSON), returned, points)


def test_the_reference_and_a_right_answer_written_another_way_earn_every_judged_cell():
    assert set(_judged(_kernel_with({}), "term").values()) == {1.0}
    other_ways = {"pairwise_distances": lambda a, b: torch.cdist(a, b),
                  "flatten_per_image": lambda batch: batch.flatten(1),
                  "to_unit_float": lambda images: images.float() * (1 / 255)}
    assert set(_judged(_kernel_with(other_ways)).values()) == {1.0}


def test_a_wrong_a_raising_or_a_lying_answer_loses_its_cell_only():
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return True

    def stub(*args):
        raise NotImplementedError

    def lying(a, b):
        return torch.zeros(len(a), len(b)).as_subclass(Liar)

    scores = _judged(_kernel_with({"to_unit_float": lambda images: images, "pairwise_distances": lying,
                                   "linear_forward": stub}))
    assert [cell for cell, score in scores.items() if score == 0] == [
        "test_to_unit_float", "test_pairwise_distances", "test_linear_forward"]


def test_an_outcome_judges_what_the_answer_does_not_only_what_it_returns():
    copies = _judged(_kernel_with({"from_numpy_pair": lambda array: (torch.tensor(array),) * 2}))
    views = _judged(_kernel_with({"from_numpy_pair": lambda array: (torch.from_numpy(array),) * 2}))
    other_way = _judged(_kernel_with({"from_numpy_pair": lambda array: (torch.as_tensor(array),
                                                                        torch.from_numpy(array.copy()))}))
    assert (copies["test_from_numpy_pair"], views["test_from_numpy_pair"],
            other_way["test_from_numpy_pair"]) == (0.0, 0.0, 1.0)


def test_the_inputs_come_from_the_classs_secret_and_differ_from_one_term_to_the_next(tmp_path, monkeypatch):
    first, second = calls.probe_calls(LESSON, "2026-autumn"), calls.probe_calls(LESSON, "2027-spring")
    assert first == calls.probe_calls(LESSON, "2026-autumn") and first != second
    monkeypatch.delenv(calls.SECRET_ENV, raising=False)
    made = calls.class_secret(tmp_path)
    assert made == calls.class_secret(tmp_path)
    assert oct((tmp_path / calls.SECRET_FILE).stat().st_mode)[-3:] == "600"
    monkeypatch.setenv(calls.SECRET_ENV, "set by the instructor")
    assert calls.class_secret(tmp_path) == "set by the instructor"


def test_nothing_returned_earns_no_judged_cell():
    points = {call.grade_cell: 1.0 for call in calls.judged(LESSON)}
    assert set(calls.cell_scores(LESSON, "term", solution_path(LESSON), None, points).values()) == {0.0}


# ------------------------------------------------------------------ every lesson's judged calls
def _reference_namespace(lesson: str) -> dict:
    """The lesson's answers as the judge runs its reference: each judged name."""
    source = read_solution(lesson)
    return {call.function: calls.reference_answer(source, call) for call in calls.judged(lesson)
            if calls.answer_cells(call)}


def _scores(lesson: str, namespace: dict) -> dict:
    exec(wire.probe([], calls.probe_calls(lesson, "term")), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged(lesson)}
    return calls.cell_scores(lesson, "term", solution_path(lesson), returned, points)


JUDGED_LESSONS = [lesson for lesson in LESSONS if calls.judged(lesson)]
DO_NOTHING = {"None": lambda *args: None, "its first input": lambda first, *rest: first,
              "zero": lambda *args: 0}


@pytest.mark.parametrize("lesson", JUDGED_LESSONS)
def test_the_reference_earns_every_judged_cell_through_the_wire(lesson):
    scores = _scores(lesson, _reference_namespace(lesson))
    assert {cell for cell, score in scores.items() if score != 1.0} == {
        call.grade_cell for call in calls.judged(lesson) if not calls.answer_cells(call)}


@pytest.mark.parametrize("answer", DO_NOTHING, ids=list(DO_NOTHING))
@pytest.mark.parametrize("lesson", JUDGED_LESSONS)
def test_an_answer_that_does_nothing_earns_no_judged_cell(lesson, answer):
    namespace = _reference_namespace(lesson)
    namespace.update({call.function: DO_NOTHING[answer] for call in calls.judged(lesson)})
    assert set(_scores(lesson, namespace).values()) == {0.0}



# Mistakes the judge cannot see in what the answer gives: the kernel's checks catch them (the engine
# entered once per output, ...), and a judged cell scores the lower of the two verdicts.
SAME_OUTCOME = {}
WRONG = [(lesson, answer) for lesson in JUDGED_LESSONS for answer in WRONG_ANSWERS.get(lesson, {})
         if any(answer in calls.answer_cells(call) for call in calls.judged(lesson))]


@pytest.mark.parametrize(("lesson", "answer"), WRONG, ids=[f"{lesson}-{answer}" for lesson, answer in WRONG])
def test_a_plausible_wrong_answer_loses_a_judged_cell(lesson, answer):
    source = read_solution(lesson)
    answers = dict.fromkeys(cell for call in calls.judged(lesson) for cell in calls.answer_cells(call))
    namespace = calls.reference_namespace(source, tuple(answers))
    exec(WRONG_ANSWERS[lesson][answer], namespace)
    scores = _scores(lesson, namespace)
    lost = [call.grade_cell for call in calls.judged(lesson)
            if answer in calls.answer_cells(call) and scores[call.grade_cell] == 0]
    assert bool(lost) != (answer in SAME_OUTCOME.get(lesson, set())), scores


def _answers_notebook(lesson: str):
    """The lesson's imports and the answer cells its judged calls need, as a notebook."""
    source = read_solution(lesson)
    wanted = {cell for call in calls.judged(lesson) for cell in calls.answer_cells(call)}
    imports = nbformat.v4.new_code_cell(calls.PRELUDE + calls.notebook_imports(source))
    return nbformat.v4.new_notebook(cells=[imports] + [
        nbformat.v4.new_code_cell(cell.source) for cell in source.cells if grade_id(cell) in wanted])


@pytest.mark.kernel
@pytest.mark.parametrize("lesson", JUDGED_LESSONS)
def test_the_reference_earns_every_judged_cell_from_a_real_kernel(lesson, tmp_path):
    """The grader's probe in a real kernel: the outcomes imported there, each call in its time."""
    judge_file = tmp_path / "judge.json"
    executor = ResilientExecute(timeout=60, judge_file=str(judge_file), judge_names=[],
                                judge_calls=json.dumps(calls.probe_calls(lesson, "term")))
    executor.preprocess(_answers_notebook(lesson), {"metadata": {"path": str(tmp_path)}})
    found = json.loads(judge_file.read_text())
    assert found["why"] == ""
    returned = {cell: [wire.decode(result) for result in results] for cell, results in found["calls"].items()}
    points = {call.grade_cell: 1.0 for call in calls.judged(lesson)}
    scores = calls.cell_scores(lesson, "term", solution_path(lesson), returned, points)
    assert {cell for cell, score in scores.items() if score != 1.0} == {
        call.grade_cell for call in calls.judged(lesson) if not calls.answer_cells(call)}


def test_coverage_names_the_cells_resting_on_the_kernels_word():
    assert calls.coverage(LESSON) == (11.0, 11.0, [])


def test_the_clock_waits_for_a_first_import_but_not_for_a_loop_inside_one(tmp_path, monkeypatch):
    (tmp_path / "slow_first_import.py").write_text("import time\ntime.sleep(0.5)\nVALUE = 3\n")
    (tmp_path / "import_that_loops.py").write_text("while True:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def uses_a_slow_module(x):
        import slow_first_import
        return slow_first_import.VALUE * x

    def loops_in_an_import(x):
        import import_that_loops  # noqa: F401

    asked = [{"cell": "slow", "function": "uses_a_slow_module", "args": [[wire.encode(2)]]},
             {"cell": "loop", "function": "loops_in_an_import", "args": [[wire.encode(2)]]}]
    namespace = {"uses_a_slow_module": uses_a_slow_module, "loops_in_an_import": loops_in_an_import}
    exec(wire.probe([], asked, seconds=0.2), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    assert returned == {"slow": [6], "loop": [Refused("raised TimeoutError")]}


def test_a_call_that_never_returns_is_stopped_and_costs_only_its_own_result():
    def forever(x):
        while True:
            pass

    asked = [{"cell": "c", "function": "forever", "args": [[wire.encode(1)]]},
             {"cell": "d", "function": "double", "args": [[wire.encode(2)]]}]
    namespace = {"forever": forever, "double": lambda x: 2 * x}
    exec(wire.probe([], asked, seconds=0.2), namespace)
    assert wire.decode_reply(namespace[wire.RESULT])[1] == {"c": [Refused("raised TimeoutError")], "d": [4]}
