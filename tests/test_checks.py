import ast
import sys
import warnings
from pathlib import Path

import pytest
import torch

import course
from graders import checks
from graders.checks import CheckFailed

pytestmark = pytest.mark.usefixtures("english")


HINT = {"es": "pista en español", "en": "hint in English"}
GRADERS = Path(checks.__file__).parent


def test_check_close_passes_and_fails_with_expected_got_hint():
    checks.check_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), name="f(x)")
    with pytest.raises(CheckFailed) as caught:
        checks.check_close(torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), name="f(x)", hint=HINT)
    message = str(caught.value)
    assert message.startswith("f(x): the values differ")
    assert "expected: tensor(shape=(2,), dtype=torch.float32, device=cpu) [1.0, 2.0]" in message
    assert "got: tensor(shape=(2,), dtype=torch.float32, device=cpu) [1.0, 2.5]" in message
    assert "hint: hint in English" in message
    assert "Mismatched elements: 1 / 2" in message


def test_check_close_on_a_large_tensor_shows_both_where_they_differ_most():
    expected = torch.zeros(4, 5)
    got = expected.clone()
    got[2, 3] = 0.5
    with pytest.raises(CheckFailed) as caught:
        checks.check_close(got, expected, name="f(x)")
    message = str(caught.value)
    assert "expected: tensor(shape=(4, 5), dtype=torch.float32, device=cpu), [2, 3] = 0.0" in message
    assert "got: tensor(shape=(4, 5), dtype=torch.float32, device=cpu), [2, 3] = 0.5" in message
    assert "detail: Mismatched elements: 1 / 20; the greatest absolute difference, 0.5, at index (2, 3)" \
        in message


def test_check_close_says_what_it_measured_in_the_editions_language(spanish):
    with pytest.raises(CheckFailed) as caught:
        checks.check_close(1.5, 2.0, name="f(x)")
    assert str(caught.value).splitlines()[-1] == "  detail: absolute difference: 0.5 (up to 1e-07 allowed)"
    with spanish(), pytest.raises(CheckFailed) as caught:
        checks.check_close(torch.tensor([1.0, 2.5]), torch.tensor([1.0, 2.0]), name="f(x)")
    assert str(caught.value).splitlines()[-1] == (
        "  detalle: elementos distintos: 1 / 2; la mayor diferencia absoluta, 0.5, en el índice (1,) "
        "(se admite hasta 1e-05)")


def test_messages_follow_the_edition_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        checks.check_shape(torch.zeros(2, 3), (3, 2), name={"es": "forma", "en": "shape"}, hint=HINT)
    message = str(caught.value)
    assert message.startswith("forma: la forma (shape) no es la esperada")
    assert "esperado: (3, 2)" in message and "obtenido: (2, 3)" in message
    assert "pista: pista en español" in message
    with pytest.raises(ValueError, match="language must be one of"):
        course.set_language("fr")


def test_check_close_names_the_first_real_problem():
    with pytest.raises(CheckFailed, match="type is not the expected one"):
        checks.check_close(None, torch.zeros(2), name="f")
    with pytest.raises(CheckFailed, match="shape is not the expected one"):
        checks.check_close(torch.zeros(3), torch.zeros(2), name="f")
    with pytest.raises(CheckFailed, match="dtype is not the expected one"):
        checks.check_close(torch.zeros(2, dtype=torch.float64), torch.zeros(2), name="f")
    with pytest.raises(CheckFailed, match="values differ"):
        checks.check_close(torch.tensor([float("nan")]), torch.tensor([0.0]), name="f")


def test_check_close_on_numbers_accepts_one_element_tensors():
    checks.check_close(torch.tensor(7.0), 7.0, name="x.grad")
    checks.check_close(7, 7.0, name="x.grad")
    with pytest.raises(CheckFailed, match="values differ"):
        checks.check_close(torch.tensor([6.0]), 7.0, name="x.grad")
    with pytest.raises(CheckFailed, match="type is not the expected one"):
        checks.check_close(True, 1.0, name="x.grad")
    with pytest.raises(CheckFailed, match="type is not the expected one"):
        checks.check_close("7", 7.0, name="x.grad")


class AlwaysEqual:
    """What a student might return to fool `==`."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


def test_objects_that_claim_equality_do_not_pass():
    with pytest.raises(CheckFailed):
        checks.check_equal(AlwaysEqual(), 3, name="n")
    with pytest.raises(CheckFailed):
        checks.check_close(AlwaysEqual(), torch.zeros(2), name="t")
    with pytest.raises(CheckFailed):
        checks.check_close(AlwaysEqual(), 1.0, name="t")
    with pytest.raises(CheckFailed):
        checks.check_true(AlwaysEqual(), name="c", expected="True", got="?")


def test_check_equal_is_strict_about_type():
    checks.check_equal((2, 3), (2, 3), name="shape")
    with pytest.raises(CheckFailed):
        checks.check_equal([2, 3], (2, 3), name="shape")
    with pytest.raises(CheckFailed):
        checks.check_equal(1, True, name="flag")


def test_check_raises():
    checks.check_raises(lambda: 1 / 0, ZeroDivisionError, name="f()")
    with pytest.raises(CheckFailed, match="should have raised an exception and raised none"):
        checks.check_raises(lambda: 5, ValueError, name="f()")
    with pytest.raises(CheckFailed, match="raised a different exception"):
        checks.check_raises(lambda: {}["k"], ValueError, name="f()")


class _LibraryError(RuntimeError):
    """A library's error whose message explains at length, in colour, what one could do."""


_LONG_ERROR = ("Weights only load failed. You have two options, \x1b[1monly if you trust the file\x1b[0m.\n"
               "\t(1) Re-running `torch.load` with `weights_only` set to `False` will likely succeed.\n"
               "\tWeightsUnpickler error: Unsupported global: GLOBAL torch.nn.Linear was not allowed. "
               + "Please use `torch.serialization.add_safe_globals` " * 5 + "\n\nCheck the documentation.")


def _raise(error):
    raise error


def test_error_summary_keeps_the_line_that_names_the_cause_without_colour():
    summary = checks.error_summary(_LibraryError(_LONG_ERROR))
    assert summary == ("_LibraryError: WeightsUnpickler error: Unsupported global: GLOBAL torch.nn.Linear "
                       "was not allowed.")
    assert checks.error_summary(ValueError("\x1b[31mbad\x1b[0m value\nmore lines")) == "ValueError: bad value"
    assert checks.error_summary(KeyError("k")) == "KeyError: 'k'"
    assert checks.error_summary(StopIteration()) == "StopIteration"
    worker = ValueError("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                        "call last):\n  File \"x.py\", line 3, in f\nValueError: bad pixel")
    assert checks.error_summary(worker) == "ValueError: bad pixel"
    long = checks.error_summary(RuntimeError("x" * 500))
    assert len(long) == checks.ERROR_LENGTH and long.endswith("…")


def test_a_library_error_in_a_got_line_is_short_and_without_colour():
    for check in (lambda: checks.check_runs(_raise, _LibraryError(_LONG_ERROR), name="f()", hint=HINT),
                  lambda: checks.check_raises(_raise, ValueError, _LibraryError(_LONG_ERROR), name="f()",
                                              hint=HINT)):
        with pytest.raises(CheckFailed) as caught:
            check()
        message = str(caught.value)
        assert "got: _LibraryError: WeightsUnpickler error: Unsupported global" in message
        assert "\x1b" not in message and "Please use" not in message and "Re-running" not in message
        assert message.endswith("hint: hint in English")


def test_check_device_on_tensors_and_modules():
    checks.check_device(torch.zeros(1, device="meta"), "meta", name="x")
    checks.check_device(torch.nn.Linear(2, 2), "cpu", name="model")
    with pytest.raises(CheckFailed, match="expected: meta"):
        checks.check_device(torch.zeros(1), torch.device("meta"), name="x")


def test_check_shares_memory():
    base = torch.arange(6)
    checks.check_shares_memory(base.view(2, 3), base, True, name="v")
    checks.check_shares_memory(base.clone(), base, False, name="c")
    with pytest.raises(CheckFailed, match="does not share memory"):
        checks.check_shares_memory(base.clone(), base, True, name="c")


def test_checks_emit_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checks.check_close(torch.tensor([1.0]), torch.tensor([1.0]), name="x")


def test_a_hint_with_a_second_hint_says_how_to_ask_for_it():
    with pytest.raises(CheckFailed) as caught:
        checks.check_equal(1, 2, name="f()", hint={**HINT, "more": "some_exercise"})
    assert str(caught.value).endswith(
        "hint: hint in English\n  if you are still stuck: hint('some_exercise')")


def _student_function(namespace: dict):
    exec("def answer(x):\n    return root(x)\n", namespace)
    return namespace["answer"]


def test_shortcuts_off_refuses_a_function_under_any_name_and_puts_it_back():
    import math as owner
    namespace = {"root": owner.sqrt}
    message = {"es": "{name} no está disponible", "en": "{name} is not available here"}
    with checks.shortcuts_off([(owner, "sqrt")], _student_function(namespace), message=message):
        with pytest.raises(checks.ShortcutUsed, match="math.sqrt is not available here"):
            owner.sqrt(4)
        with pytest.raises(checks.ShortcutUsed, match="root is not available here"):
            namespace["root"](4)
    assert owner.sqrt(4) == namespace["root"](4) == 2


def test_shortcuts_off_reaches_the_notebook_namespace_without_being_told(monkeypatch):
    import math as owner
    notebook = vars(sys.modules["__main__"])
    monkeypatch.setitem(notebook, "square_root", owner.sqrt)
    with checks.shortcuts_off([(owner, "sqrt")]), pytest.raises(checks.ShortcutUsed, match="square_root"):
        notebook["square_root"](4)
    assert notebook["square_root"](9) == 3


def test_seeded_draws_the_same_and_gives_the_student_state_back():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    with checks.seeded(3):
        first = torch.rand(4)
    with checks.seeded(3):
        assert torch.equal(torch.rand(4), first)
    assert torch.equal(torch.get_rng_state(), before)


def test_spy_sgd_records_each_step_and_tells_its_listener():
    weight = torch.nn.Parameter(torch.ones(2))
    heard = []
    spy = checks.SpySGD([weight], lr=0.5, on_step=lambda record: heard.append(record.grads[0].tolist()))
    weight.grad = torch.tensor([1.0, -2.0])
    spy.step()
    assert heard == [[1.0, -2.0]]
    assert spy.steps[0].before[0].tolist() == [1.0, 1.0]
    assert spy.steps[0].after[0].tolist() == [0.5, 2.0]


def test_modes_seen_notes_every_pass_a_copy_of_the_model_included():
    import copy

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    seen, handles = checks.modes_seen({"dropout": model[1]})
    model.eval()(torch.zeros(1, 2))
    copy.deepcopy(model).train()(torch.zeros(1, 2))
    for handle in handles:
        handle.remove()
    model(torch.zeros(1, 2))
    assert seen == [("dropout", False), ("dropout", True)]


def _bilingual_dicts(path: Path) -> list[str]:
    """``file:line`` of each dict display keyed by "es" and "en", but the one ``checks.both`` returns."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside_both = {id(node) for function in ast.walk(tree) if path.name == "checks.py"
                   and isinstance(function, ast.FunctionDef) and function.name == "both"
                   for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict) or id(node) in inside_both:
            continue
        by_key = {key.value: value for key, value in zip(node.keys, node.values, strict=True)
                  if isinstance(key, ast.Constant)}
        if not {"es", "en"} <= by_key.keys():
            continue
        # a table by language (WORDS, which other modules index by language) is a vocabulary, not a text
        if not (isinstance(by_key["es"], ast.Dict) and isinstance(by_key["en"], ast.Dict)):
            found.append(f"{path.relative_to(GRADERS.parent)}:{node.lineno}")
    return found


def test_check_code_writes_bilingual_text_one_way():
    paths = [GRADERS / "checks.py", *sorted((GRADERS / "lesson_checks").glob("*.py"))]
    found = [where for path in paths for where in _bilingual_dicts(path)]
    assert not found, f"write these texts as checks.both(es, en): {', '.join(found)}"
