"""Plain data from a student's kernel: what the kernel runs to encode values (:data:`PROBE`), and
the strict decoder the judge runs on what comes back (:func:`decode`).

The kernel is hostile: its encoder can be rewritten and its answer forged. That only chooses the
data, as answering does; the decoder accepts JSON of one shape and nothing else, builds no object
but numbers, strings, ``None``, tuples, lists, dicts, ``torch.dtype`` and plain tensors, and never
unpickles. Any other value is sent as ``{"refused": <its type>}`` and decoded as :class:`Refused`,
so the judge can say what it was given.
"""

import ast
import json
import math
from dataclasses import dataclass

import torch

MAX_BYTES = 4 * 1024**2  # more is no answer: a notebook's values, not its data set
MAX_DEPTH = 32
# The kernel's side: exact types only (a subclass may answer comparisons itself), tagged so that
# JSON keeps tuples, floats (NaN, infinities) and dict keys of any plain type.
ENCODER = r'''
def __course_judge_encode__(value, depth=0):
    import torch
    encode = __course_judge_encode__
    if depth > 32:
        return {"refused": "values nested deeper than 32"}
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return {"float": repr(value)}
    if kind in (tuple, list, torch.Size):
        return {"list" if kind is list else "tuple": [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(key, depth + 1), encode(item, depth + 1)] for key, item in value.items()]}
    if kind is torch.dtype:
        return {"dtype": str(value).removeprefix("torch.")}
    if kind is torch.device:
        return {"device": str(value)}
    if kind.__module__ == "numpy" and getattr(value, "shape", None) == ():  # a NumPy scalar
        return encode(value.item(), depth + 1)
    if kind is torch.Tensor:
        plain = value.detach().cpu()
        return {"tensor": {"dtype": str(plain.dtype).removeprefix("torch."), "shape": list(plain.shape),
                           "values": [repr(item) for item in plain.flatten().tolist()]}}
    return {"refused": f"{kind.__module__}.{kind.__qualname__}"}
'''
# The kernel's side of the inputs the judge chose: the tags ENCODER writes, read back.
DECODER = r'''
def __course_judge_decode__(value):
    import torch
    decode = __course_judge_decode__
    if not isinstance(value, dict):
        return value
    ((tag, body),) = value.items()
    if tag == "float":
        return float(body)
    if tag in ("tuple", "list"):
        items = [decode(item) for item in body]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {decode(key): decode(item) for key, item in body}
    if tag == "dtype":
        return getattr(torch, body)
    if tag == "device":
        return torch.device(body)
    if tag == "tensor":
        dtype = getattr(torch, body["dtype"])
        numbers = [float(item) if dtype.is_floating_point else int(item) if item not in ("True", "False")
                   else item == "True" for item in body["values"]]
        return torch.tensor(numbers, dtype=dtype).reshape(body["shape"])
    raise ValueError(f"unknown tag {tag!r}")
'''
RESULT = "__course_judge__"
_HERE = {}
exec(ENCODER, _HERE)
encode = _HERE["__course_judge_encode__"]  # the judge encodes its inputs as the kernel encodes its values


def probe(names: list[str], calls: list[dict], seconds: float = 5) -> str:
    """The code the kernel runs: ``RESULT`` holds the JSON of ``{"values": {name: value}}`` for each
    of ``names`` the notebook defines, and ``"calls"``: for each call (``cell``, ``function``,
    ``args`` as :func:`encode` wrote them, and ``outcome``, ``"module:function"`` or ``None``), what
    the notebook's function returned on each input (or its outcome: ``outcome(function, *args)``),
    or what it raised, each call stopped after ``seconds``; or ``{"error": why}``."""
    return ENCODER + DECODER + f'''
def __course_judge_call__(function, args, outcome=None):
    import importlib
    import signal

    # The clock waits while a module is being imported, twice at most: a process's first optimizer
    # imports torch._dynamo, seconds on a busy machine, and a first import is not the answer's.
    grace = [2]

    def out_of_time(signum, frame):
        while frame is not None and not frame.f_code.co_filename.startswith("<frozen importlib"):
            frame = frame.f_back
        if frame is not None and grace[0]:
            grace[0] -= 1
            signal.setitimer(signal.ITIMER_REAL, {seconds})
            return
        raise TimeoutError("the judge's time for one call ran out")

    try:
        answer, args = globals()[function], list(map(__course_judge_decode__, args))
        if outcome:
            module, name = outcome.split(":")
            answer, args = getattr(importlib.import_module(module), name), [answer, *args]
    except BaseException as error:
        return {{"refused": f"raised {{type(error).__name__}}"}}
    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, {seconds})
    try:
        return __course_judge_encode__(answer(*args))
    except BaseException as error:
        return {{"refused": f"raised {{type(error).__name__}}"}}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
try:
    {RESULT} = __import__("json").dumps({{
        "values": {{name: __course_judge_encode__(globals()[name])
                   for name in {names!r} if name in globals()}},
        "calls": {{call["cell"]: [__course_judge_call__(call["function"], args, call.get("outcome"))
                                for args in call["args"]]
                  for call in __import__("json").loads({json.dumps(calls)!r})}}}})
except BaseException as error:
    {RESULT} = __import__("json").dumps({{"error": f"{{type(error).__name__}}: {{error}}"[:300]}})
'''


@dataclass(frozen=True)
class Refused:
    """A value the kernel held that is not plain data; ``kind`` is its type's name."""

    kind: str


class Malformed(ValueError):
    """What came back is not what :data:`ENCODER` writes: nothing of it is trusted."""


def reply_text(user_expression: dict) -> str:
    """The JSON text of the kernel's answer to ``RESULT``, from its ``user_expressions`` entry
    (IPython shows a string as its repr)."""
    if not isinstance(user_expression, dict) or user_expression.get("status") != "ok":
        raise Malformed(f"the kernel did not evaluate the probe: {str(user_expression)[:200]}")
    shown = user_expression.get("data", {}).get("text/plain", "")
    if not isinstance(shown, str) or len(shown) > 2 * MAX_BYTES:
        raise Malformed("the kernel's answer is not a string of at most 4 MiB")
    try:
        text = ast.literal_eval(shown)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError) as error:
        raise Malformed(f"the kernel's answer is not a string literal ({type(error).__name__})") from None
    if not isinstance(text, str):
        raise Malformed("the kernel's answer is not a string")
    return text


def decode_reply(text: str) -> tuple[dict, dict]:
    """``({name: value}, {grade cell: [result, ...]})`` from the JSON :func:`probe` makes;
    :class:`Malformed` for anything else, and for the kernel's own report of an error."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise Malformed(f"the kernel's answer is not JSON ({type(error).__name__})") from None
    if not isinstance(data, dict) or set(data) not in ({"values", "calls"}, {"error"}):
        raise Malformed("the kernel's answer is not {'values': ..., 'calls': ...} or {'error': ...}")
    if "error" in data:
        raise Malformed(f"the probe failed in the kernel: {str(data['error'])[:300]}")
    values, calls = data["values"], data["calls"]
    if not isinstance(values, dict) or not isinstance(calls, dict) or \
            not all(isinstance(results, list) for results in calls.values()):
        raise Malformed("the kernel's values and calls are not objects of the probe's shape")
    return ({str(name): decode(value) for name, value in values.items()},
            {str(cell): [decode(result) for result in results] for cell, results in calls.items()})


def decode(value, depth: int = 0):
    """The value :data:`ENCODER` encoded, built strictly (:class:`Malformed` otherwise)."""
    if depth > MAX_DEPTH:
        raise Malformed(f"values nested deeper than {MAX_DEPTH}")
    if value is None or type(value) in (bool, int, str):
        return value
    if not (isinstance(value, dict) and len(value) == 1):
        raise Malformed(f"not an encoded value: {str(value)[:80]}")
    ((tag, body),) = value.items()
    if tag in DECODERS:
        return DECODERS[tag](body, depth)
    raise Malformed(f"unknown tag {tag!r}")


def _float(body, depth):
    if not isinstance(body, str):
        raise Malformed("a float is sent as its repr")
    try:
        return float(body)
    except ValueError:
        raise Malformed(f"not a float: {body[:40]!r}") from None


def _items(body, depth):
    if not isinstance(body, list):
        raise Malformed("a sequence is sent as a list")
    return [decode(item, depth + 1) for item in body]


def _dict(body, depth):
    if not isinstance(body, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in body):
        raise Malformed("a dict is sent as a list of [key, value] pairs")
    decoded = {}
    for key, item in body:
        key = decode(key, depth + 1)
        try:
            hash(key)
        except TypeError:
            raise Malformed(f"a dict key of type {type(key).__name__}") from None
        decoded[key] = decode(item, depth + 1)
    return decoded


def _dtype(body, depth):
    dtype = getattr(torch, body, None) if isinstance(body, str) else None
    if not isinstance(dtype, torch.dtype):
        raise Malformed(f"not a dtype: {str(body)[:40]!r}")
    return dtype


def _device(body, depth):
    try:
        return torch.device(body)
    except (RuntimeError, TypeError):
        raise Malformed(f"not a device: {str(body)[:40]!r}") from None


def _tensor(body, depth):
    if not (isinstance(body, dict) and set(body) == {"dtype", "shape", "values"}):
        raise Malformed("a tensor is sent as its dtype, shape and values")
    dtype, shape, values = _dtype(body["dtype"], depth), body["shape"], body["values"]
    if not (isinstance(shape, list) and all(type(size) is int and size >= 0 for size in shape)):
        raise Malformed("a tensor's shape is a list of sizes")
    if not isinstance(values, list) or len(values) != math.prod(shape):
        raise Malformed("a tensor's values do not fill its shape")
    numbers = [_number(item) for item in values]
    return torch.tensor(numbers, dtype=dtype).reshape(shape)


def _number(text):
    if not isinstance(text, str):
        raise Malformed("a tensor's value is sent as its repr")
    if text in ("True", "False"):
        return text == "True"
    for number in (int, float, complex):
        try:
            return number(text)
        except ValueError:
            continue
    raise Malformed(f"not a number: {text[:40]!r}")


DECODERS = {"float": _float, "tuple": lambda body, depth: tuple(_items(body, depth)), "list": _items,
            "dict": _dict, "dtype": _dtype, "device": _device, "tensor": _tensor,
            "refused": lambda body, depth: Refused(str(body)[:120])}
