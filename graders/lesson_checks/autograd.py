"""Lesson 02 · Autograd: the visible checks of its exercises, and their hints.

Each check draws fresh random inputs and judges the answer by what the lesson states and a student
can verify by hand: derivatives worked out on paper, the snippet of an exercise run as written,
the rules a loop's result must obey, what ``gradcheck`` says, and, for the backward pass written by
hand, what autograd itself computes on the same network. No reference implementation lives here.
"""

import contextlib
import functools
import math
import numbers
from unittest import mock

import torch
from torch import nn

from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = ["CLEARED", "HINTS", "KEPT", "LEAF", "MORE_HINTS", "NOT_LEAF", "SHORTCUTS",
           "check_clipped_backward", "check_clipped_identity_backward", "check_clipped_identity_forward",
           "check_compound_grad", "check_compound_grads", "check_compound_value", "check_concepts",
           "check_finite_difference_grad", "check_finite_difference_grad_black_box",
           "check_freeze_all_but_last", "check_manual_backward_case", "check_manual_backward_edge_cases",
           "check_manual_backward_hidden", "check_manual_backward_output", "check_predicted_grad",
           "check_second_derivative", "check_sgd_step", "check_trainable_count",
           "check_value_engine_arithmetic", "check_value_engine_functions", "check_value_engine_shared",
           "check_value_engine_twice", "check_value_mlp_case", "check_value_mlp_gradients",
           "check_value_mlp_outputs", "check_value_program", "check_weighted_backward",
           "check_weighted_backward_one_entry", "grade_concepts", "gradient_after_snippet", "network_case",
           "program_code", "random_program", "run_compound", "shared_programs", "show_questions"]

HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# Library functions that would answer an exercise in one call, switched off while its answer runs,
# by the check that runs it: autograd itself where the gradient is to be worked out without it, the
# library's Hessians where the two derivatives are.
_AUTOGRAD = [(torch.Tensor, "backward"), (torch.autograd, "backward"), (torch.autograd, "grad")]
# Every way into autograd, for the backward pass written by hand: the engine's entry, where every
# reverse-mode path ends (torch.autograd.functional and torch.func's transforms included), and
# forward mode's dual numbers; torch.func's transforms by name, so that a message names the one called.
_TRANSFORMS = ("grad", "grad_and_value", "vjp", "jacrev", "jvp", "jacfwd")
_ALL_OF_AUTOGRAD = [*_AUTOGRAD, (torch.autograd, "_engine_run_backward"),
                    (torch.autograd.forward_ad, "make_dual"), *((torch.func, name) for name in _TRANSFORMS)]
SHORTCUTS = {
    "check_finite_difference_grad": _AUTOGRAD,
    "check_finite_difference_grad_black_box": _AUTOGRAD,
    "check_predicted_grad": _AUTOGRAD,
    # the Hessians, and torch.func's transforms, which differentiate twice with no create_graph
    "check_second_derivative": [(torch.autograd.functional, "hessian"), (torch.func, "hessian"),
                                *((torch.func, name) for name in _TRANSFORMS)],
    "check_manual_backward_output": _ALL_OF_AUTOGRAD,
    "check_manual_backward_hidden": _ALL_OF_AUTOGRAD,
    "check_manual_backward_edge_cases": _ALL_OF_AUTOGRAD,
    "check_manual_backward_case": _ALL_OF_AUTOGRAD,
    # the engine of one's own: the class and the MLP on it run with every way into autograd off
    **dict.fromkeys(["check_value_program", "check_value_engine_arithmetic", "check_value_engine_functions",
                     "check_value_engine_shared", "check_value_engine_twice", "check_value_mlp_case",
                     "check_value_mlp_outputs", "check_value_mlp_gradients"], _ALL_OF_AUTOGRAD),
}


def _run(check: str, answer, *args, name: str, hint):
    """``answer(*args)`` with the shortcuts of ``check`` off; an exception is reported as a failure."""
    __tracebackhide__ = True
    return checks.run_answer(answer, *args, name=name, hint=hint, shortcuts=SHORTCUTS[check])


def _kept(before, x, name: str, hint) -> None:
    """The caller's ``x`` comes back with its values, and still asks for no gradient."""
    __tracebackhide__ = True
    checks.check_unchanged(before, x.detach(), name=name, hint=hint)
    checks.check_equal(x.requires_grad, False, name=f"{name}: x.requires_grad", hint=hint)


def _black_box(coefficient: float):
    """``Σ coefficient · sin(tᵢ)`` through Python floats: autograd sees no graph inside."""
    def sines(t):
        return torch.tensor(sum(coefficient * math.sin(v) for v in t.flatten().tolist()),
                            dtype=torch.float64)
    return sines


@checks.keeps_random_state
def check_finite_difference_grad(finite_difference_grad) -> None:
    """On Σ cᵢ·tᵢ² the central difference is 2·cᵢ·xᵢ (exact for a quadratic), same shape and dtype."""
    hint = HINTS["finite_difference_grad"]
    generator = checks.fresh_generator()
    shape = tuple(torch.randint(2, 4, (2,), generator=generator).tolist())
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    weights = torch.rand(shape, generator=generator, dtype=torch.float64) + 0.5
    before = x.clone()
    name = f"finite_difference_grad(Σ c·t², x {shape})"
    got = _run("check_finite_difference_grad", finite_difference_grad, lambda t: (weights * t ** 2).sum(), x,
               name=name, hint=hint)
    checks.check_close(got, 2 * weights * before, name=name, hint=hint, rtol=1e-5, atol=1e-6)
    _kept(before, x, f"x after {name}", hint)


@checks.keeps_random_state
def check_finite_difference_grad_black_box(finite_difference_grad) -> None:
    """On a function autograd cannot see into, Σ c·sin(tᵢ), the result is c·cos(x)."""
    hint = HINTS["finite_difference_grad"]
    generator = checks.fresh_generator()
    coefficient = (torch.rand((), generator=generator) * 2 + 0.5).item()
    x = torch.randn(int(torch.randint(2, 6, (), generator=generator)), generator=generator,
                    dtype=torch.float64)
    name = f"finite_difference_grad({coefficient:.3f}·Σ sin(t) through Python floats, x {tuple(x.shape)})"
    got = _run("check_finite_difference_grad_black_box", finite_difference_grad, _black_box(coefficient), x,
               name=name, hint=hint)
    checks.check_close(got, coefficient * torch.cos(x), name=name, hint=hint, rtol=1e-5, atol=1e-6)


def gradient_after_snippet(a: float, b: float, x0: float) -> float:
    """``x.grad`` after running the exercise's snippet, line by line as the task shows it."""
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    y = a * x ** 2
    y.backward(retain_graph=True)
    y.backward()
    z = b * x
    z.backward()
    return x.grad.item()


@checks.keeps_random_state
def check_predicted_grad(predicted_grad) -> None:
    """The formula gives what the snippet leaves in ``x.grad``, for random a, b and x0."""
    hint = HINTS["predicted_grad"]
    generator = checks.fresh_generator()
    for _ in range(3):
        a, b, x0 = (torch.rand(3, generator=generator, dtype=torch.float64) * 8 - 4).tolist()
        name = f"predicted_grad({a:.3f}, {b:.3f}, {x0:.3f})"
        got = _run("check_predicted_grad", predicted_grad, a, b, x0, name=name, hint=hint)
        checks.check_close(got, gradient_after_snippet(a, b, x0), name=name, hint=hint)


@contextlib.contextmanager
def _engine_spy():
    """Records every entry into autograd's engine, where ``backward()``, ``torch.autograd.backward``
    and ``torch.autograd.grad`` all end (``torch.autograd._engine_run_backward``): for each entry, the
    tensors the walk started from and whether it accumulated into ``.grad``. Yields the list."""
    entries = []
    original = torch.autograd._engine_run_backward

    def entry(roots, *args, **kwargs):
        entries.append({"roots": tuple(roots), "accumulate": kwargs.get("accumulate_grad")})
        return original(roots, *args, **kwargs)

    with mock.patch.object(torch.autograd, "_engine_run_backward", entry):
        yield entries


def _weighted_case(generator) -> dict:
    """Three outputs of one graph whose gradients are known by hand, and their weights.

    Leaves ``a`` (holding a gradient already) and ``b`` (``.grad`` None), a constant ``c`` and an
    intermediate ``h = a·b`` shared by two outputs. Outputs and weights: ``(h·c).sum()`` with a
    number w₁, ``a²`` with a tensor w₂, ``h + b`` with a number w₃ (every component weighted alike).
    Then ``a.grad`` gains w₁·b·c + 2a·w₂ + w₃·b and ``b.grad`` becomes w₁·a·c + w₃·(a + 1).
    """
    size = int(torch.randint(2, 6, (), generator=generator))
    a, b, c, before, w2 = (torch.randn(size, generator=generator, dtype=torch.float64) for _ in range(5))
    w1, w3 = (round(v, 3) for v in (torch.rand(2, generator=generator) * 4 - 2).tolist())
    a.requires_grad_(True)
    b.requires_grad_(True)
    a.grad = before.clone()
    h = a * b
    a0, b0 = a.detach().clone(), b.detach().clone()
    return {"leaves": (a, b, c), "outputs": [(h * c).sum(), a ** 2, h + b], "weights": [w1, w2, w3],
            "expected": (before + w1 * b0 * c + 2 * a0 * w2 + w3 * b0, w1 * a0 * c + w3 * (a0 + 1)),
            "name": f"weighted_backward([(a·b·c).sum(), a², a·b + b], [{w1}, w2 ({size},), {w3}])"}


@checks.keeps_random_state
def check_weighted_backward(weighted_backward) -> None:
    """The leaves' ``.grad`` gain the weighted sum of the gradients, added to what they held."""
    hint = HINTS["weighted_backward"]
    case = _weighted_case(checks.fresh_generator())
    a, b, c = case["leaves"]
    checks.check_runs(weighted_backward, case["outputs"], case["weights"], name=case["name"], hint=hint)
    expected_a, expected_b = case["expected"]
    checks.check_close(a.grad, expected_a, name=f"a.grad after {case['name']} (a.grad held a gradient)",
                       hint=hint)
    checks.check_close(b.grad, expected_b, name=f"b.grad after {case['name']} (b.grad was None)",
                       hint=hint)
    checks.check_true(c.grad is None, name=f"c.grad after {case['name']} (c is a constant)",
                      expected="None", got=checks.describe(c.grad), hint=hint)


_ONE_ENTRY = checks.both("una sola entrada al motor", "a single entry into the engine")
_FROM_OUTPUTS = checks.both("la pasada hacia atrás parte de las salidas mismas, todas ellas",
                            "the backward pass starts from the outputs themselves, all of them")
_ACCUMULATES = checks.both("una entrada que acumula en .grad", "an entry that accumulates into .grad")
_RETURNS = checks.both("una entrada que devuelve los gradientes sin tocar .grad",
                       "an entry that returns the gradients and leaves .grad alone")


def _check_entered_once(entries, outputs, name: str, hint) -> None:
    """What the spy saw: one entry, started from exactly ``outputs``, accumulating into ``.grad``."""
    __tracebackhide__ = True
    checks.check_true(len(entries) == 1, name=f"{name}: entries into the engine", expected=_ONE_ENTRY,
                      got=checks.both(f"{len(entries)} entradas", f"{len(entries)} entries"), hint=hint)
    roots = entries[0]["roots"]
    wanted = {id(output) for output in outputs}
    found = sum(id(root) in wanted for root in roots)
    checks.check_true(len(roots) == len(outputs) and found == len(outputs) == len(set(map(id, roots))),
                      name=f"{name}: where the engine started", expected=_FROM_OUTPUTS,
                      got=checks.both(f"{len(roots)} tensores, {found} de ellos salidas",
                                      f"{len(roots)} tensors, {found} of them outputs"), hint=hint)
    checks.check_true(entries[0]["accumulate"] is True, name=f"{name}: the engine's mode",
                      expected=_ACCUMULATES, got=_RETURNS, hint=hint)


@checks.keeps_random_state
def check_weighted_backward_one_entry(weighted_backward, outputs=None, weights=None, name: str = "") -> None:
    """A spy on the engine's entry: entered once, from the outputs themselves, accumulating. The
    ``outputs`` and ``weights`` given, or else a random case of three outputs of one graph."""
    hint = HINTS["weighted_backward"]
    if outputs is None:
        case = _weighted_case(checks.fresh_generator())
        outputs, weights, name = case["outputs"], case["weights"], case["name"]
    with _engine_spy() as entries:
        checks.check_runs(weighted_backward, outputs, weights, name=name, hint=hint)
    _check_entered_once(entries, outputs, name, hint)


@checks.keeps_random_state
def check_second_derivative(second_derivative) -> None:
    """(t³)'' = 6t at random points of one dimension and sin'' = −sin at random points of two (the
    task says any shape); the caller's x is left as it was."""
    hint = HINTS["second_derivative"]
    generator = checks.fresh_generator()
    size = int(torch.randint(2, 7, (), generator=generator))
    line = torch.randn(size, generator=generator, dtype=torch.float64)
    grid = torch.randn(2, size, generator=generator, dtype=torch.float64)
    for label, function, x, expected in [("t**3", lambda t: t ** 3, line, 6 * line),
                                         ("torch.sin", torch.sin, grid, -torch.sin(grid))]:
        before = x.clone()
        name = f"second_derivative({label}, x {tuple(x.shape)})"
        got = _run("check_second_derivative", second_derivative, function, x, name=name, hint=hint)
        checks.check_close(got, expected, name=name, hint=hint)
        _kept(before, x, f"x after {name}", hint)


LEAF = checks.both("el mismo tensor, una hoja con requires_grad=True",
                   "the same tensor, a leaf with requires_grad=True")
NOT_LEAF = checks.both("otro tensor, o uno que ya no es hoja o no pide gradiente",
                       "another tensor, or one that is no longer a leaf or no longer requires grad")
CLEARED = checks.both("el gradiente borrado (None o ceros)", "the gradient cleared (None or zeros)")
KEPT = checks.both("el gradiente antiguo todavía ahí", "the old gradient still there")


@checks.keeps_random_state
def check_sgd_step(sgd_step) -> None:
    """Each parameter with a gradient moves by −lr·grad in place, then its gradient is cleared.

    The gradients are known beforehand: the loss is Σ ⟨wᵢ, pᵢ⟩, whose gradient for pᵢ is wᵢ. The
    last parameter takes no part in it, so its ``.grad`` stays None and it must not move.
    """
    hint = HINTS["sgd_step"]
    generator = checks.fresh_generator()
    shapes = [(3, 2), (4,), ()]
    params = [torch.randn(shape, generator=generator, dtype=torch.float64).requires_grad_(True)
              for shape in shapes]
    listed = list(params)
    start = [param.detach().clone() for param in params]
    gradients = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes[:2]]
    sum((param * gradient).sum() for param, gradient in zip(params[:2], gradients, strict=True)).backward()
    step_size = (torch.rand((), generator=generator) * 0.5 + 0.01).item()
    name = f"sgd_step(params, {step_size:.3f})"
    checks.check_runs(sgd_step, listed, step_size, name=name, hint=hint)
    for index, param in enumerate(params):
        label = f"params[{index}] after {name}"
        checks.check_true(listed[index] is param and param.is_leaf and param.requires_grad, name=label,
                          expected=LEAF, got=NOT_LEAF, hint=hint)
        moved = start[index] - step_size * gradients[index] if index < 2 else start[index]
        checks.check_close(param.detach(), moved, name=label, hint=hint)
        checks.check_true(param.grad is None or not param.grad.any().item(), name=f"{label}: .grad",
                          expected=CLEARED, got=KEPT, hint=hint)


def _layers(widths: list[int], activation_last: bool) -> list[nn.Module]:
    layers = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(fan_in, fan_out), nn.Tanh()]
    return layers if activation_last else layers[:-1]


@checks.keeps_random_state
def check_freeze_all_but_last(freeze_all_but_last) -> None:
    """Only the last Linear requires gradients, even when everything was frozen before or an
    activation ends the model; after a backward pass the frozen layers have no ``.grad``."""
    hint = HINTS["freeze_all_but_last"]
    generator = checks.fresh_generator()
    for frozen_before, activation_last in [(False, True), (True, False)]:
        widths = torch.randint(2, 7, (4,), generator=generator).tolist()
        model = nn.Sequential(*_layers(widths, activation_last))
        model.requires_grad_(not frozen_before)
        described = f"Sequential of {len(model)} layers, all frozen" if frozen_before else \
            f"Sequential of {len(model)} layers, ending in Tanh"
        name = f"freeze_all_but_last({described})"
        checks.check_runs(freeze_all_but_last, model, name=name, hint=hint)
        flags = [param.requires_grad for param in model.parameters()]
        checks.check_equal(flags, [False] * (len(flags) - 2) + [True, True],
                           name=f"requires_grad of every parameter after {name}", hint=hint)
        model(torch.randn(3, widths[0], generator=generator)).sum().backward()
        checks.check_true(model[0].weight.grad is None, name=f"model[0].weight.grad after {name}",
                          expected=checks.both("None: la capa está congelada", "None: the layer is frozen"),
                          got=checks.both("un gradiente calculado", "a gradient computed"), hint=hint)


@checks.keeps_random_state
def check_trainable_count(freeze_all_but_last) -> None:
    """The count returned is the last Linear's weights and biases: fan_in·fan_out + fan_out, an int."""
    hint = HINTS["freeze_all_but_last"]
    generator = checks.fresh_generator()
    widths = torch.randint(2, 9, (3,), generator=generator).tolist()
    model = nn.Sequential(*_layers(widths, activation_last=True))
    name = f"freeze_all_but_last(Sequential with widths {widths}, ending in Tanh)"
    got = checks.check_runs(freeze_all_but_last, model, name=name, hint=hint)
    checks.check_equal(got, widths[-2] * widths[-1] + widths[-1], name=name, hint=hint)


def run_compound(compound, x, rate, limit: float, name: str):
    """``compound(x, rate, limit)``, checked to be a ``(value, steps)`` pair."""
    __tracebackhide__ = True
    hint = HINTS["compound"]
    result = checks.check_runs(compound, x, rate, limit, name=name, hint=hint)
    checks.check_type(result, tuple, name=name, hint=hint)
    checks.check_equal(len(result), 2, name=f"len({name})", hint=hint)
    return result


def _obeys_the_loop(x, rate, limit, value, steps, name: str) -> None:
    """``value`` is x·(1 + rate)^steps, reached the limit, and the step before had not."""
    hint = HINTS["compound"]
    checks.check_type(steps, int, name=f"{name}[1]", hint=hint)
    checks.check_type(value, torch.Tensor, name=f"{name}[0]", hint=hint)
    x, rate = x.detach(), rate.detach()
    checks.check_close(value.detach(), x * (1 + rate) ** steps, name=f"{name}[0], {steps} steps",
                       hint=hint)
    checks.check_true(bool(value >= limit), name=f"{name}[0] ≥ limit",
                      expected=checks.both(f"un valor ≥ {limit:.3f}", f"a value ≥ {limit:.3f}"),
                      got=checks.describe(value), hint=hint)
    previous = x * (1 + rate) ** (steps - 1)
    checks.check_true(steps == 0 or bool(previous < limit), name=f"{name}[1]",
                      expected=checks.both("parar la primera vez que se alcanza el límite",
                                           "to stop the first time the limit is reached"),
                      got=checks.both(f"{steps} vueltas; ya se alcanzaba con {steps - 1}",
                                      f"{steps} iterations; {steps - 1} already reached it"), hint=hint)


@checks.keeps_random_state
def check_compound_value(compound) -> None:
    """100 at 10% up to 150 takes 5 steps (161.051); random cases follow the loop's rules; 0 steps
    when x already reaches the limit."""
    hint = HINTS["compound"]
    x, rate = torch.tensor(100.0, dtype=torch.float64), torch.tensor(0.1, dtype=torch.float64)
    value, steps = run_compound(compound, x, rate, 150.0, "compound(100, 0.1, 150.0)")
    checks.check_equal(steps, 5, name="compound(100, 0.1, 150.0)[1]", hint=hint)
    checks.check_close(value, torch.tensor(161.051, dtype=torch.float64), name="compound(100, 0.1, 150.0)[0]",
                       hint=hint)
    generator = checks.fresh_generator()
    for factor in [(torch.rand((), generator=generator) * 40 + 2).item(), 0.5]:
        x = torch.rand((), generator=generator, dtype=torch.float64) * 9 + 1
        rate = torch.rand((), generator=generator, dtype=torch.float64) * 0.45 + 0.05
        limit = x.item() * factor
        name = f"compound({x.item():.3f}, {rate.item():.3f}, {limit:.3f})"
        value, steps = run_compound(compound, x, rate, limit, name)
        _obeys_the_loop(x, rate, limit, value, steps, name)


_IN_GRAPH = checks.both("un tensor con requires_grad=True", "a tensor with requires_grad=True")
_OUT_GRAPH = checks.both("algo desconectado del grafo", "something disconnected from the graph")


@checks.keeps_random_state
def check_compound_grad(compound, x0: float, rate0: float, limit: float) -> None:
    """After ``value.backward()``: ∂value/∂x = (1 + rate)^k and ∂value/∂rate = k·x·(1 + rate)^(k−1)."""
    hint = HINTS["compound"]
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    rate = torch.tensor(rate0, dtype=torch.float64, requires_grad=True)
    name = f"compound({x0:.3f}, {rate0:.3f}, {limit:.3f})"
    value, steps = run_compound(compound, x, rate, limit, name)
    _obeys_the_loop(x, rate, limit, value, steps, name)
    checks.check_true(value.requires_grad, name=f"{name}[0]", expected=_IN_GRAPH, got=_OUT_GRAPH, hint=hint)
    checks.check_runs(value.backward, name=f"{name}[0].backward()", hint=hint)
    growth = 1 + rate0
    checks.check_close(x.grad, torch.tensor(growth ** steps, dtype=torch.float64), name=f"{name}: x.grad",
                       hint=hint)
    checks.check_close(rate.grad, torch.tensor(steps * x0 * growth ** (steps - 1), dtype=torch.float64),
                       name=f"{name}: rate.grad", hint=hint)


@checks.keeps_random_state
def check_compound_grads(compound) -> None:
    """The gradients of the known case and of random ones."""
    check_compound_grad(compound, 100.0, 0.1, 150.0)
    generator = checks.fresh_generator()
    x0 = (torch.rand((), generator=generator, dtype=torch.float64) * 9 + 1).item()
    rate0 = (torch.rand((), generator=generator, dtype=torch.float64) * 0.45 + 0.05).item()
    check_compound_grad(compound, x0, rate0, x0 * (torch.rand((), generator=generator) * 40 + 2).item())


_CUSTOM = checks.both("un grad_fn de ClippedIdentity", "a ClippedIdentity grad_fn")


def _clipping_points(generator, shape, low: float, high: float) -> torch.Tensor:
    """Random points on both sides of [low, high], none within 0.01 of an edge (no derivative there)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64) * 3
    for edge in (low, high):
        x[(x - edge).abs() < 1e-2] = edge + 0.05
    return x


def _interval(generator) -> tuple[float, float]:
    low = (torch.rand((), generator=generator) * -2 - 0.2).item()
    return low, low + (torch.rand((), generator=generator) * 3 + 0.5).item()


def _regions(x, low, high) -> dict:
    return {"below": x < low, "inside": (x >= low) & (x <= high), "above": x > high}


@checks.keeps_random_state
def check_clipped_identity_forward(function) -> None:
    """Below the interval gives low, above gives high, inside leaves x; the graph has its node."""
    hint = HINTS["clipped_identity"]
    generator = checks.fresh_generator()
    low, high = _interval(generator)
    x = _clipping_points(generator, (4, 5), low, high).requires_grad_(True)
    name = f"ClippedIdentity.apply(x (4, 5), {low:.3f}, {high:.3f})"
    got = checks.check_runs(function.apply, x, low, high, name=name, hint=hint)
    checks.check_shape(got, (4, 5), name=name, hint=hint)
    expected = {"below": torch.full_like(x.detach(), low), "inside": x.detach(),
                "above": torch.full_like(x.detach(), high)}
    for region, mask in _regions(x.detach(), low, high).items():
        checks.check_close(got.detach()[mask], expected[region][mask], name=f"{name}, x {region}",
                           hint=hint)
    checks.check_true("ClippedIdentity" in type(got.grad_fn).__name__, name=name, expected=_CUSTOM,
                      got=repr(got.grad_fn), hint=hint)


_PASSES = checks.both("gradcheck devuelve True", "gradcheck returns True")
_FAILS = checks.both("gradcheck encontró un gradiente distinto del numérico",
                     "gradcheck found a gradient that differs from the numerical one")


@checks.keeps_random_state
def check_clipped_backward(function, x, low: float, high: float, upstream, label: str) -> None:
    """``x.grad`` is ``upstream`` inside the interval and 0 outside; ``gradcheck`` agrees."""
    hint = HINTS["clipped_identity"]
    leaf = x.detach().requires_grad_(True)
    output = checks.check_runs(function.apply, leaf, low, high, name=label, hint=hint)
    checks.check_runs(output.backward, upstream, name=f"{label}.backward(upstream)", hint=hint)
    checks.check_type(leaf.grad, torch.Tensor, name=f"x.grad after {label}", hint=hint)
    for region, mask in _regions(x.detach(), low, high).items():
        expected = upstream[mask] if region == "inside" else torch.zeros_like(upstream[mask])
        checks.check_close(leaf.grad[mask], expected, name=f"x.grad after {label}, x {region}", hint=hint)
    passed = checks.check_runs(torch.autograd.gradcheck, lambda t: function.apply(t, low, high),
                               (x.detach().requires_grad_(True),), raise_exception=False,
                               name=f"gradcheck({label})", hint=hint)
    checks.check_true(passed, name=f"gradcheck({label})", expected=_PASSES, got=_FAILS, hint=hint)


@checks.keeps_random_state
def check_clipped_identity_backward(function) -> None:
    """The true gradient of clipping, at random points on both sides of a random interval."""
    generator = checks.fresh_generator()
    low, high = _interval(generator)
    x = _clipping_points(generator, (6,), low, high)
    x[:2] = torch.tensor([low - 1.0, high + 1.0], dtype=torch.float64)  # one point clipped on each side
    upstream = torch.rand(6, generator=generator, dtype=torch.float64) + 0.5
    check_clipped_backward(function, x, low, high, upstream,
                           f"ClippedIdentity.apply(x (6,), {low:.3f}, {high:.3f})")


# The network of the backward pass written by hand: x (N, D) → Linear(w1, b1) → ReLU → Linear(w2, b2)
# → logits (N, C), and the mean softmax cross-entropy against targets (N,). Weights are laid out
# (out, in), as nn.Linear's.
PARAMETERS = ("w1", "b1", "w2", "b2")
_AUTOGRAD_OFF = checks.both(
    "{name} no está disponible en este ejercicio: autograd está apagado mientras corre tu función; "
    "calcula los gradientes a mano",
    "{name} is not available in this exercise: autograd is switched off while your function runs; "
    "work the gradients out by hand")


def _pre_activations(case: dict) -> torch.Tensor:
    return torch.nn.functional.linear(case["x"], case["w1"], case["b1"])


def _mixed(case: dict, dead: int) -> bool:
    """The live units' pre-activations hold both signs, and none sits on the ReLU's kink."""
    live = _pre_activations(case)[:, dead:]
    return bool((live < 0).any() and (live > 0).any() and (live.abs() > 1e-6).all())


def network_case(generator, sizes=None, *, dead: int = 0, scale: float = 1.0) -> dict:
    """A batch, its targets and the network's parameters, float64, none requiring gradients.

    ``sizes``: ``(batch, inputs, hidden, classes)``, else drawn from ``generator``. The live hidden
    units are negative on some examples and positive on others, so that the ReLU's mask matters; the
    first ``dead`` units are negative on every example, so that the ReLU passes them nothing back.
    ``scale`` multiplies the inputs (larger logits).
    """
    batch, inputs, hidden, classes = sizes or [int(torch.randint(low, high, (), generator=generator))
                                               for low, high in [(2, 9), (2, 7), (3, 9), (2, 6)]]
    for _ in range(1000):
        case = {"x": torch.randn(batch, inputs, generator=generator, dtype=torch.float64) * scale,
                "targets": torch.randint(classes, (batch,), generator=generator),
                "w1": torch.randn(hidden, inputs, generator=generator, dtype=torch.float64),
                "b1": torch.randn(hidden, generator=generator, dtype=torch.float64),
                "w2": torch.randn(classes, hidden, generator=generator, dtype=torch.float64),
                "b2": torch.randn(classes, generator=generator, dtype=torch.float64)}
        reach = (case["x"] @ case["w1"][:dead].T).abs().amax(dim=0) if dead else torch.zeros(0)
        case["b1"][:dead] = -reach - 0.5
        if _mixed(case, dead):
            return case
    raise RuntimeError(f"no network of sizes {sizes} with mixed hidden units in 1000 draws")


def autograd_gradients(case: dict) -> tuple:
    """∂(mean loss)/∂(w1, b1, w2, b2) as autograd computes them, on copies that require gradients."""
    leaves = [case[name].clone().requires_grad_(True) for name in PARAMETERS]
    with torch.enable_grad():
        hidden = torch.nn.functional.relu(torch.nn.functional.linear(case["x"], leaves[0], leaves[1]))
        logits = torch.nn.functional.linear(hidden, leaves[2], leaves[3])
        return torch.autograd.grad(torch.nn.functional.cross_entropy(logits, case["targets"]), leaves)


def _call(case: dict) -> str:
    shapes = ", ".join(f"{name} {tuple(case[name].shape)}" for name in ("x", "targets", *PARAMETERS))
    return f"manual_backward({shapes})"


def _by_hand(manual_backward, case: dict, name: str, hint):
    """``manual_backward`` on the case with autograd off: its inputs require no gradient, nothing is
    recorded (grad mode off, as in ``torch.no_grad``) and every way into autograd is refused;
    checked to be 4 values."""
    __tracebackhide__ = True
    arguments = [case["x"], case["targets"], *(case[parameter] for parameter in PARAMETERS)]
    with torch.set_grad_enabled(False):
        result = checks.run_answer(manual_backward, *arguments, name=name, hint=hint,
                                   shortcuts=_ALL_OF_AUTOGRAD, message=_AUTOGRAD_OFF)
    checks.check_type(result, (tuple, list), name=name, hint=hint)
    checks.check_equal(len(result), len(PARAMETERS), name=f"len({name})", hint=hint)
    return result


@checks.keeps_random_state
def check_manual_backward_case(manual_backward, case: dict, parameters=PARAMETERS, *, kept: bool = False,
                               label: str = "") -> None:
    """The gradients for ``parameters`` equal autograd's on ``case`` (float64, assert_close's
    tolerances); with ``kept``, the inputs come back unchanged. ``label`` describes the case."""
    __tracebackhide__ = True
    hint = HINTS["manual_backward"]
    expected = autograd_gradients(case)
    before = {key: value.clone() for key, value in case.items()}
    call, where = _call(case), f" ({label})" if label else ""
    got = _by_hand(manual_backward, case, call + where, hint)
    for index, parameter in enumerate(PARAMETERS):
        if parameter in parameters:
            checks.check_close(got[index], expected[index],
                               name=f"{call}[{index}], the gradient for {parameter}{where}", hint=hint)
    if kept:
        for key, value in before.items():
            checks.check_unchanged(value, case[key], name=f"{key} after {call}{where}", hint=hint)


@checks.keeps_random_state
def check_manual_backward_output(manual_backward) -> None:
    """The output layer's gradients (w2, b2), on a network of random sizes."""
    check_manual_backward_case(manual_backward, network_case(checks.fresh_generator()), ("w2", "b2"))


@checks.keeps_random_state
def check_manual_backward_hidden(manual_backward) -> None:
    """The hidden layer's gradients (w1, b1), through the ReLU's mask: its units are negative on some
    examples and positive on others."""
    check_manual_backward_case(manual_backward, network_case(checks.fresh_generator()), ("w1", "b1"),
                               label="hidden units both active and inactive")


@checks.keeps_random_state
def check_manual_backward_edge_cases(manual_backward) -> None:
    """Every gradient, with a batch of one example, and with two hidden units dead on every example;
    the inputs are left as they were."""
    generator = checks.fresh_generator()
    inputs, hidden, classes = (int(torch.randint(2, 7, (), generator=generator)) for _ in range(3))
    check_manual_backward_case(manual_backward, network_case(generator, (1, inputs, hidden + 1, classes)),
                               kept=True, label="a batch of one example")
    check_manual_backward_case(manual_backward, network_case(generator, dead=2), kept=True,
                               label="hidden units 0 and 1 dead on every example")


# ------------------------------------------------------------------ an autograd engine of your own
# A program is plain data: a list of instructions, each making a new value (a register, v0, v1, …)
# or calling backward() on one. ("leaf", x) makes Value(x); ("mul", i, j) is vi * vj; ("num_sub", i, c)
# is c - vi; ("pow", i, k) is vi ** k; ("tanh", i) is vi.tanh(); ("backward", i) calls vi.backward().
# The same program builds the student's values and torch's float64 tensors, and the two are compared.
_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}
_WITH_NUMBER = {"add_num": lambda a, c: a + c, "num_add": lambda a, c: c + a,
                "sub_num": lambda a, c: a - c, "num_sub": lambda a, c: c - a,
                "mul_num": lambda a, c: a * c, "num_mul": lambda a, c: c * a,
                "div_num": lambda a, c: a / c, "num_div": lambda a, c: c / a,
                "pow": lambda a, k: a ** k}
_UNARY = {"neg": lambda a: -a, "tanh": lambda a: a.tanh(), "relu": lambda a: a.relu(),
          "exp": lambda a: a.exp(), "log": lambda a: a.log()}
# How each instruction reads, as the student would write it.
_FORMS = {"add": "v{} + v{}", "sub": "v{} - v{}", "mul": "v{} * v{}", "div": "v{} / v{}",
          "add_num": "v{} + {}", "num_add": "{1} + v{0}", "sub_num": "v{} - {}", "num_sub": "{1} - v{0}",
          "mul_num": "v{} * {}", "num_mul": "{1} * v{0}", "div_num": "v{} / {}", "num_div": "{1} / v{0}",
          "pow": "v{} ** {}", "neg": "-v{}", "tanh": "v{}.tanh()", "relu": "v{}.relu()", "exp": "v{}.exp()",
          "log": "v{}.log()", "leaf": "Value({})"}
_LONGEST_SHOWN = 14  # instructions: a longer program is named by its label and its first lines

_PLAIN = checks.both("floats de Python sin más en .data y .grad", "plain Python floats in .data and .grad")
_ENGINE_OFF = checks.both(
    "{name} no está disponible en este ejercicio: mientras tu clase se ejecuta, autograd está apagado; "
    "el motor es tuyo",
    "{name} is not available in this exercise: autograd is switched off while your class runs; "
    "the engine is yours")


# The same functions on plain floats, to work out a program's values while it is drawn.
_FLOAT_UNARY = {"neg": lambda a: -a, "tanh": math.tanh, "relu": lambda a: max(a, 0.0), "exp": math.exp,
                "log": math.log}


def _apply(instruction, registers, unary=_UNARY):
    """The new value ``instruction`` makes from ``registers`` (the student's values, tensors, or with
    ``unary`` of floats, floats)."""
    op, *operands = instruction
    if op in _BINARY:
        return _BINARY[op](registers[operands[0]], registers[operands[1]])
    if op in _WITH_NUMBER:
        return _WITH_NUMBER[op](registers[operands[0]], operands[1])
    return unary[op](registers[operands[0]])


def program_code(program) -> list[str]:
    """The program's lines as Python: ``v2 = v0 * v1``, ``v2.backward()``."""
    lines, count = [], 0
    for op, *operands in program:
        if op == "backward":
            lines.append(f"v{operands[0]}.backward()")
        else:
            negative = op != "leaf" and any(isinstance(o, float) and o < 0 for o in operands)
            shown = [f"({o})" if negative and isinstance(o, float) else o for o in operands]
            lines.append(f"v{count} = " + _FORMS[op].format(*shown))
            count += 1
    return lines


def _program_name(program, label: str = "") -> str:
    lines = program_code(program)
    shown = "; ".join(lines if len(lines) <= _LONGEST_SHOWN else [*lines[:6], "…", *lines[-2:]])
    return f"{label}: {shown}" if label else shown


def _parents(program) -> list[tuple]:
    """The registers each register was made from (none for a leaf)."""
    parents = []
    for op, *operands in program:
        if op == "leaf":
            parents.append(())
        elif op != "backward":
            parents.append(tuple(operands[:2] if op in _BINARY else operands[:1]))
    return parents


def _reports(program) -> list[list[int]]:
    """For each ``backward()`` of the program: the registers whose ``.grad`` is compared after it. Every
    leaf made so far (they accumulate), every value its output depends on (this pass's gradient), and
    every value no ``backward()`` has reached yet (still 0); not a value an earlier pass reached and
    this one does not (the engine never visits it, so it keeps whatever it had)."""
    made, reached, reports = [], set(), []
    for op, *operands in program:
        if op != "backward":
            made.append(_parents([(op, *operands)])[0] if op != "leaf" else None)
            continue
        graph, stack = set(), [operands[0]]
        while stack:
            register = stack.pop()
            if register not in graph:
                graph.add(register)
                stack.extend(made[register] or ())
        reports.append([r for r in range(len(made)) if made[r] is None or r in graph or r not in reached])
        reached |= graph
    return reports


def _torch_program(program) -> tuple[list, list]:
    """What torch gives on the program, in float64: every register's value, and after each backward()
    the gradient of each register reported (``_reports``): a leaf's ``.grad`` as torch accumulates it
    with ``backward(retain_graph=True)``, any other value's gradient in that pass alone."""
    registers, leaves, grads = [], set(), []
    reports = iter(_reports(program))
    with torch.enable_grad():
        for instruction in program:
            op = instruction[0]
            if op == "leaf":
                leaves.add(len(registers))
                registers.append(torch.tensor(float(instruction[1]), dtype=torch.float64, requires_grad=True))
            elif op == "backward":
                output = registers[instruction[1]]
                one_pass = torch.autograd.grad(output, registers, retain_graph=True, allow_unused=True)
                output.backward(retain_graph=True)
                grads.append([_number_of(registers[r].grad if r in leaves else one_pass[r])
                              for r in next(reports)])
            else:
                registers.append(_apply(instruction, registers))
    return [r.item() for r in registers], grads


def _number_of(grad) -> float:
    """A gradient tensor's number now (a leaf's ``.grad`` changes in place later); 0 for None."""
    return 0.0 if grad is None else grad.item()


def _student_program(Value, program) -> tuple[list, list]:  # noqa: N803  the student's class, as named
    """The program run with the student's ``Value``: every register's ``.data``, and after each
    backward() the ``.grad`` of each register reported (``_reports``), as they are."""
    registers, grads = [], []
    reports = iter(_reports(program))
    for instruction in program:
        op = instruction[0]
        if op == "leaf":
            registers.append(Value(instruction[1]))
        elif op == "backward":
            registers[instruction[1]].backward()
            grads.append([registers[r].grad for r in next(reports)])
        else:
            registers.append(_apply(instruction, registers))
    return [r.data for r in registers], grads


def _is_plain(number) -> bool:
    return isinstance(number, numbers.Real) and not isinstance(number, bool)


def _engine_hint():
    return HINTS["value_engine"]


@checks.keeps_random_state
def check_value_program(Value, program, label: str = "") -> None:  # noqa: N803
    """The student's ``Value`` on ``program``: every value's ``.data`` and, after each ``backward()``,
    the ``.grad`` of the leaves (accumulated), of the values the output depends on (that pass's) and
    of the values no pass reached (0), as torch computes them in float64. Autograd is off meanwhile,
    and ``.data`` and ``.grad`` must be plain Python floats."""
    __tracebackhide__ = True
    hint, name = _engine_hint(), _program_name(program, label)
    with checks.shortcuts_off(_ALL_OF_AUTOGRAD, Value, message=_ENGINE_OFF):
        data, grads = checks.check_runs(_student_program, Value, program, name=name, hint=hint)
    for number in [*data, *(grad for step in grads for grad in step)]:
        if not _is_plain(number):
            checks.check_true(False, name=f".data and .grad in {name}", expected=_PLAIN,
                              got=checks.describe(number), hint=hint)
    want_data, want_grads = _torch_program(program)
    for register, (got, want) in enumerate(zip(data, want_data, strict=True)):
        checks.check_close(float(got), want, name=f"v{register}.data in {name}", hint=hint)
    outputs = [operands[0] for op, *operands in program if op == "backward"]
    for step, (output, reported, got, want) in enumerate(zip(outputs, _reports(program), grads, want_grads,
                                                             strict=True)):
        after = f"after backward() number {step + 1}, v{output}.backward()" if len(outputs) > 1 else \
            f"after v{output}.backward()"
        for register, got_grad, want_grad in zip(reported, got, want, strict=True):
            checks.check_close(float(got_grad), want_grad, name=f"v{register}.grad {after} in {name}",
                               hint=hint)


def _number(generator, low: float, high: float, away: float = 0.0) -> float:
    """A number in [low, high) with two decimals, at least ``away`` from 0."""
    while True:
        drawn = torch.rand((), generator=generator, dtype=torch.float64).item()
        value = round(drawn * (high - low) + low, 2)
        if abs(value) >= away:
            return value


class _Builder:
    """A program being written, and the plain value of each register (to keep it well conditioned)."""

    def __init__(self):
        self.program, self.values = [], []

    def leaf(self, x: float) -> int:
        return self.add(("leaf", x), x)

    def add(self, instruction, value=None) -> int:
        if value is None:
            value = _apply(instruction, self.values, _FLOAT_UNARY)
        self.program.append(instruction)
        self.values.append(float(value))
        return len(self.values) - 1

    def backward(self, register: int) -> None:
        self.program.append(("backward", register))


_ARITHMETIC = ["add", "sub", "mul", "div", "add_num", "num_add", "sub_num", "num_sub", "mul_num", "num_mul",
               "div_num", "num_div", "neg"]


def _arithmetic(generator, builder: _Builder, steps: int, avoid: tuple = ()) -> int:
    """``steps`` random instructions of ``+ - * /`` (numbers on either side) and negation over the
    builder's registers but ``avoid``, the recent ones more often; returns the last register."""
    last = len(builder.values) - 1
    for _ in range(steps):
        while True:
            op = _ARITHMETIC[_size(generator, 0, len(_ARITHMETIC))]
            usable = [r for r in range(len(builder.values)) if r not in avoid]
            recent = _size(generator, 0, 2) and last not in avoid
            first = last if recent else usable[_size(generator, 0, len(usable))]
            other = usable[_size(generator, 0, len(usable))]
            number = _number(generator, -3, 3, away=0.5)
            instruction = (op, first, other) if op in _BINARY else (op, first, number) if op in _WITH_NUMBER \
                else (op, first)
            divisor = {"div": builder.values[other], "num_div": builder.values[first]}.get(op, 1.0)
            if abs(divisor) >= 0.3 and 0.05 <= abs(_apply(instruction, builder.values, _FLOAT_UNARY)) <= 30:
                break
        last = builder.add(instruction)
    return last


def _gather(generator, builder: _Builder, since: int = 0, skip: tuple = ()) -> int:
    """Folds every register from ``since`` on that no instruction uses yet (but those in ``skip``) into
    one output, with ``+``, ``-`` or ``*``: the output then depends on all of them. Returns it."""
    used = {register for parents in _parents(builder.program) for register in parents}
    loose = [r for r in range(since, len(builder.values)) if r not in used and r not in skip]
    output = loose[0]
    for register in loose[1:]:
        product = builder.values[output] * builder.values[register]
        op = ("add", "sub", "mul")[_size(generator, 0, 3 if 0.05 <= abs(product) <= 30 else 2)]
        output = builder.add((op, output, register))
    return output


def random_program(generator, kind: str = "arithmetic") -> list:
    """A random program (plain data) of one kind: ``"arithmetic"`` (``+ - * /`` and numbers on either
    side), ``"functions"`` (``**``, ``tanh``, ``relu``, ``exp``, ``log``), ``"shared"`` (values used
    several times, and a value with no path to the output) or ``"twice"`` (backward() twice on one
    output, then once on another that shares its leaves)."""
    builder = _Builder()
    if kind == "arithmetic":
        for _ in range(_size(generator, 2, 5)):
            builder.leaf(_number(generator, -2, 2, away=0.2))
        _arithmetic(generator, builder, _size(generator, 6, 11))
        builder.backward(_gather(generator, builder))
    elif kind == "functions":
        builder.backward(_functions(generator, builder))
    elif kind == "shared":
        leaves = [builder.leaf(_number(generator, -2, 2, away=0.2)) for _ in range(4)]
        builder.add(("mul", leaves[2], leaves[3]))  # v4: no path to the output, nor has v3
        _arithmetic(generator, builder, _size(generator, 6, 11), avoid=(3, 4))
        builder.backward(_gather(generator, builder, skip=(3, 4)))
    elif kind == "twice":
        for _ in range(3):
            builder.leaf(_number(generator, -2, 2, away=0.2))
        _arithmetic(generator, builder, _size(generator, 4, 8))
        first = _gather(generator, builder)
        builder.backward(first)
        builder.backward(first)
        start = len(builder.values)
        builder.add(("mul", _size(generator, 0, 3), _size(generator, 3, start)))  # shares leaves and values
        _arithmetic(generator, builder, _size(generator, 2, 5))
        builder.backward(_gather(generator, builder, since=start))
    else:
        raise ValueError(f"no program of kind {kind!r}")
    return builder.program


def _functions(generator, builder: _Builder) -> int:
    """Every function and power on a leaf of its own, one composition of them, and their weighted
    sum; returns the sum's register."""
    terms = []
    for exponent in (2, 3, -1, 0.5):
        terms.append(builder.add(("pow", builder.leaf(_number(generator, 0.3, 2)), exponent)))
    for op, low, high in [("tanh", -2, 2), ("relu", 0.2, 2), ("relu", -2, -0.2), ("exp", -1.5, 1.5),
                          ("log", 0.3, 3)]:
        terms.append(builder.add((op, builder.leaf(_number(generator, low, high, away=0.1)))))
    inner = builder.add(("add_num", builder.add(("pow", builder.leaf(_number(generator, -2, 2)), 2)), 0.5))
    terms.append(builder.add(("tanh", builder.add(("log", inner)))))  # tanh(log(x ** 2 + 0.5))
    total = builder.add(("mul_num", terms[0], _number(generator, -2, 2, away=0.3)))
    for term in terms[1:]:
        weighted = builder.add(("mul_num", term, _number(generator, -2, 2, away=0.3)))
        total = builder.add(("add", total, weighted))
    return total


def shared_programs(generator) -> list[tuple[str, list]]:
    """``(label, program)``: a value times itself, a value added to itself, a diamond, a chain 200
    operations deep that uses one leaf at every step, and a value with no path to the output."""
    def program(*instructions, label):
        return label, [*instructions]

    x, a, k = (_number(generator, -1.5, 1.5, away=0.2) for _ in range(3))
    chain = [("leaf", x), ("leaf", _number(generator, -0.5, 0.5, away=0.1))]
    for step in range(100):  # v(2i+2) = v(2i+1 or the start) + v0, then its tanh
        chain += [("add", 1 if step == 0 else 2 * step + 1, 0), ("tanh", 2 * step + 2)]
    chain.append(("backward", len(chain) - 1))
    return [
        program(("leaf", x), ("mul", 0, 0), ("backward", 1), label="x * x"),
        program(("leaf", a), ("add", 0, 0), ("leaf", k), ("mul", 1, 2), ("backward", 3), label="a + a"),
        program(("leaf", a), ("leaf", k), ("mul", 0, 1), ("add", 2, 0), ("mul", 2, 3), ("backward", 4),
                label="a diamond"),
        ("a chain 200 operations deep, v0 used at every step", chain),
        program(("leaf", a), ("leaf", k), ("leaf", x), ("mul", 1, 2), ("tanh", 0), ("mul", 4, 0),
                ("backward", 5), label="v3 has no path to the output"),
    ]


def _twice_programs(generator) -> list[tuple[str, list]]:
    a, b, k = (_number(generator, -1.5, 1.5, away=0.2) for _ in range(3))
    return [("backward() twice on one output",
             [("leaf", a), ("leaf", b), ("mul", 0, 1), ("tanh", 0), ("add", 2, 3), ("backward", 4),
              ("backward", 4)]),
            ("two outputs that share v2",
             [("leaf", a), ("leaf", b), ("leaf", k), ("mul", 0, 1), ("mul", 3, 2), ("add", 3, 0),
              ("backward", 4), ("backward", 5)])]


@checks.keeps_random_state
def check_value_engine_arithmetic(Value) -> None:  # noqa: N803
    """Random programs of ``+ - * /``, numbers on either side, and negation."""
    generator = checks.fresh_generator()
    for _ in range(3):
        check_value_program(Value, random_program(generator, "arithmetic"))


@checks.keeps_random_state
def check_value_engine_functions(Value) -> None:  # noqa: N803
    """``**`` (2, 3, -1, 0.5 on positive bases), ``tanh``, ``relu`` (both sides of 0), ``exp``,
    ``log``, and one composition of them."""
    generator = checks.fresh_generator()
    for _ in range(2):
        check_value_program(Value, random_program(generator, "functions"), "the functions")


@checks.keeps_random_state
def check_value_engine_shared(Value) -> None:  # noqa: N803
    """Values used more than once (x * x, a + a, a diamond, a deep chain), a value with no path to the
    output, and a random program with one."""
    generator = checks.fresh_generator()
    for label, program in shared_programs(generator):
        check_value_program(Value, program, label)
    check_value_program(Value, random_program(generator, "shared"), "v3 and v4 have no path to the output")


@checks.keeps_random_state
def check_value_engine_twice(Value) -> None:  # noqa: N803
    """``backward()`` twice on one output, and once each on two outputs that share leaves: leaves
    accumulate as torch's ``.grad`` does; any other value holds its last pass's gradient."""
    generator = checks.fresh_generator()
    for label, program in [*_twice_programs(generator), ("three backward() calls", random_program(generator,
                                                                                                  "twice"))]:
        check_value_program(Value, program, label)


# A tiny MLP on the student's engine: (weights, biases) per layer, weights one row per output unit.
def _mlp_case(generator, widths=None) -> tuple[list, list]:
    """``(x, layers)`` as plain floats: one example and the layers of widths ``widths`` (2 or 3 layers
    of 2 to 5 units when not given)."""
    widths = widths or [_size(generator, 2, 6) for _ in range(_size(generator, 3, 5))]

    def numbers_(*shape, scale=1.0):
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * scale).tolist()

    layers = [(numbers_(fan_out, fan_in, scale=0.8), numbers_(fan_out, scale=0.5))
              for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)]
    return numbers_(widths[0]), layers


def _torch_mlp(x, layers) -> tuple[list, list]:
    """torch's outputs of the ``nn.Linear`` + tanh stack on these numbers, and, after
    ``(outputs ** 2).sum().backward()``, each layer's (weight grad rows, bias grad)."""
    linears = []
    for weights, biases in layers:
        linear = nn.Linear(len(weights[0]), len(weights), dtype=torch.float64)
        linear.weight = nn.Parameter(torch.tensor(weights, dtype=torch.float64))
        linear.bias = nn.Parameter(torch.tensor(biases, dtype=torch.float64))
        linears.append(linear)
    with torch.enable_grad():
        out = torch.tensor(x, dtype=torch.float64)
        for index, linear in enumerate(linears):
            out = linear(out) if index == len(linears) - 1 else linear(out).tanh()
        (out ** 2).sum().backward()
    return out.tolist(), [(linear.weight.grad.tolist(), linear.bias.grad.tolist()) for linear in linears]


def _student_mlp(mlp, Value, x, layers, gradients: bool):  # noqa: N803
    """``mlp`` on Values of the student's class made from plain numbers: the outputs, and with
    ``gradients``, after ``backward()`` on the sum of the squared outputs (built with the student's
    operators), the weights' and biases' Values."""
    values = [Value(number) for number in x]
    made = [([[Value(w) for w in row] for row in weights], [Value(b) for b in biases])
            for weights, biases in layers]
    outputs = mlp(values, made)
    if gradients:
        total = outputs[0] * outputs[0]
        for output in list(outputs)[1:]:
            total = total + output * output
        total.backward()
    return outputs, made


def _mlp_name(x, layers) -> str:
    widths = [len(x)] + [len(weights) for weights, _ in layers]
    return f"mlp(x, layers) with widths {widths}"


def _check_mlp(mlp, Value, x, layers, gradients: bool) -> None:  # noqa: N803
    __tracebackhide__ = True
    hint, name = HINTS["value_mlp"], _mlp_name(x, layers)
    with checks.shortcuts_off(_ALL_OF_AUTOGRAD, mlp, Value, message=_ENGINE_OFF):
        outputs, made = checks.check_runs(_student_mlp, mlp, Value, x, layers, gradients, name=name,
                                          hint=hint)
    want_outputs, want_grads = _torch_mlp(x, layers)
    checks.check_type(outputs, (list, tuple), name=name, hint=hint)
    checks.check_equal(len(outputs), len(want_outputs), name=f"len({name})", hint=hint)
    for index, (output, want) in enumerate(zip(outputs, want_outputs, strict=True)):
        checks.check_type(output, Value, name=f"{name}[{index}]", hint=hint)
        checks.check_close(output.data, want, name=f"{name}[{index}].data", hint=hint)
    if not gradients:
        return
    for number, ((weights, biases), (weight_grads, bias_grads)) in enumerate(zip(made, want_grads,
                                                                                 strict=True)):
        for row, (values, wants) in enumerate(zip(weights, weight_grads, strict=True)):
            for column, (value, want) in enumerate(zip(values, wants, strict=True)):
                checks.check_close(value.grad, want, name=f"layers[{number}] weight [{row}][{column}].grad "
                                   f"after backward() on the sum of squared outputs of {name}", hint=hint)
        for row, (value, want) in enumerate(zip(biases, bias_grads, strict=True)):
            checks.check_close(value.grad, want, name=f"layers[{number}] bias [{row}].grad after backward() "
                               f"on the sum of squared outputs of {name}", hint=hint)


@checks.keeps_random_state
def check_value_mlp_case(mlp, Value, widths: list, gradients: bool = False) -> None:  # noqa: N803
    """``mlp`` with layers of these ``widths`` (input first) against torch's stack: the outputs, or with
    ``gradients`` every weight's and bias's gradient too."""
    x, layers = _mlp_case(checks.fresh_generator(), list(widths))
    _check_mlp(mlp, Value, x, layers, gradients)


@checks.keeps_random_state
def check_value_mlp_outputs(mlp, Value) -> None:  # noqa: N803
    """The outputs of 2 and 3 layers of random widths, as torch's ``nn.Linear`` + tanh stack gives them."""
    generator = checks.fresh_generator()
    for count in (3, 4):
        x, layers = _mlp_case(generator, [_size(generator, 2, 6) for _ in range(count)])
        _check_mlp(mlp, Value, x, layers, gradients=False)


@checks.keeps_random_state
def check_value_mlp_gradients(mlp, Value) -> None:  # noqa: N803
    """Every weight's and bias's gradient after ``backward()`` on the sum of squared outputs, as torch's."""
    generator = checks.fresh_generator()
    for count in (3, 4):
        x, layers = _mlp_case(generator, [_size(generator, 2, 6) for _ in range(count)])
        _check_mlp(mlp, Value, x, layers, gradients=True)


# -------------------------------------------------------------------- decided by the judge
# When a class is graded, these exercises' points also need the student's function to return what
# the reference returns on inputs the judge draws from the class's secret (graders/judge/calls.py).
def _networks(generator, dead: bool = False):
    """Inputs of ``manual_backward``: a batch, its classes and a two-layer network's parameters;
    ``dead``: some hidden units never fire (their ReLU passes no gradient)."""
    cases = []
    for _ in range(2):
        n, d, h, c = (int(v) for v in torch.randint(2, 7, (4,), generator=generator))
        b1 = torch.randn(h, generator=generator)
        if dead:
            b1[: h // 2] = -100.0
        cases.append((torch.randn(n, d, generator=generator), torch.randint(0, c, (n,), generator=generator),
                      torch.randn(h, d, generator=generator), b1, torch.randn(c, h, generator=generator),
                      torch.randn(c, generator=generator)))
    return cases


def _size(generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (), generator=generator))


def _seed(generator) -> int:
    return int(torch.randint(0, 2**31, (1,), generator=generator))


# The functions the judge hands to ``finite_difference_grad`` and ``second_derivative``: a function
# cannot cross the wire, so each is named, with its coefficients, and built where the answer runs.
# A scalar of a whole tensor for the first; an elementwise function for the second.
def _sines_and_cubes(coefficients):
    """``Σ a·sin(tᵢ) + b·tᵢ³`` through Python floats: autograd sees no graph inside."""
    a, b = coefficients.tolist()
    return lambda t: torch.tensor(sum(a * math.sin(v) + b * v ** 3 for v in t.flatten().tolist()),
                                  dtype=torch.float64)


_FUNCTIONS = {
    "quadratic": lambda c: lambda t: (c * t ** 2).sum(),  # Σ cᵢ·tᵢ²
    "smooth": lambda w: lambda t: torch.tanh(w @ t.reshape(-1)).pow(2).sum() + t.sin().sum(),
    "black_box": _sines_and_cubes,
    "cubic": lambda c: lambda t: c[0].item() * t ** 3 + c[1].item() * t ** 2 + c[2].item() * t,
    "exp": lambda k: lambda t: torch.exp(k.item() * t),
    "sine": lambda a: lambda t: a.item() * torch.sin(t),
}


def function_of(family: str, coefficients: torch.Tensor):
    """The function ``family`` of :data:`_FUNCTIONS` with these ``coefficients``."""
    return _FUNCTIONS[family](coefficients)


def _coefficients(generator, family: str, x: torch.Tensor) -> torch.Tensor:
    """The coefficients of a scalar ``family`` of :data:`_FUNCTIONS` at a point shaped like ``x``."""
    if family == "quadratic":  # one positive cᵢ per element of x
        return torch.rand(x.shape, generator=generator, dtype=torch.float64) + 0.5
    if family == "smooth":  # W, (k, x.numel()), in [-2, 2)
        return torch.rand(_size(generator, 2, 6), x.numel(), generator=generator, dtype=torch.float64) * 4 - 2
    return torch.rand(2, generator=generator, dtype=torch.float64) + 0.5  # a and b of the black box


def _gradient_points(generator, black_box: bool = False):
    """Inputs of ``finite_difference_grad``'s outcome: a family, its coefficients and a point x of
    rank 1, then 2, ... (float64)."""
    cases = []
    for family in ("black_box", "black_box") if black_box else ("quadratic", "quadratic", "smooth"):
        rank = 1 + len(cases) % 2
        x = torch.randn(tuple(_size(generator, 2, 4) for _ in range(rank)), generator=generator,
                        dtype=torch.float64)
        cases.append((family, _coefficients(generator, family, x), x))
    return cases


def _left_alone(x, before) -> bool:
    """The caller's ``x`` holds its values still, exactly, and still asks for no gradient."""
    return torch.equal(x.detach(), before) and not x.requires_grad


def finite_difference_grad_outcome(finite_difference_grad, family: str, coefficients, x) -> tuple:
    """The gradient the answer estimates for the function ``family`` at ``x``, and whether the
    caller's ``x`` was left alone."""
    before = x.clone()
    got = finite_difference_grad(function_of(family, coefficients), x)
    return got, _left_alone(x, before)


def _snippet_values(generator):
    """Inputs of ``predicted_grad``: three triples (a, b, x0) of floats in [-4, 4)."""
    return [tuple((torch.rand(3, generator=generator, dtype=torch.float64) * 8 - 4).tolist())
            for _ in range(3)]


def _weighted_graphs(generator):
    """Inputs of ``weighted_backward``'s outcomes: a graph's kind, its tensors and the weights."""
    n = _size(generator, 2, 6)
    shared = [torch.randn(n, generator=generator, dtype=torch.float64) for _ in range(4)]
    w1, w3 = (round(v, 3) for v in (torch.rand(2, generator=generator) * 4 - 2).tolist())
    m, k = _size(generator, 2, 5), _size(generator, 2, 5)
    layer = [torch.randn(m, k, generator=generator, dtype=torch.float64),
             torch.randn(m, generator=generator, dtype=torch.float64),
             torch.randn(n, k, generator=generator, dtype=torch.float64),
             torch.randn(m, k, generator=generator, dtype=torch.float64)]
    return [("shared", shared, [w1, torch.randn(n, generator=generator, dtype=torch.float64), w3]),
            ("layer", layer, [w3, torch.randn(n, generator=generator, dtype=torch.float64),
                              _size(generator, -3, 4)])]


def _weighted_graph(kind: str, tensors: list) -> tuple:
    """``(leaves, outputs, shared)``: leaves that require grad (the first holding a gradient already),
    three outputs of one graph built on them, and an intermediate tensor several of them go
    through.

    ``"shared"``: leaves a, b, a constant c, h = a·b; outputs (h·c).sum(), a², h + b. ``"layer"``:
    weight and bias leaves, constant inputs, out = inputs @ weight.T + bias; outputs mean(out²),
    out[:, 0], tanh(out)."""
    first, second, constant, before = (tensor.clone() for tensor in tensors)
    leaves = [first.requires_grad_(True), second.requires_grad_(True)]
    first.grad = before
    if kind == "shared":
        shared = first * second
        return leaves, [(shared * constant).sum(), first ** 2, shared + second], shared
    shared = constant @ first.T + second
    return leaves, [shared.pow(2).mean(), shared[:, 0], shared.tanh()], shared


def weighted_backward_outcome(weighted_backward, kind: str, tensors: list, weights: list) -> list:
    """The leaves' ``.grad`` after the answer's call (None for one it left without)."""
    with torch.enable_grad():
        leaves, outputs, _ = _weighted_graph(kind, tensors)
        weighted_backward(outputs, weights)
    return [leaf.grad for leaf in leaves]


def weighted_backward_one_entry_outcome(weighted_backward, kind: str, tensors: list, weights: list) -> tuple:
    """How many times a gradient reached the intermediate tensor two outputs go through (once when
    the backward pass starts from every output at once, once per output when it is done output by
    output), and the leaves' ``.grad``."""
    passes = []
    with torch.enable_grad():
        leaves, outputs, shared = _weighted_graph(kind, tensors)
        shared.register_hook(lambda grad: passes.append(None))
        weighted_backward(outputs, weights)
    return len(passes), [leaf.grad for leaf in leaves]


def _curved_points(generator):
    """Inputs of ``second_derivative``'s outcome: an elementwise family, its coefficients and x."""
    def x(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float64)

    def coefficients():
        return torch.randn(3, generator=generator, dtype=torch.float64) * 2

    return [("cubic", coefficients(), x(_size(generator, 2, 9))), ("cubic", coefficients(), x(1)),
            ("exp", torch.rand(1, generator=generator, dtype=torch.float64) + 0.5, x(_size(generator, 2, 6))),
            ("sine", torch.rand(1, generator=generator, dtype=torch.float64) + 0.5,
             x(_size(generator, 2, 4), _size(generator, 2, 4)))]


def second_derivative_outcome(second_derivative, family: str, coefficients, x) -> tuple:
    """The second derivatives the answer gives for ``family`` at ``x``, and whether the caller's
    ``x`` was left alone."""
    before = x.clone()
    with torch.enable_grad():
        got = second_derivative(function_of(family, coefficients), x)
    return got, _left_alone(x, before)


def _parameter_sets(generator):
    """Inputs of ``sgd_step``'s outcome: parameters' values (float32, then float64), their gradients
    (None for one of them) and a learning rate."""
    cases = []
    for dtype in (torch.float32, torch.float64):
        shapes = [tuple(_size(generator, 1, 5) for _ in range(_size(generator, 0, 3)))
                  for _ in range(_size(generator, 2, 5))]
        idle = _size(generator, 0, len(shapes))
        values = [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]
        gradients = [None if index == idle else torch.randn(shape, generator=generator, dtype=dtype)
                     for index, shape in enumerate(shapes)]
        cases.append((values, gradients, (torch.rand((), generator=generator) * 0.5 + 0.01).item()))
    return cases


def sgd_step_outcome(sgd_step, values: list, gradients: list, lr: float) -> tuple:
    """After ``sgd_step`` on leaves holding ``values`` and ``gradients``: their values, whether each
    gradient is cleared (None or zeros), and whether each is still the same leaf requiring grad."""
    params = [value.clone().requires_grad_(True) for value in values]
    for param, gradient in zip(params, gradients, strict=True):
        param.grad = None if gradient is None else gradient.clone()
    listed = list(params)
    sgd_step(listed, lr)
    return ([param.detach().clone() for param in params],
            [param.grad is None or not bool(param.grad.any()) for param in params],
            [listed[index] is param and param.is_leaf and param.requires_grad
             for index, param in enumerate(params)])


def _stacks(generator):
    """Inputs of ``freeze_all_but_last``'s outcomes: a stack of Linear layers described by its widths,
    the activation after each, whether one ends the stack, whether the last Linear has a bias, which
    Linear layers start frozen (none, all, some) and a seed for the weights."""
    def either() -> bool:
        return bool(_size(generator, 0, 2))

    cases = []  # one stack ends in an activation, one in its Linear; one Linear has no bias
    for start, activation_last, bias_last in [("trainable", True, either()), ("frozen", False, True),
                                              ("some", either(), False)]:
        widths = torch.randint(2, 9, (_size(generator, 3, 6),), generator=generator).tolist()
        frozen = [start == "frozen" or (start == "some" and either()) for _ in widths[1:]]
        cases.append((widths, ("relu", "tanh")[_size(generator, 0, 2)], activation_last, bias_last, frozen,
                      _seed(generator)))
    return cases


def _stack(widths, activation, activation_last, bias_last, frozen, seed) -> nn.Sequential:
    layers = []
    with checks.seeded(seed):
        for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            linear = nn.Linear(fan_in, fan_out, bias=bias_last or index < len(widths) - 2)
            linear.requires_grad_(not frozen[index])
            layers += [linear, nn.ReLU() if activation == "relu" else nn.Tanh()]
    return nn.Sequential(*(layers if activation_last else layers[:-1]))


def freeze_all_but_last_outcome(freeze_all_but_last, *stack) -> list:
    """``requires_grad`` of every parameter of the stack after the answer's call."""
    model = _stack(*stack)
    freeze_all_but_last(model)
    return [param.requires_grad for param in model.parameters()]


def freeze_all_but_last_count_outcome(freeze_all_but_last, *stack):
    """What the answer returns for the stack: the count of parameters left trainable."""
    return freeze_all_but_last(_stack(*stack))


def _growths(generator, factors):
    """``(x, rate, limit)``: x in [1, 10), rate in [0.05, 0.5), limit x·factor (float64)."""
    cases = []
    for factor in factors:
        x = torch.rand((), generator=generator, dtype=torch.float64) * 9 + 1
        rate = torch.rand((), generator=generator, dtype=torch.float64) * 0.45 + 0.05
        cases.append((x, rate, x.item() * factor))
    return cases


def _compound_values(generator):
    """Inputs of ``compound``: two limits far above x, and one x already reaches."""
    factors = [(torch.rand((), generator=generator) * 40 + 2).item() for _ in range(2)]
    return _growths(generator, [*factors, 0.5])


def _compound_starts(generator):
    """Inputs of ``compound``'s gradient outcome: x, rate and limit as floats, at least one step."""
    factors = [(torch.rand((), generator=generator) * 40 + 1.1).item() for _ in range(3)]
    return [(x.item(), rate.item(), limit) for x, rate, limit in _growths(generator, factors)]


def compound_grad_outcome(compound, x0: float, rate0: float, limit: float) -> tuple:
    """``compound`` on leaves x and rate, then ``value.backward()``: the value, the steps, x.grad
    and rate.grad."""
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    rate = torch.tensor(rate0, dtype=torch.float64, requires_grad=True)
    with torch.enable_grad():
        value, steps = compound(x, rate, limit)
        value.backward()
    return value.detach().clone(), steps, x.grad, rate.grad


def _clippings(generator, upstream: bool = False):
    """Inputs of ``ClippedIdentity``'s outcomes: points on both sides of a random interval (none on
    its edges), the interval, and with ``upstream`` the gradient that comes back."""
    cases = []
    for _ in range(2):
        low, high = _interval(generator)
        shape = (_size(generator, 2, 5), _size(generator, 2, 5))
        x = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low + 2) + low - 1
        for edge in (low, high):
            x[(x - edge).abs() < 1e-2] = edge + 0.05
        x.view(-1)[:2] = torch.tensor([low - 0.5, high + 0.5], dtype=torch.float64)
        cases.append((x, low, high, torch.randn(x.shape, generator=generator, dtype=torch.float64))
                     if upstream else (x, low, high))
    return cases


def clipped_identity_forward_outcome(function, x, low: float, high: float) -> tuple:
    """``function.apply`` on a leaf holding ``x``: the output's values, and whether its graph node is
    the function's own."""
    leaf = x.clone().requires_grad_(True)
    with torch.enable_grad():
        output = function.apply(leaf, low, high)
    return output.detach().clone(), getattr(output.grad_fn, "_forward_cls", None) is function


def clipped_identity_backward_outcome(function, x, low: float, high: float, upstream) -> object:
    """``x.grad`` after ``function.apply(x, low, high).backward(upstream)``."""
    leaf = x.clone().requires_grad_(True)
    with torch.enable_grad():
        function.apply(leaf, low, high).backward(upstream)
    return leaf.grad


def _edge_networks(generator):
    """Inputs of ``manual_backward``'s outcome: a batch of one example, and a network two of whose
    hidden units never fire (float64)."""
    inputs, hidden, classes = (_size(generator, 2, 7) for _ in range(3))
    cases = [network_case(generator, (1, inputs, hidden + 1, classes)), network_case(generator, dead=2)]
    return [tuple(case[name] for name in ("x", "targets", *PARAMETERS)) for case in cases]


def manual_backward_outcome(manual_backward, *arguments) -> tuple:
    """What ``manual_backward`` returns with grad mode off, then whether its inputs were left as
    they were."""
    before = [argument.clone() for argument in arguments]
    with torch.set_grad_enabled(False):
        gradients = manual_backward(*arguments)
    return gradients, [torch.equal(argument, kept) for argument, kept in zip(arguments, before, strict=True)]


def _layer_gradients(manual_backward, arguments, first: int) -> tuple:
    with torch.set_grad_enabled(False):
        gradients = manual_backward(*arguments)
    return len(gradients), gradients[first], gradients[first + 1]


def manual_backward_output_outcome(manual_backward, *arguments) -> tuple:
    """How many gradients ``manual_backward`` returns with grad mode off, and the output layer's
    (w2, b2): what its grade cell is for."""
    return _layer_gradients(manual_backward, arguments, 2)


def manual_backward_hidden_outcome(manual_backward, *arguments) -> tuple:
    """How many gradients ``manual_backward`` returns with grad mode off, and the hidden layer's
    (w1, b1)."""
    return _layer_gradients(manual_backward, arguments, 0)


def _plain_floats(numbers_) -> list:
    """``numbers_`` as plain floats; a tensor, or anything else but a real number, is refused."""
    if not all(_is_plain(number) for number in numbers_):
        raise TypeError("not plain Python floats")
    return [float(number) for number in numbers_]


def _engine_programs(kind: str):
    """Inputs of ``Value``'s outcomes: programs of one kind (``random_program``'s), drawn at random."""
    def draw(generator):
        cases = [(random_program(generator, kind),) for _ in range(3)]
        if kind == "shared":
            cases += [(program,) for _, program in shared_programs(generator)]
        if kind == "twice":
            cases += [(program,) for _, program in _twice_programs(generator)]
        return cases
    return draw


def value_engine_outcome(Value, program) -> tuple:  # noqa: N803
    """The student's ``Value`` on ``program`` with autograd off: every value's ``.data``, and after each
    ``backward()`` the ``.grad`` of the values ``_reports`` names, as plain floats."""
    with checks.shortcuts_off(_ALL_OF_AUTOGRAD, Value, message=_ENGINE_OFF):
        data, grads = _student_program(Value, program)
    return _plain_floats(data), [_plain_floats(step) for step in grads]


def _mlp_cases(generator):
    """Inputs of ``mlp``'s outcomes: one example and 2 or 3 layers, as plain floats."""
    return [_mlp_case(generator, [_size(generator, 2, 6) for _ in range(count)]) for count in (3, 4, 3)]


def _notebook_value(mlp):
    """The ``Value`` class of the notebook that defined ``mlp``."""
    return mlp.__globals__["Value"]


def value_mlp_outcome(mlp, x, layers) -> list:
    """``mlp`` on Values of the notebook's class made from ``x`` and ``layers``: the outputs' data."""
    Value = _notebook_value(mlp)  # noqa: N806
    with checks.shortcuts_off(_ALL_OF_AUTOGRAD, mlp, Value, message=_ENGINE_OFF):
        outputs, _ = _student_mlp(mlp, Value, x, layers, gradients=False)
    return _plain_floats([output.data for output in outputs])


def value_mlp_gradients_outcome(mlp, x, layers) -> list:
    """After ``backward()`` on the sum of the squared outputs: each layer's weights' and biases' grads."""
    Value = _notebook_value(mlp)  # noqa: N806
    with checks.shortcuts_off(_ALL_OF_AUTOGRAD, mlp, Value, message=_ENGINE_OFF):
        _, made = _student_mlp(mlp, Value, x, layers, gradients=True)
    return [([_plain_floats([value.grad for value in row]) for row in weights],
             _plain_floats([value.grad for value in biases])) for weights, biases in made]


_DIFFERENCES = {"rtol": 1e-5, "atol": 1e-6}  # a finite difference's error, as the kernel's check allows
JUDGED = [
    checks.JudgedCall("test_finite_difference_grad", "finite_difference_grad", "finite_difference_grad",
                      _gradient_points, _DIFFERENCES, outcome=finite_difference_grad_outcome),
    checks.JudgedCall("test_finite_difference_grad_black_box", "finite_difference_grad",
                      "finite_difference_grad", functools.partial(_gradient_points, black_box=True),
                      _DIFFERENCES, outcome=finite_difference_grad_outcome),
    checks.JudgedCall("test_predicted_grad", "predicted_grad", "predicted_grad", _snippet_values),
    checks.JudgedCall("test_weighted_backward", "weighted_backward", "weighted_backward", _weighted_graphs,
                      outcome=weighted_backward_outcome),
    checks.JudgedCall("test_weighted_backward_one_entry", "weighted_backward", "weighted_backward",
                      _weighted_graphs, outcome=weighted_backward_one_entry_outcome),
    checks.JudgedCall("test_second_derivative", "second_derivative", "second_derivative", _curved_points,
                      outcome=second_derivative_outcome),
    checks.JudgedCall("test_sgd_step", "sgd_step", "sgd_step", _parameter_sets, outcome=sgd_step_outcome),
    checks.JudgedCall("test_freeze_all_but_last", "freeze_all_but_last", "freeze_all_but_last", _stacks,
                      outcome=freeze_all_but_last_outcome),
    checks.JudgedCall("test_freeze_all_but_last_count", "freeze_all_but_last", "freeze_all_but_last",
                      _stacks, outcome=freeze_all_but_last_count_outcome),
    checks.JudgedCall("test_compound_value", "compound", "compound", _compound_values),
    checks.JudgedCall("test_compound_grad", "compound", "compound", _compound_starts,
                      outcome=compound_grad_outcome),
    checks.JudgedCall("test_clipped_identity_forward", "ClippedIdentity", "clipped_identity", _clippings,
                      outcome=clipped_identity_forward_outcome),
    checks.JudgedCall("test_clipped_identity_backward", "ClippedIdentity", "clipped_identity",
                      functools.partial(_clippings, upstream=True),
                      outcome=clipped_identity_backward_outcome),
    checks.JudgedCall("test_manual_backward_output", "manual_backward", "manual_backward", _networks,
                      {"rtol": 1e-4, "atol": 1e-5}, outcome=manual_backward_output_outcome),
    checks.JudgedCall("test_manual_backward_hidden", "manual_backward", "manual_backward",
                      functools.partial(_networks, dead=True), {"rtol": 1e-4, "atol": 1e-5},
                      outcome=manual_backward_hidden_outcome),
    checks.JudgedCall("test_manual_backward_edge_cases", "manual_backward", "manual_backward",
                      _edge_networks, outcome=manual_backward_outcome),
    checks.JudgedCall("test_value_engine_arithmetic", "Value", "value_engine", _engine_programs("arithmetic"),
                      outcome=value_engine_outcome),
    checks.JudgedCall("test_value_engine_functions", "Value", "value_engine", _engine_programs("functions"),
                      outcome=value_engine_outcome),
    checks.JudgedCall("test_value_engine_shared", "Value", "value_engine", _engine_programs("shared"),
                      outcome=value_engine_outcome),
    checks.JudgedCall("test_value_engine_twice", "Value", "value_engine", _engine_programs("twice"),
                      outcome=value_engine_outcome),
    checks.JudgedCall("test_value_mlp_outputs", "mlp", ("value_engine", "value_mlp"), _mlp_cases,
                      outcome=value_mlp_outcome),
    checks.JudgedCall("test_value_mlp_gradients", "mlp", ("value_engine", "value_mlp"), _mlp_cases,
                      outcome=value_mlp_gradients_outcome),
]
