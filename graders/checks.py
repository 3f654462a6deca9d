"""Checks that grade cells call: each failure says what was expected, what was got, and a hint.

Messages follow the edition's language (``course.set_language``, called by a cell of each edition);
hints are given in both languages (``{"es": ..., "en": ...}``) because grade cells are shared
by the two editions.
"""

import contextlib
import dataclasses
import functools
import math
import numbers
import re
import sys
import types
from unittest import mock

import torch

from course.settings import get_language, say

WORDS = {
    "es": {
        "expected": "esperado",
        "got": "obtenido",
        "hint": "pista",
        "detail": "detalle",
        "wrong": "no es correcto",
        "values": "los valores no coinciden",
        "type": "el tipo no es el esperado",
        "shape": "la forma (shape) no es la esperada",
        "dtype": "el dtype no es el esperado",
        "device": "el dispositivo no es el esperado",
        "no_raise": "debía lanzar una excepción y no lanzó ninguna",
        "wrong_raise": "lanzó una excepción distinta de la esperada",
        "returned": "devolvió",
        "shares": "comparte memoria con el original",
        "not_shares": "no comparte memoria con el original",
        "raised": "lanzó una excepción",
        "no_exception": "que termine sin lanzar ninguna excepción",
        "more": "si sigues sin verlo",
        "mismatched": "elementos distintos: {count} / {total}",
        "largest": "la mayor diferencia absoluta, {difference}, en el índice {index}",
        "difference": "diferencia absoluta: {difference}",
        "allowed": " (se admite hasta {tolerance})",
    },
    "en": {
        "expected": "expected",
        "got": "got",
        "hint": "hint",
        "detail": "detail",
        "wrong": "is not right",
        "values": "the values differ",
        "type": "the type is not the expected one",
        "shape": "the shape is not the expected one",
        "dtype": "the dtype is not the expected one",
        "device": "the device is not the expected one",
        "no_raise": "should have raised an exception and raised none",
        "wrong_raise": "raised a different exception than expected",
        "returned": "returned",
        "shares": "shares memory with the original",
        "not_shares": "does not share memory with the original",
        "raised": "raised an exception",
        "no_exception": "to finish without raising an exception",
        "more": "if you are still stuck",
        "mismatched": "Mismatched elements: {count} / {total}",
        "largest": "the greatest absolute difference, {difference}, at index {index}",
        "difference": "absolute difference: {difference}",
        "allowed": " (up to {tolerance} allowed)",
    },
}


def _words() -> dict:
    return WORDS[get_language()]


class CheckFailed(AssertionError):
    """A grade-cell check that did not pass; its message is meant for the student."""


def describe(value) -> str:
    """A short, honest description of a value: tensors show shape, dtype, device and small contents."""
    if isinstance(value, torch.Tensor):
        head = f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
        if value.device.type != "meta" and value.numel() <= 12:
            head += f" {value.detach().cpu().tolist()}"
        return head
    text = repr(value)
    shown = text if len(text) <= 200 else text[:200] + "..."
    return f"{shown} ({type(value).__name__})"


_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A line of an error's message that names an error itself ("WeightsUnpickler error: Unsupported
# global: ..."): where a library's long message states its cause.
_NAMES_AN_ERROR = re.compile(r"\b\w*(error|exception)\b\s*:", re.IGNORECASE)
ERROR_LENGTH = 200


def error_summary(error: BaseException, limit: int = ERROR_LENGTH) -> str:
    """``Type: cause`` of an exception, short enough for a "got" line: terminal colour codes
    stripped and, of a message of several lines (a library's explanation of what one could do), the
    line that names the cause: one that names an error itself, else the first. A line longer than
    ``limit`` keeps its first sentence, and is cut at ``limit`` characters."""
    lines = [line.strip() for line in _COLOUR.sub("", str(error)).splitlines() if line.strip()]
    cause = next((line for line in lines[1:] if _NAMES_AN_ERROR.search(line)), lines[0] if lines else "")
    if len(cause) > limit:
        cause = re.split(r"(?<=[.!?])\s", cause, maxsplit=1)[0]
    kind = type(error).__name__
    text = cause if cause.startswith(f"{kind}:") else f"{kind}: {cause}" if cause else kind
    return text if len(text) <= limit else text[:limit - 1] + "…"


def fail(name: str, problem: str, expected: str, got: str, hint=None, detail: str = "") -> None:
    """Raise :class:`CheckFailed` with the course's expected / got / hint layout."""
    __tracebackhide__ = True
    words = _words()
    lines = [f"{say(name)}: {problem}", f"  {words['expected']}: {expected}", f"  {words['got']}: {got}"]
    if detail:
        lines.append(f"  {words['detail']}: {detail}")
    if hint:
        lines.append(f"  {words['hint']}: {say(hint)}")
    if isinstance(hint, dict) and hint.get("more"):
        lines.append(f"  {words['more']}: hint({hint['more']!r})")
    raise CheckFailed("\n".join(lines))


def check_type(got, expected_type, *, name: str, hint=None) -> None:
    """``got`` is an instance of ``expected_type`` (a class or a tuple of classes)."""
    __tracebackhide__ = True
    if not isinstance(got, expected_type):
        names = (
            " | ".join(t.__name__ for t in expected_type)
            if isinstance(expected_type, tuple)
            else expected_type.__name__
        )
        fail(name, _words()["type"], names, describe(got), hint)


def check_shape(got, shape, *, name: str, hint=None) -> None:
    """``got`` is a tensor of exactly this shape."""
    __tracebackhide__ = True
    check_type(got, torch.Tensor, name=name, hint=hint)
    if tuple(got.shape) != tuple(shape):
        fail(name, _words()["shape"], str(tuple(shape)), str(tuple(got.shape)), hint)


def check_dtype(got, dtype, *, name: str, hint=None) -> None:
    """``got`` is a tensor of this dtype."""
    __tracebackhide__ = True
    check_type(got, torch.Tensor, name=name, hint=hint)
    if got.dtype != dtype:
        fail(name, _words()["dtype"], str(dtype), str(got.dtype), hint)


def check_device(got, device, *, name: str, hint=None) -> None:
    """``got`` (a tensor or a module) lives on ``device``'s type (``cuda:0`` counts as ``cuda``)."""
    __tracebackhide__ = True
    if isinstance(got, torch.nn.Module):
        tensors = list(got.parameters()) + list(got.buffers())
        got_types = sorted({t.device.type for t in tensors}) or ["(no parameters)"]
    else:
        check_type(got, torch.Tensor, name=name, hint=hint)
        got_types = [got.device.type]
    wanted = torch.device(device).type
    if got_types != [wanted]:
        fail(name, _words()["device"], wanted, ", ".join(got_types), hint)


def check_close(got, expected, *, name: str, hint=None, rtol=None, atol=None) -> None:
    """``got`` matches ``expected`` within tolerance, through ``torch.testing.assert_close``.

    Type, shape and dtype are checked first so that the message names the first real problem.
    A Python number may be expected; then ``got`` may be a number or a one-element tensor.
    """
    __tracebackhide__ = True
    if isinstance(expected, numbers.Real) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        check_type(got, numbers.Real, name=name, hint=hint)
        if isinstance(got, bool):
            fail(name, _words()["type"], "float", describe(got), hint)
        shown = (describe(expected), describe(got))
        got = torch.tensor(float(got), dtype=torch.float64)
        expected = torch.tensor(float(expected), dtype=torch.float64)
    else:
        check_shape(got, expected.shape, name=name, hint=hint)
        check_dtype(got, expected.dtype, name=name, hint=hint)
        shown = (describe(expected), describe(got))
        got = got.detach().cpu()
        expected = expected.detach().cpu()
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=False)
        return
    except AssertionError as error:
        report = str(error)
    if shown[0] == shown[1]:  # too large to show whole: show both where they differ most
        shown = tuple(f"{text}, {where}" if where else text
                      for text, where in zip(shown, _furthest_apart(report, expected, got), strict=True))
    fail(name, _words()["values"], *shown, hint, _measured(report))


# What torch.testing.assert_close's report measures, as it words it.
_MEASURED = {
    "mismatched": re.compile(r"Mismatched elements: (?P<count>\d+) / (?P<total>\d+)"),
    "largest": re.compile(r"Greatest absolute difference: (?P<difference>\S+) at index (?P<index>\([\d, ]*\))"
                          r"(?: \(up to (?P<tolerance>\S+) allowed\))?"),
    "difference": re.compile(r"^Absolute difference: (?P<difference>\S+)"
                             r"(?: \(up to (?P<tolerance>\S+) allowed\))?", re.MULTILINE),
}


def _measured(report: str) -> str:
    """What ``assert_close``'s ``report`` measured, in the edition's language: how many elements
    differ and the greatest difference (where, and what was allowed); the report's own lines, less
    its headline and its "Expected x but got y", when it words them otherwise."""
    words, parts = _words(), []
    for key, pattern in _MEASURED.items():
        if found := pattern.search(report):
            fields = found.groupdict()
            parts.append(words[key].format(**fields)
                         + (words["allowed"].format(**fields) if fields.get("tolerance") else ""))
    lines = [line.strip() for line in report.splitlines()[1:]
             if line.strip() and not line.startswith("Expected ")]
    return "; ".join(parts or lines[:2])


def _furthest_apart(report: str, expected, got) -> tuple[str, str]:
    """``[i, j] = value`` of ``expected`` and of ``got`` at the index where ``assert_close``'s
    ``report`` says they differ most; empty strings when it names none."""
    found = _MEASURED["largest"].search(report)
    if found is None:
        return "", ""
    index = tuple(int(i) for i in found["index"].strip("()").split(",") if i.strip())
    return tuple(f"[{', '.join(map(str, index))}] = {tensor[index].item()}" for tensor in (expected, got))


def check_equal(got, expected, *, name: str, hint=None) -> None:
    """Exact equality for plain values (ints, strings, tuples, bools), type included."""
    __tracebackhide__ = True
    if type(got) is not type(expected) or got != expected:
        fail(name, _words()["wrong"], describe(expected), describe(got), hint)


def check_true(condition: bool, *, name: str, expected: str, got: str, hint=None) -> None:
    """A condition the other checks cannot express; ``expected``/``got`` describe it."""
    __tracebackhide__ = True
    if condition is not True:
        fail(name, _words()["wrong"], say(expected), say(got), hint)


def check_raises(function, exception, *args, name: str, hint=None, **kwargs) -> None:
    """Calling ``function(*args, **kwargs)`` raises ``exception`` (or a subclass)."""
    __tracebackhide__ = True
    words = _words()
    try:
        result = function(*args, **kwargs)
    except exception:
        return
    except Exception as error:  # any other exception is the wrong answer, shown as such
        raised = error_summary(error)
    else:
        raised = None
    # failing outside the except block keeps the student's traceback out of the message
    if raised is not None:
        fail(name, words["wrong_raise"], exception.__name__, raised, hint)
    fail(name, words["no_raise"], exception.__name__, f"{words['returned']} {describe(result)}", hint)


def check_shares_memory(view, base, expected: bool, *, name: str, hint=None) -> None:
    """Whether ``view`` uses the same storage as ``base`` (a view) or its own (a copy)."""
    __tracebackhide__ = True
    check_type(view, torch.Tensor, name=name, hint=hint)
    shares = view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    if shares != expected:
        words = _words()
        fail(name, words["wrong"], words["shares" if expected else "not_shares"],
             words["shares" if shares else "not_shares"], hint)


def check_runs(function, *args, name: str, hint=None, **kwargs):
    """Calling ``function(*args, **kwargs)`` raises nothing; returns what it returned.

    For a call where a typical mistake ends in an exception (say, differentiating a tensor that is
    not in the graph): the error is reported with the check's name and hint instead of a bare
    traceback.
    """
    __tracebackhide__ = True
    try:
        return function(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as error:
        raised = error_summary(error)
    # outside the except block, so the student's traceback is not chained to the check's own
    words = _words()
    fail(name, words["raised"], words["no_exception"], raised, hint)


def fresh_generator() -> torch.Generator:
    """A generator seeded anew on every call: a visible check draws other inputs each run, so
    that no hard-coded answer passes it."""
    generator = torch.Generator()
    generator.seed()
    return generator


class ShortcutUsed(RuntimeError):
    """An answer called a function that does the exercise's work, switched off inside its check."""


@dataclasses.dataclass(frozen=True)
class JudgedCall:
    """An exercise the course's judge decides from data (graders/judge/calls.py): ``grade_cell``'s
    points need the notebook's ``function`` (a function, a class or any value it defines) to give,
    on the judge's inputs (``inputs`` draws a list of argument tuples from a generator), what the
    reference in ``answer_cell`` (a grade id, or several run in order) gives, within ``tolerance``
    (``torch.testing.assert_close``'s).

    What it gives is what it returns, or, with an ``outcome``, what ``outcome(answer, *args)``
    returns: a module-level function of a check module that runs the answer on plain inputs (builds
    the model, the loader, the optimizer from them, calls the answer) and returns plain data about
    what happened (the weights after the steps, the mode, the logits). It runs in the student's
    kernel on the student's answer and in the judge on the reference's. ``accept``, when given,
    replaces equality with the reference by the properties an answer free in its form must
    have (``want`` is the reference's outcome, ``args`` the inputs): ``accept(got, want, args)``. With
    no answer cell (``()``), ``function`` names a value the notebook makes (a trained model) and
    ``accept`` judges its outcome with ``want`` None."""

    grade_cell: str
    function: str
    answer_cell: str | tuple[str, ...]
    inputs: object
    tolerance: dict = dataclasses.field(default_factory=dict)
    outcome: object = None
    accept: object = None


def plain_number(value):
    """A real number from a number or a one-element tensor; ``None`` from anything else."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return value if isinstance(value, numbers.Real) and not isinstance(value, bool) else None


def matches(got, want, tolerance: dict) -> bool:
    """Whether a returned value is the reference's: tensors by ``assert_close`` (dtype and device
    included), numbers by value in any numeric form, sequences and dicts item by item, anything
    else by equality, of the same type. The judge's comparison of what a kernel sent with what the
    reference gave (graders/judge/calls.py)."""
    if isinstance(want, torch.Tensor):
        if type(got) is not torch.Tensor:
            return False
        try:
            torch.testing.assert_close(got, want, **tolerance)
        except AssertionError:
            return False
        return True
    if type(want) in (int, float):
        number = plain_number(got)
        return number is not None and math.isclose(number, want, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(want, tuple | list):
        return isinstance(got, tuple | list) and len(got) == len(want) and all(
            matches(g, w, tolerance) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict):
        return isinstance(got, dict) and set(got) == set(want) and all(
            matches(got[key], want[key], tolerance) for key in want)
    return type(got) is type(want) and got == want


def both(es: str, en: str, *, more: str | None = None) -> dict:
    """A text in the two editions' languages, as ``say`` and ``fail`` take it; ``more`` names the
    exercise whose second hint the student can ask for."""
    return {"es": es, "en": en, **({"more": more} if more else {})}


SHORTCUT = both(
    "{name} no está disponible en este ejercicio: hace justo lo que se te pide escribir",
    "{name} is not available in this exercise: it does exactly what you are asked to write",
)


def _course_namespaces() -> list[dict]:
    return [vars(module) for name, module in list(sys.modules.items())
            if module is not None and (name == "course" or name.startswith("course."))]


def _student_namespaces(answers) -> list[dict]:
    """The notebook's namespace, and the globals of every answer given (a function, a class, an
    object or a module the student wrote, wherever it was defined)."""
    namespaces = [vars(sys.modules["__main__"])] if "__main__" in sys.modules else []
    for answer in answers:
        if isinstance(answer, dict):
            namespaces.append(answer)
        elif isinstance(answer, types.ModuleType):
            namespaces.append(vars(answer))
        else:
            function = getattr(answer, "__func__", answer)
            if not hasattr(function, "__globals__"):
                function = getattr(type(answer), "forward", None) or getattr(answer, "__init__", None)
            if hasattr(function, "__globals__"):
                namespaces.append(function.__globals__)
    unique = {id(namespace): namespace for namespace in namespaces}
    return list(unique.values())


@contextlib.contextmanager
def stand_ins(targets, stand_in, *answers):
    """Inside the block, each ``(owner, name)`` of ``targets`` is replaced by ``stand_in(original,
    label)``, under any name a student could have given it, and put back afterwards.

    The same object bound under another name is replaced too, wherever a student could have put it:
    in the notebook's namespace, in the globals of each of ``answers`` (the functions, objects or
    modules under test) and in the course's modules. ``label`` is ``"owner.name"`` for the original
    and the alias's own name for an alias, so that a message can say the name the student wrote.
    """
    originals = [(owner, attribute, vars(owner).get(attribute, getattr(owner, attribute)))
                 if isinstance(owner, type) else (owner, attribute, getattr(owner, attribute))
                 for owner, attribute in targets]
    patched = {(id(vars(owner)), attribute) for owner, attribute, _ in originals}
    aliases = [(namespace, key, value, stand_in(value, key))
               for namespace in [*_course_namespaces(), *_student_namespaces(answers)]
               for key, value in list(namespace.items())
               if any(value is original for _, _, original in originals)
               and (id(namespace), key) not in patched]
    with contextlib.ExitStack() as stack:
        for owner, attribute, original in originals:
            label = f"{getattr(owner, '__name__', owner)}.{attribute}"
            stack.enter_context(mock.patch.object(owner, attribute, stand_in(original, label)))
        for namespace, key, _, replacement in aliases:
            namespace[key] = replacement
        try:
            yield
        finally:
            for namespace, key, value, _ in reversed(aliases):
                namespace[key] = value


def shortcuts_off(targets, *answers, message=SHORTCUT):
    """Inside the block, calling any ``(owner, name)`` of ``targets`` raises :class:`ShortcutUsed`,
    under any name (see :func:`stand_ins`).

    ``message`` (``both(es, en)``; ``{name}`` becomes the function's name) says why.
    """
    def refusal(original, label):
        def refused(*args, **kwargs):
            raise ShortcutUsed(say(message).replace("{name}", label))
        return refused

    return stand_ins(targets, refusal, *answers)


def run_answer(answer, *args, name: str, hint=None, shortcuts=(), message=SHORTCUT, **kwargs):
    """``answer(*args, **kwargs)`` with ``shortcuts`` switched off (see :func:`shortcuts_off`);
    an exception is reported as a failure of the check ``name``. Returns what the answer returned."""
    __tracebackhide__ = True
    with shortcuts_off(shortcuts, answer, message=message):
        return check_runs(answer, *args, name=name, hint=hint, **kwargs)


def _rng_devices() -> list[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []


def keeps_random_state(check):
    """Decorates a check: whatever it and the answer it runs draw, torch's global random state
    afterwards is the student's, as it was before (CPU and every CUDA device in use)."""
    @functools.wraps(check)
    def kept(*args, **kwargs):
        __tracebackhide__ = True
        with torch.random.fork_rng(devices=_rng_devices()):
            return check(*args, **kwargs)

    kept.keeps_random_state = True
    return kept


@contextlib.contextmanager
def seeded(seed: int):
    """Inside, torch's global random state starts from ``seed``; afterwards it is the student's
    again, as it was (CPU and every CUDA device in use), so that a check never reseeds the notebook."""
    with torch.random.fork_rng(devices=_rng_devices()):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def one_thread():
    """Inside, torch computes on one CPU thread; afterwards the student's count is back. Tiny networks
    run fastest so on a busy machine, and two runs compared bit for bit round alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator of its own, seeded: inputs drawn from it leave the global state alone."""
    return torch.Generator().manual_seed(seed)


def check_unchanged(before, after, *, name: str, hint=None) -> None:
    """An input the answer was given comes back as it was (``before`` is a clone taken first)."""
    __tracebackhide__ = True
    check_true(torch.equal(before, after), name=name, expected=INPUT_KEPT, got=INPUT_CHANGED, hint=hint)


INPUT_KEPT = both("la entrada sin cambios", "the input left unchanged")
INPUT_CHANGED = both("la entrada modificada", "the input modified")


def modes_seen(layers) -> tuple[list, list]:
    """Forward hooks noting, for each pass through ``layers`` (name → module), the ``training`` flag
    of the module that ran: a copy of the model runs them too. Returns (the notes, the handles)."""
    seen = []

    def note(name):
        return lambda module, inputs, output: seen.append((name, module.training))
    return seen, [layer.register_forward_hook(note(name)) for name, layer in layers.items()]


@dataclasses.dataclass
class StepRecord:
    """One step of a :class:`SpySGD`: the gradients it used, the parameters before and after."""

    grads: list
    before: list
    after: list | None = None


def _snapshot(params, what: str) -> list:
    return [None if getattr(p, what) is None else getattr(p, what).detach().clone() for p in params]


class SpySGD(torch.optim.SGD):
    """Plain SGD that keeps a :class:`StepRecord` of each step in ``steps``, and first tells
    ``on_step`` (a function of that record) that a step is being taken."""

    def __init__(self, params, lr: float = 0.1, on_step=None):
        super().__init__(params, lr=lr)
        self.steps = []
        self.on_step = on_step

    def step(self, closure=None):
        params = [p for group in self.param_groups for p in group["params"]]
        record = StepRecord(grads=_snapshot(params, "grad"), before=_snapshot(params, "data"))
        if self.on_step is not None:
            self.on_step(record)
        result = super().step(closure)
        record.after = _snapshot(params, "data")
        self.steps.append(record)
        return result

