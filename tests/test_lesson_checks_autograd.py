"""Lesson 02's visible checks: a correct answer passes, a typical mistake fails with expected/got/hint."""

import math
import re

import pytest
import torch
from check_messages import failure
from lesson_files import read_solution
from wrong_answers import defined

import course
from graders.checks import CheckFailed
from graders.judge import calls, wire
from graders.lesson_checks import autograd as lesson
from graders.lesson_checks import questions
from graders.lessons import solution_path

pytestmark = pytest.mark.usefixtures("english")


def _function_calling(answer):
    """A ``torch.autograd.Function`` as the checks use one: a class whose ``apply`` is ``answer``."""
    return type("Answer", (), {"apply": staticmethod(answer)})


_X = torch.tensor([-2.0, 0.5, 2.0], dtype=torch.float64)

# How test_harness calls each check with a given answer.
CHECK_CALLS = {
    "check_finite_difference_grad": lesson.check_finite_difference_grad,
    "check_finite_difference_grad_black_box": lesson.check_finite_difference_grad_black_box,
    "check_predicted_grad": lesson.check_predicted_grad,
    "check_weighted_backward": lesson.check_weighted_backward,
    "check_weighted_backward_one_entry": lesson.check_weighted_backward_one_entry,
    "check_second_derivative": lesson.check_second_derivative,
    "check_sgd_step": lesson.check_sgd_step,
    "check_freeze_all_but_last": lesson.check_freeze_all_but_last,
    "check_trainable_count": lesson.check_trainable_count,
    "check_compound_value": lesson.check_compound_value,
    "check_compound_grad": lambda answer: lesson.check_compound_grad(answer, 100.0, 0.1, 150.0),
    "check_compound_grads": lesson.check_compound_grads,
    "check_clipped_identity_forward": lambda answer: lesson.check_clipped_identity_forward(
        _function_calling(answer)),
    "check_clipped_backward": lambda answer: lesson.check_clipped_backward(
        _function_calling(answer), _X, -1.0, 1.0, torch.ones(3, dtype=torch.float64), "clip(x, -1, 1)"),
    "check_clipped_identity_backward": lambda answer: lesson.check_clipped_identity_backward(
        _function_calling(answer)),
    "check_manual_backward_output": lesson.check_manual_backward_output,
    "check_manual_backward_hidden": lesson.check_manual_backward_hidden,
    "check_manual_backward_edge_cases": lesson.check_manual_backward_edge_cases,
    "check_manual_backward_case": lambda answer: lesson.check_manual_backward_case(
        answer, lesson.network_case(torch.Generator().manual_seed(5))),
    "check_concepts": lesson.check_concepts,
    "check_value_program": lambda answer: lesson.check_value_program(
        answer, [("leaf", 0.5), ("mul", 0, 0), ("backward", 1)]),
    "check_value_engine_arithmetic": lesson.check_value_engine_arithmetic,
    "check_value_engine_functions": lesson.check_value_engine_functions,
    "check_value_engine_shared": lesson.check_value_engine_shared,
    "check_value_engine_twice": lesson.check_value_engine_twice,
    "check_value_mlp_case": lambda answer: lesson.check_value_mlp_case(answer, MicroValue, [3, 2, 1], True),
    "check_value_mlp_outputs": lambda answer: lesson.check_value_mlp_outputs(answer, MicroValue),
    "check_value_mlp_gradients": lambda answer: lesson.check_value_mlp_gradients(answer, MicroValue),
}


def central_differences(f, x, eps=1e-6):
    flat = x.detach().clone().reshape(-1)
    out = torch.empty_like(flat)
    for i in range(flat.numel()):
        up, down = flat.clone(), flat.clone()
        up[i] += eps
        down[i] -= eps
        out[i] = (f(up.view_as(x)) - f(down.view_as(x))) / (2 * eps)
    return out.view_as(x)


def through_autograd(f, x, eps=1e-6):
    leaf = x.detach().requires_grad_(True)
    f(leaf).backward()
    return leaf.grad


def test_finite_difference_grad():
    lesson.check_finite_difference_grad(central_differences)
    lesson.check_finite_difference_grad_black_box(central_differences)
    failure(lesson.check_finite_difference_grad, lambda f, x: central_differences(f, x).float(),
            says=["the dtype is not the expected one", "expected: torch.float64", "got: torch.float32"])
    failure(lesson.check_finite_difference_grad, lambda f, x: central_differences(f, x) / 2,
            says=["Σ c·t²", "the values differ"])


@pytest.mark.parametrize("check", [lesson.check_finite_difference_grad,
                                   lesson.check_finite_difference_grad_black_box])
def test_finite_difference_grad_refuses_autograd_and_says_why(check):
    failure(check, through_autograd,
            says=["ShortcutUsed", "Tensor.backward is not available in this exercise"])
    failure(check, lambda f, x, eps=1e-6: torch.autograd.grad(f(x.detach().requires_grad_()), x),
            says=["torch.autograd.grad is not available in this exercise"])
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()  # back on after the check
    assert x.grad.item() == 4.0


def test_finite_difference_grad_sees_an_input_changed_in_place():
    def in_place(f, x, eps=1e-6):
        grad = central_differences(f, x, eps)
        x += 1
        return grad

    failure(lesson.check_finite_difference_grad, in_place, says=["the input modified"])


def test_black_box_hides_its_graph():
    seen = []

    def looks_inside(f, x, eps=1e-6):
        seen.append(f(x.detach().requires_grad_(True)).requires_grad)
        return central_differences(f, x, eps)

    lesson.check_finite_difference_grad_black_box(looks_inside)
    assert seen == [False]


def test_predicted_grad():
    lesson.check_predicted_grad(lambda a, b, x0: b + 4 * a * x0)
    failure(lesson.check_predicted_grad, lambda a, b, x0: 2 * a * x0 + b,  # forgot one backward
            says=["predicted_grad(", "the values differ"])
    failure(lesson.check_predicted_grad, lambda a, b, x0: b,  # thought the forward pass reset it
            says=["predicted_grad(", "the values differ"])
    failure(lesson.check_predicted_grad, lambda a, b, x0: lesson.gradient_after_snippet(a, b, x0),
            says=["Tensor.backward is not available in this exercise"])


def test_gradient_after_snippet_runs_the_exercises_snippet():
    assert lesson.gradient_after_snippet(1.0, 1.0, 2.0) == pytest.approx(9.0)


def _vectors(outputs, weights):
    return [w if isinstance(w, torch.Tensor) else torch.full_like(o, w)
            for o, w in zip(outputs, weights, strict=True)]


def _weighted(outputs, weights):
    torch.autograd.backward(outputs, _vectors(outputs, weights))


def _summed_loss(outputs, weights):
    sum((w * o).sum() for o, w in zip(outputs, weights, strict=True)).backward()


def _one_backward_each(outputs, weights):
    for o, v in zip(outputs, _vectors(outputs, weights), strict=True):
        o.backward(v, retain_graph=True)


def test_weighted_backward():
    lesson.check_weighted_backward(_weighted)
    lesson.check_weighted_backward_one_entry(_weighted)


def test_weighted_backward_values_catch_typical_mistakes():
    failure(lesson.check_weighted_backward, lambda outputs, weights: torch.autograd.backward(outputs),
            says=["raised", "implicitly created only for scalar outputs"])  # no implicit vector gradient

    def scalar_weights(outputs, weights):
        torch.autograd.backward(outputs, [torch.as_tensor(w, dtype=o.dtype)
                                          for o, w in zip(outputs, weights, strict=True)])

    failure(lesson.check_weighted_backward, scalar_weights,  # a 0-d weight for a vector
            says=["raised an exception", "RuntimeError"])

    def ignores_weights(outputs, weights):
        torch.autograd.backward(outputs, [torch.ones_like(o) for o in outputs])

    failure(lesson.check_weighted_backward, ignores_weights, says=["a.grad after", "the values differ"])

    def clears_first(outputs, weights):
        for leaf in _leaves_of(outputs):
            leaf.grad = None
        _weighted(outputs, weights)

    failure(lesson.check_weighted_backward, clears_first,
            says=["a.grad", "held a gradient", "the values differ"])

    def one_backward_each_freeing(outputs, weights):
        for o, v in zip(outputs, _vectors(outputs, weights), strict=True):
            o.backward(v)

    failure(lesson.check_weighted_backward, one_backward_each_freeing,
            says=["raised", "backward through the graph a second time"])


def _leaves_of(outputs):
    found, stack, seen = [], [o.grad_fn for o in outputs], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            found.append(node.variable)
        stack += [next_node for next_node, _ in node.next_functions]
    return found


def test_weighted_backward_shortcuts_pass_the_values_but_not_the_spy():
    lesson.check_weighted_backward(_summed_loss)
    lesson.check_weighted_backward(_one_backward_each)
    original = torch.autograd._engine_run_backward
    failure(lesson.check_weighted_backward_one_entry, _summed_loss,
            says=["where the engine started", "got: 1 tensors, 0 of them outputs"])
    failure(lesson.check_weighted_backward_one_entry, _one_backward_each,
            says=["entries into the engine", "got: 3 entries"])  # Tensor.backward seen, once per output

    def through_grad(outputs, weights):
        leaves = _leaves_of(outputs)
        gradients = torch.autograd.grad(outputs, leaves, _vectors(outputs, weights))
        for leaf, gradient in zip(leaves, gradients, strict=True):
            leaf.grad = gradient if leaf.grad is None else leaf.grad + gradient

    lesson.check_weighted_backward(through_grad)
    failure(lesson.check_weighted_backward_one_entry, through_grad,  # autograd.grad seen, not accumulating
            says=["the engine's mode", "expected: an entry that accumulates into .grad",
                  "got: an entry that returns the gradients and leaves .grad alone"])
    assert torch.autograd._engine_run_backward is original  # the spy is gone after each check


def _three_outputs():
    leaf = torch.randn(4, dtype=torch.float64, requires_grad=True)
    middle = leaf.sin()
    return [middle.sum(), middle * 2, leaf.exp()]


def test_weighted_backward_one_entry_on_outputs_given():
    name = "weighted_backward(3 outputs of one leaf)"
    weights = [1, torch.ones(4, dtype=torch.float64), 0.5]
    lesson.check_weighted_backward_one_entry(_weighted, _three_outputs(), weights, name)
    failure(lesson.check_weighted_backward_one_entry, _one_backward_each, _three_outputs(), weights, name,
            says=[f"{name}: entries into the engine", "got: 3 entries"])


def _second(f, x):
    leaf = x.detach().requires_grad_(True)
    (first,) = torch.autograd.grad(f(leaf).sum(), leaf, create_graph=True)
    return torch.autograd.grad(first.sum(), leaf)[0]


def test_second_derivative():
    lesson.check_second_derivative(_second)

    def first_only(f, x):
        leaf = x.detach().requires_grad_(True)
        return torch.autograd.grad(f(leaf).sum(), leaf)[0]

    failure(lesson.check_second_derivative, first_only, says=["second_derivative(t**3", "the values differ"])

    def without_create_graph(f, x):
        leaf = x.detach().requires_grad_(True)
        (first,) = torch.autograd.grad(f(leaf).sum(), leaf)
        return torch.autograd.grad(first.sum(), leaf)[0]

    failure(lesson.check_second_derivative, without_create_graph,
            says=["raised", "does not require grad and does not have a grad_fn"])

    def marks_the_callers_x(f, x):
        x.requires_grad_(True)
        return _second(f, x)

    failure(lesson.check_second_derivative, marks_the_callers_x,
            says=["x.requires_grad", "expected: False (bool)", "got: True (bool)"])

    # the task leaves the design to the student: one element at a time is right for any shape...
    def element_by_element(f, x):
        seconds = []
        for value in x.reshape(-1):
            leaf = value.detach().clone().requires_grad_(True)
            (first,) = torch.autograd.grad(f(leaf), leaf, create_graph=True)
            seconds.append(torch.autograd.grad(first, leaf)[0])
        return torch.stack(seconds).reshape(x.shape)

    lesson.check_second_derivative(element_by_element)

    # ...but walking the first dimension only is right for one-dimensional x alone
    def along_the_first_dimension(f, x):
        return torch.stack([element_by_element(f, value.reshape(1))[0] for value in x])

    failure(lesson.check_second_derivative, along_the_first_dimension,
            says=["second_derivative(torch.sin, x (2,", "raised"])


def test_second_derivative_refuses_the_library_hessian():
    failure(lesson.check_second_derivative,
            lambda f, x: torch.autograd.functional.hessian(lambda t: f(t).sum(), x).diagonal(),
            says=["torch.autograd.functional.hessian is not available in this exercise"])
    failure(lesson.check_second_derivative,
            lambda f, x: torch.func.hessian(lambda t: f(t).sum())(x).diagonal(),
            says=["torch.func.hessian is not available in this exercise"])
    # grad of grad, one element at a time: two derivatives with no create_graph at all
    failure(lesson.check_second_derivative,
            lambda f, x: torch.func.vmap(torch.func.grad(torch.func.grad(lambda t: f(t.unsqueeze(0))[0])))(x),
            says=["torch.func.grad is not available in this exercise"])


def _sgd(params, lr):
    with torch.no_grad():
        for param in params:
            if param.grad is not None:
                param.sub_(lr * param.grad)
                param.grad = None


def test_sgd_step():
    lesson.check_sgd_step(_sgd)

    def keeps_the_gradient(params, lr):
        with torch.no_grad():
            for param in params:
                if param.grad is not None:
                    param.sub_(lr * param.grad)

    failure(lesson.check_sgd_step, keeps_the_gradient, says=["the old gradient still there"])

    def rebinds(params, lr):
        for i, param in enumerate(params):
            if param.grad is not None:
                params[i] = (param - lr * param.grad).detach().requires_grad_(True)

    failure(lesson.check_sgd_step, rebinds, says=["another tensor"])

    def outside_no_grad(params, lr):
        for param in params:
            if param.grad is not None:
                param.sub_(lr * param.grad)

    failure(lesson.check_sgd_step, outside_no_grad, says=["raised", "leaf Variable that requires grad"])

    def touches_every_param(params, lr):
        with torch.no_grad():
            for param in params:
                param.sub_(lr * (param.grad if param.grad is not None else torch.ones_like(param)))
                param.grad = None

    failure(lesson.check_sgd_step, touches_every_param, says=["params[2] after", "the values differ"])


def _freeze(model):
    with_params = [layer for layer in model.children() if list(layer.parameters())]
    model.requires_grad_(False)
    with_params[-1].requires_grad_(True)
    return sum(param.numel() for param in with_params[-1].parameters())


def test_freeze_all_but_last_and_its_count():
    lesson.check_freeze_all_but_last(_freeze)
    lesson.check_trainable_count(_freeze)

    def last_child(model):
        model.requires_grad_(False)
        list(model.children())[-1].requires_grad_(True)
        return 0

    failure(lesson.check_freeze_all_but_last, last_child,  # the last child, a Tanh, has no parameters
            says=["requires_grad of every parameter", "ending in Tanh",
                  "got: [False, False, False, False, False, False]"])

    def forgets_to_unfreeze(model):  # right only when the last layer was trainable already
        with_params = [layer for layer in model.children() if list(layer.parameters())]
        for layer in with_params[:-1]:
            layer.requires_grad_(False)
        return 0

    failure(lesson.check_freeze_all_but_last, forgets_to_unfreeze,
            says=["requires_grad of every parameter", "all frozen",
                  "got: [False, False, False, False, False, False]"])
    message = failure(lesson.check_trainable_count, lambda model: _freeze(model) + 1,
                      says=["freeze_all_but_last(Sequential with widths", "is not right"])
    expected, got = (int(re.search(rf"{part}: (\d+) \(int\)", message)[1]) for part in ("expected", "got"))
    assert got == expected + 1, message
    failure(lesson.check_trainable_count, lambda model: float(_freeze(model)), says=["(int)", "(float)"])


def _compound(x, rate, limit):
    steps = 0
    result = x
    while result < limit:
        result = result * (1 + rate)
        steps += 1
    return result, steps


def test_compound_value_and_grads():
    lesson.check_compound_value(_compound)
    lesson.check_compound_grads(_compound)

    def one_too_many(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return result * (1 + rate), steps + 1

    failure(lesson.check_compound_value, one_too_many,
            says=["compound(100, 0.1, 150.0)[1]", "expected: 5 (int)", "got: 6 (int)"])

    def through_floats(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return torch.tensor(result.item(), dtype=torch.float64), steps

    lesson.check_compound_value(through_floats)  # the value is right...
    failure(lesson.check_compound_grads, through_floats, says=["disconnected from the graph"])

    def tensor_steps(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return result, torch.tensor(steps)

    failure(lesson.check_compound_value, tensor_steps, says=["expected: 5 (int)", "got: tensor(shape=()"])
    failure(lesson.check_compound_value, lambda x, rate, limit: _compound(x, rate, limit)[0],
            says=["the type is not the expected one", "expected: tuple"])


def test_the_loop_rules_catch_a_loop_that_stops_early():
    def stops_early(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return (result / (1 + rate), steps - 1) if steps > 1 else (result, steps)

    failure(lesson.check_compound_value, stops_early,
            says=["compound(100, 0.1, 150.0)[1]", "expected: 5 (int)", "got: 4 (int)"])


class ClippedIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, low, high):
        ctx.save_for_backward(((x >= low) & (x <= high)).to(x.dtype))
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.saved_tensors[0], None, None


class ClippedIdentityStraightThrough(ClippedIdentity):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None


class ClippedIdentityClampsBelow(ClippedIdentity):
    @staticmethod
    def forward(ctx, x, low, high):
        ctx.save_for_backward(((x >= low) & (x <= high)).to(x.dtype))
        return x.clamp(min=low)


def test_clipped_identity():
    lesson.check_clipped_identity_forward(ClippedIdentity)
    lesson.check_clipped_identity_backward(ClippedIdentity)
    failure(lesson.check_clipped_identity_forward, ClippedIdentityClampsBelow,
            says=["x above", "the values differ"])
    failure(lesson.check_clipped_identity_backward, ClippedIdentityStraightThrough,
            says=["x.grad after", "x below", "the values differ"])

    class Plain:
        apply = staticmethod(lambda x, low, high: x.clamp(low, high))

    failure(lesson.check_clipped_identity_forward, Plain, says=["expected: a ClippedIdentity grad_fn"])


def test_clipped_backward_on_points_given():
    upstream = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
    lesson.check_clipped_backward(ClippedIdentity, _X, -1.0, 1.0, upstream, "clip(x, -1, 1)")
    failure(lesson.check_clipped_backward, ClippedIdentityStraightThrough, _X, -1.0, 1.0, upstream,
            "clip(x, -1, 1)", says=["x.grad after clip(x, -1, 1), x below", "the values differ"])


def by_hand(x, targets, w1, b1, w2, b2, mask=True, mean=True):
    """The backward pass of x → Linear → ReLU → Linear → mean cross-entropy; ``mask`` and ``mean``
    off make the two classic mistakes (the ReLU passes every gradient; the sum instead of the mean)."""
    z1 = torch.addmm(b1, x, w1.T)
    a1 = z1.clamp(min=0)
    logits = torch.addmm(b2, a1, w2.T)
    grad_logits = logits.softmax(dim=1)
    grad_logits[torch.arange(len(targets)), targets] -= 1
    grad_logits = grad_logits / len(targets) if mean else grad_logits
    grad_a1 = grad_logits @ w2
    grad_z1 = grad_a1 * (z1 > 0) if mask else grad_a1
    return grad_z1.T @ x, grad_z1.sum(dim=0), grad_logits.T @ a1, grad_logits.sum(dim=0)


_MANUAL_CHECKS = [lesson.check_manual_backward_output, lesson.check_manual_backward_hidden,
                  lesson.check_manual_backward_edge_cases]


def test_manual_backward():
    for check in _MANUAL_CHECKS:
        check(by_hand)
        check(lambda *args: list(by_hand(*args)))  # a list is a right answer too


def test_network_case_has_live_and_dead_units():
    generator = torch.Generator().manual_seed(3)
    case = lesson.network_case(generator, (7, 4, 6, 3), dead=2)
    assert [tuple(case[name].shape) for name in ("x", "targets", "w1", "b1", "w2", "b2")] == \
        [(7, 4), (7,), (6, 4), (6,), (3, 6), (3,)]
    assert not any(value.requires_grad for value in case.values())
    z1 = case["x"] @ case["w1"].T + case["b1"]
    assert (z1[:, :2] < 0).all()
    live = z1[:, 2:]
    assert (live > 0).any() and (live < 0).any()
    expected = lesson.autograd_gradients(case)
    assert (expected[0][:2] == 0).all() and (expected[1][:2] == 0).all()  # dead units: no gradient
    assert expected[0][2:].abs().sum() > 0


def test_manual_backward_catches_typical_mistakes():
    def no_mask(*args):
        return by_hand(*args, mask=False)

    lesson.check_manual_backward_output(no_mask)  # the output layer is right without the mask...
    failure(lesson.check_manual_backward_hidden, no_mask,
            says=["manual_backward(x (", "the gradient for w1", "the values differ",
                  "hint('manual_backward')"])
    failure(lesson.check_manual_backward_edge_cases, no_mask,
            says=["a batch of one example", "the values differ"])
    for check in _MANUAL_CHECKS:  # the sum instead of the mean: wrong everywhere but for one example
        failure(check, lambda *args: by_hand(*args, mean=False), says=["the values differ"])

    def transposed(*args):
        grad_w1, grad_b1, grad_w2, grad_b2 = by_hand(*args)
        return grad_w1, grad_b1, grad_w2.T, grad_b2

    rectangular = lesson.network_case(torch.Generator().manual_seed(0), (4, 3, 5, 2))  # w2 (2, 5)
    failure(lesson.check_manual_backward_case, transposed, rectangular, ("w2", "b2"),
            says=["the gradient for w2", "the shape is not the expected one"])
    failure(lesson.check_manual_backward_output, lambda *args: by_hand(*args)[::-1],
            says=["the gradient for w2", "the shape is not the expected one"])
    failure(lesson.check_manual_backward_hidden, lambda *args: (by_hand(*args)[0], by_hand(*args)[1][None]),
            says=["len(manual_backward(", "expected: 4 (int)", "got: 2 (int)"])
    failure(lesson.check_manual_backward_hidden, lambda *args: [g.float() for g in by_hand(*args)],
            says=["the gradient for w1", "expected: torch.float64", "got: torch.float32"])
    failure(lesson.check_manual_backward_output, lambda *args: {"w2": by_hand(*args)[2]},
            says=["the type is not the expected one", "tuple | list"])


def test_manual_backward_must_leave_its_inputs_alone():
    def clamps_x_afterwards(x, *args):
        gradients = by_hand(x, *args)
        x.clamp_(min=0)
        return gradients

    lesson.check_manual_backward_output(clamps_x_afterwards)
    failure(lesson.check_manual_backward_edge_cases, clamps_x_afterwards,
            says=["x after manual_backward(", "the input modified"])


def _through_autograd(x, targets, *parameters):
    leaves = [p.detach().clone().requires_grad_(True) for p in parameters]
    with torch.enable_grad():
        hidden = torch.relu(x @ leaves[0].T + leaves[1])
        loss = torch.nn.functional.cross_entropy(hidden @ leaves[2].T + leaves[3], targets)
        return loss, leaves


def _with_backward(*args):
    loss, leaves = _through_autograd(*args)
    loss.backward()
    return tuple(leaf.grad for leaf in leaves)


def _with_autograd_grad(*args):
    return torch.autograd.grad(*_through_autograd(*args))


def _with_func_grad(x, targets, *parameters):
    def loss(*ps):
        return torch.nn.functional.cross_entropy(torch.relu(x @ ps[0].T + ps[1]) @ ps[2].T + ps[3], targets)
    return torch.func.grad(loss, argnums=(0, 1, 2, 3))(*parameters)


def _with_functional_jacobian_forward(x, targets, *parameters):
    def loss(*ps):
        return torch.nn.functional.cross_entropy(torch.relu(x @ ps[0].T + ps[1]) @ ps[2].T + ps[3], targets)
    with torch.enable_grad():
        return torch.autograd.functional.jacobian(loss, parameters, vectorize=True, strategy="forward-mode")


@pytest.mark.parametrize("answer, refused", [
    (_with_backward, "Tensor.backward is not available in this exercise"),
    (_with_autograd_grad, "torch.autograd.grad is not available in this exercise"),
    (_with_func_grad, "torch.func.grad is not available in this exercise"),
    (lambda x, targets, *ps: torch.func.vjp(lambda w: w.sum(), ps[0]), "torch.func.vjp is not available"),
    (_with_functional_jacobian_forward, "torch.autograd.forward_ad.make_dual is not available"),
])
def test_manual_backward_switches_autograd_off_and_says_why(answer, refused):
    assert _with_backward(*_call_args()) is not None  # each works with autograd on
    for check in _MANUAL_CHECKS:
        failure(check, answer,
                says=["ShortcutUsed", refused, "autograd is switched off while your function runs"])
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()  # back on after the checks
    assert x.grad.item() == 4.0


def _call_args():
    case = lesson.network_case(torch.Generator().manual_seed(8))
    return case["x"], case["targets"], *(case[name] for name in lesson.PARAMETERS)


def test_manual_backward_runs_without_gradients_on_fresh_sizes():
    seen = []

    def spy(*args):
        seen.append((torch.is_grad_enabled(), [arg.requires_grad for arg in args], tuple(args[0].shape)))
        return by_hand(*args)

    for _ in range(4):
        lesson.check_manual_backward_output(spy)
    lesson.check_manual_backward_edge_cases(spy)
    assert all(enabled is False and not any(flags) for enabled, flags, _ in seen), seen
    assert len({shape for *_, shape in seen[:4]}) > 1, "every run draws a network of its own sizes"
    assert seen[4][2][0] == 1, "the edge cases start with a batch of one example"


def test_manual_backward_checks_leave_the_random_state_alone():
    def draws(*args):
        torch.rand(3)
        return by_hand(*args)

    torch.manual_seed(7)
    before = torch.get_rng_state()
    for check in _MANUAL_CHECKS:
        check(draws)
    assert torch.equal(torch.get_rng_state(), before)


def test_manual_backward_speaks_spanish():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_manual_backward_output(_with_backward)
    message = str(caught.value)
    for part in ("esperado:", "obtenido:", "no está disponible", "autograd está apagado", "sección 12",
                 "hint('manual_backward')"):
        assert part in message, message


def test_concepts(monkeypatch):
    """The visible part of the concept questions: ANSWERS answers the student's draw, each answer in
    its form (None for one left unanswered); it never says whether an answer is right."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    drawn = questions.draw(lesson.__name__, "ana")
    lesson.check_concepts(dict.fromkeys(drawn), "ana")
    in_form = {"shape": (1,), "int": 0, "float": 0.5, "dtype": torch.float16, "choice": "a"}
    pool = questions.pool(lesson.__name__).questions
    lesson.check_concepts({qid: in_form[pool[qid].kind] for qid in drawn}, "ana")
    failure(lesson.check_concepts, dict.fromkeys(drawn[1:]), "ana",
            says=["ANSWERS", "lacks questions of your draw", drawn[0]])
    failure(lesson.check_concepts, {**dict.fromkeys(drawn), drawn[0]: "yes"}, "ana",
            says=[f"ANSWERS['{drawn[0]}']", "not in the form asked for"])
    failure(lesson.check_concepts, [], "ana", says=["ANSWERS", "dict"])


def test_messages_and_hints_follow_the_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_finite_difference_grad(through_autograd)
    message = str(caught.value)
    for part in ("esperado:", "obtenido:", "pista:", "no está disponible", "sección 3",
                 "hint('finite_difference_grad')"):
        assert part in message, message


def test_the_engine_checks_speak_spanish():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_weighted_backward_one_entry(_one_backward_each)
    message = str(caught.value)
    for part in ("esperado: una sola entrada al motor", "obtenido: 3 entradas", "sección 6",
                 "hint('weighted_backward')"):
        assert part in message, message


# ------------------------------------------------------------------------------ decided by the judge
def _judged(**answers) -> dict:
    """Each judged cell's score, through the wire, for a kernel holding the reference's answers with
    ``answers`` in place of some: what the class's grader decides from the data alone."""
    lesson_name = "02_autograd"
    judged = calls.judged(lesson_name)
    cells = tuple(dict.fromkeys(cell for call in judged for cell in calls.answer_cells(call)))
    namespace = {**calls.reference_namespace(read_solution(lesson_name), cells), **answers}
    exec(wire.probe([], calls.probe_calls(lesson_name, "term")), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in judged}
    return calls.cell_scores(lesson_name, "term", solution_path(lesson_name), returned, points)


def _lost(**answers) -> list[str]:
    return sorted(cell for cell, score in _judged(**answers).items() if score == 0)


def test_every_grade_cell_is_judged():
    assert calls.coverage("02_autograd")[2] == []


def _expanded(outputs, weights):  # a weight as a view of the output's shape, one entry
    torch.autograd.backward(outputs, [torch.as_tensor(w, dtype=o.dtype).expand_as(o)
                                      for o, w in zip(outputs, weights, strict=True)])


def _second_with_ones(f, x):
    leaf = x.detach().clone().requires_grad_(True)
    (first,) = torch.autograd.grad(f(leaf), leaf, torch.ones_like(leaf), create_graph=True)
    (second,) = torch.autograd.grad(first, leaf, torch.ones_like(leaf))
    return second


def _sgd_zeroing(params, lr):
    for param in params:
        if param.grad is not None:
            param.data.add_(param.grad, alpha=-lr)
            param.grad.zero_()


def _closed_form(x, rate, limit):
    steps = 0
    while (x * (1 + rate) ** steps).item() < limit:
        steps += 1
    return x * (1 + rate) ** steps, steps


def test_right_answers_written_another_way_keep_every_judged_cell():
    assert _lost() == []
    assert _lost(finite_difference_grad=central_differences, predicted_grad=lambda a, b, x0: b + 4 * a * x0,
                 weighted_backward=_expanded, second_derivative=_second_with_ones, sgd_step=_sgd_zeroing,
                 freeze_all_but_last=_freeze, compound=_closed_form, ClippedIdentity=ClippedIdentity,
                 manual_backward=lambda *args: list(by_hand(*args)), Value=MicroValue,
                 mlp=_in_a_notebook(_ANOTHER_MLP, Value=MicroValue)["mlp"]) == []


_ANOTHER_MLP = """
def mlp(x, layers):
    for index, (weights, biases) in enumerate(layers):
        x = [sum((w * xi for w, xi in zip(row, x)), b) for row, b in zip(weights, biases)]
        x = x if index == len(layers) - 1 else [unit.tanh() for unit in x]
    return x
"""


def test_the_judge_sees_the_finite_difference_mistakes():
    def marks_the_callers_x(f, x, eps=1e-6):
        x.requires_grad_(True)
        return central_differences(f, x.detach(), eps)

    def drifts(f, x, eps=1e-6):  # perturbs x in place and never puts it back exactly
        grad = torch.zeros_like(x)
        for i in range(x.numel()):
            x.view(-1)[i] += eps
            up = f(x)
            x.view(-1)[i] -= 2 * eps
            grad.view(-1)[i] = (up - f(x)) / (2 * eps)
        return grad

    both = ["test_finite_difference_grad", "test_finite_difference_grad_black_box"]
    assert _lost(finite_difference_grad=marks_the_callers_x) == both
    assert _lost(finite_difference_grad=drifts) == both
    assert _lost(finite_difference_grad=through_autograd) == ["test_finite_difference_grad_black_box"]
    assert _lost(finite_difference_grad=lambda f, x: central_differences(f, x).float()) == both
    assert _lost(predicted_grad=lambda a, b, x0: 2 * a * x0 + b) == ["test_predicted_grad"]


def test_the_judge_sees_how_often_the_backward_pass_ran():
    def ignores_weights(outputs, weights):
        torch.autograd.backward(outputs, [torch.ones_like(o) for o in outputs])

    # one backward pass from a single scalar: right for the judge, the kernel's spy refuses it
    assert _lost(weighted_backward=_summed_loss) == []
    assert _lost(weighted_backward=_one_backward_each) == ["test_weighted_backward_one_entry"]
    assert _lost(weighted_backward=ignores_weights) == ["test_weighted_backward",
                                                        "test_weighted_backward_one_entry"]


def test_the_judge_sees_the_second_derivative_mistakes():
    def first_only(f, x):
        leaf = x.detach().requires_grad_(True)
        return torch.autograd.grad(f(leaf).sum(), leaf)[0]

    def marks_the_callers_x(f, x):
        x.requires_grad_(True)
        return _second(f, x)

    assert _lost(second_derivative=first_only) == ["test_second_derivative"]
    assert _lost(second_derivative=marks_the_callers_x) == ["test_second_derivative"]


def test_the_judge_sees_what_sgd_step_left_behind():
    def keeps_the_gradient(params, lr):
        with torch.no_grad():
            for param in params:
                if param.grad is not None:
                    param.sub_(lr * param.grad)

    def rebinds(params, lr):
        for i, param in enumerate(params):
            if param.grad is not None:
                params[i] = (param - lr * param.grad).detach().requires_grad_(True)

    def touches_every_param(params, lr):
        with torch.no_grad():
            for param in params:
                param.sub_(lr * (param.grad if param.grad is not None else torch.ones_like(param)))
                param.grad = None

    for wrong in (keeps_the_gradient, rebinds, touches_every_param):
        assert _lost(sgd_step=wrong) == ["test_sgd_step"], wrong.__name__


def _last_with_parameters(model):
    return [layer for layer in model.children() if list(layer.parameters())][-1]


def test_the_judge_sees_the_freezing_mistakes():
    def last_child(model):  # the last child may be an activation, with no parameters
        count = _freeze(model)
        model.requires_grad_(False)
        list(model.children())[-1].requires_grad_(True)
        return count

    def forgets_to_unfreeze(model):  # right only when the last layer was trainable already
        last = _last_with_parameters(model)
        for layer in model.children():
            if layer is not last:
                layer.requires_grad_(False)
        return sum(param.numel() for param in last.parameters())

    def counts_a_bias_always(model):
        last = _last_with_parameters(model)
        _freeze(model)
        return last.in_features * last.out_features + last.out_features

    assert _lost(freeze_all_but_last=last_child) == ["test_freeze_all_but_last"]
    assert _lost(freeze_all_but_last=forgets_to_unfreeze) == ["test_freeze_all_but_last"]
    assert _lost(freeze_all_but_last=lambda model: _freeze(model) + 1) == ["test_freeze_all_but_last_count"]
    assert _lost(freeze_all_but_last=counts_a_bias_always) == ["test_freeze_all_but_last_count"]


def test_the_judge_sees_the_loop_and_its_graph():
    def one_too_many(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return result * (1 + rate), steps + 1

    def through_floats(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return torch.tensor(result.item(), dtype=torch.float64), steps

    assert _lost(compound=one_too_many) == ["test_compound_grad", "test_compound_value"]
    assert _lost(compound=through_floats) == ["test_compound_grad"]


def test_the_judge_sees_the_clipping_mistakes():
    class Plain:
        apply = staticmethod(lambda x, low, high: x.clamp(low, high))

    assert _lost(ClippedIdentity=ClippedIdentityStraightThrough) == ["test_clipped_identity_backward"]
    assert _lost(ClippedIdentity=ClippedIdentityClampsBelow) == ["test_clipped_identity_forward"]
    assert _lost(ClippedIdentity=Plain) == ["test_clipped_identity_forward"]  # clamp's own gradient is right


def test_the_judge_sees_each_layers_gradients_and_the_inputs():
    def clamps_x_afterwards(x, *args):
        gradients = by_hand(x, *args)
        x.clamp_(min=0)
        return gradients

    def transposed(*args):
        grad_w1, grad_b1, grad_w2, grad_b2 = by_hand(*args)
        return grad_w1, grad_b1, grad_w2.T, grad_b2

    assert _lost(manual_backward=clamps_x_afterwards) == ["test_manual_backward_edge_cases"]
    assert _lost(manual_backward=lambda *args: by_hand(*args, mask=False)) == [
        "test_manual_backward_edge_cases", "test_manual_backward_hidden"]  # the output layer is right
    assert _lost(manual_backward=lambda *args: by_hand(*args, mean=False)) == [
        "test_manual_backward_edge_cases", "test_manual_backward_hidden", "test_manual_backward_output"]
    assert _lost(manual_backward=transposed) == ["test_manual_backward_edge_cases",
                                                 "test_manual_backward_output"]
    # autograd turned back on inside the answer: right values; the kernel's switch refuses it
    assert _lost(manual_backward=_with_backward) == []


def test_the_outcomes_leave_the_global_random_state_alone():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    _judged()
    assert torch.equal(torch.get_rng_state(), before)


# ------------------------------------------------------------------------ an engine of your own
class MicroValue:
    """A right answer written another way: micrograd's closures and a recursive sort."""

    def __init__(self, data, _children=()):
        self.data, self.grad, self._prev, self._backward = data, 0.0, set(_children), lambda: None

    def __add__(self, other):
        other = other if isinstance(other, MicroValue) else type(self)(other)
        out = type(self)(self.data + other.data, (self, other))

        def _backward():
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, MicroValue) else type(self)(other)
        out = type(self)(self.data * other.data, (self, other))

        def _backward():
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def __pow__(self, k):
        out = type(self)(self.data ** k, (self,))

        def _backward():
            self.grad += k * self.data ** (k - 1) * out.grad
        out._backward = _backward
        return out

    def _unary(self, value, derivative):
        out = type(self)(value, (self,))

        def _backward():
            self.grad += derivative * out.grad
        out._backward = _backward
        return out

    def tanh(self):
        t = math.tanh(self.data)
        return self._unary(t, 1 - t ** 2)

    def relu(self):
        return self._unary(max(self.data, 0.0), 1.0 if self.data > 0 else 0.0)

    def exp(self):
        return self._unary(math.exp(self.data), math.exp(self.data))

    def log(self):
        return self._unary(math.log(self.data), 1 / self.data)

    def __neg__(self):
        return self * -1

    def __radd__(self, other):
        return self + other

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return other + (-self)

    def __rmul__(self, other):
        return self * other

    def __truediv__(self, other):
        return self * other ** -1

    def __rtruediv__(self, other):
        return other * self ** -1

    def backward(self, fresh_intermediates=True):
        topo, visited = [], set()

        def build_topo(v):
            if v not in visited:
                visited.add(v)
                for child in v._prev:
                    build_topo(child)
                topo.append(v)
        build_topo(self)
        for v in topo:
            if v._prev and fresh_intermediates:
                v.grad = 0.0
        self.grad = 1.0 if self._prev else self.grad + 1.0
        for v in reversed(topo):
            v._backward()


class Accumulating(MicroValue):
    """micrograd as it is: intermediate values keep adding up across backward() calls."""

    def backward(self):
        super().backward(fresh_intermediates=False)


class NaiveWalk(MicroValue):
    """Pushes as soon as the walk reaches a value, depth first, once per path: section 13's mistake."""

    def backward(self):
        def walk(v):
            v._backward()
            for child in v._prev:
                walk(child)
        self.grad = 1.0
        walk(self)


class TensorValue(MicroValue):
    """Keeps its data in a tensor: not the plain floats asked for."""

    def __init__(self, data, _children=()):
        super().__init__(torch.as_tensor(float(data), dtype=torch.float64), _children)


class ThroughTorch:
    """Hands the work to torch's own autograd: refused while the checks run it."""

    def __init__(self, data):
        self.tensor = data if isinstance(data, torch.Tensor) else \
            torch.tensor(float(data), requires_grad=True)

    data = property(lambda self: self.tensor.item())
    grad = property(lambda self: 0.0 if self.tensor.grad is None else self.tensor.grad.item())

    def __mul__(self, other):
        return ThroughTorch(self.tensor * other.tensor)

    def backward(self):
        self.tensor.backward()


def _engine_reference():
    return calls.reference_namespace(read_solution("02_autograd"), ("value_engine", "value_mlp"))


_ENGINE_CHECKS = [lesson.check_value_engine_arithmetic, lesson.check_value_engine_functions,
                  lesson.check_value_engine_shared, lesson.check_value_engine_twice]


@pytest.mark.parametrize("engine", ["reference", "micrograd"])
def test_value_engine_right_answers(engine):
    value = _engine_reference()["Value"] if engine == "reference" else MicroValue
    for check in _ENGINE_CHECKS:
        check(value)


def test_value_engine_catches_typical_mistakes():
    for check in _ENGINE_CHECKS[:3]:  # micrograd as it is: right on one backward() per graph
        check(Accumulating)
    failure(lesson.check_value_engine_twice, Accumulating,
            says=["after backward() number 2", "the values differ"])
    failure(lesson.check_value_engine_shared, NaiveWalk,
            says=["v0.grad after v4.backward() in a diamond: v0 = Value(", "the values differ"])
    failure(lesson.check_value_engine_arithmetic, TensorValue,
            says=["plain Python floats in .data and .grad"])
    failure(lesson.check_value_program, ThroughTorch, [("leaf", 0.5), ("mul", 0, 0), ("backward", 1)],
            says=["Tensor.backward is not available in this exercise", "the engine is yours"])
    wrong = defined("02_autograd", "value_engine", math=math)["Value"]
    message = failure(lesson.check_value_engine_shared, wrong, says=["v0.grad", "the values differ"])
    assert "hint('value_engine')" in message


def test_value_programs_read_as_python():
    program = [("leaf", 1.5), ("leaf", -0.5), ("num_div", 0, 3.0), ("sub_num", 2, -1.0), ("mul", 3, 1),
               ("backward", 4)]
    assert lesson.program_code(program) == ["v0 = Value(1.5)", "v1 = Value(-0.5)", "v2 = 3.0 / v0",
                                            "v3 = v2 - (-1.0)", "v4 = v3 * v1", "v4.backward()"]
    chain = dict(lesson.shared_programs(torch.Generator().manual_seed(0)))[
        "a chain 200 operations deep, v0 used at every step"]
    assert len(chain) == 203


def test_value_mlp():
    reference = _engine_reference()
    lesson.check_value_mlp_outputs(reference["mlp"], reference["Value"])
    lesson.check_value_mlp_gradients(reference["mlp"], reference["Value"])
    lesson.check_value_mlp_gradients(reference["mlp"], MicroValue)  # any right engine carries it
    wrong = defined("02_autograd", "value_mlp", math=math)["mlp"]
    for check in (lesson.check_value_mlp_outputs, lesson.check_value_mlp_gradients):
        failure(check, wrong, MicroValue, says=["mlp(x, layers) with widths", "the values differ"])
    # the input handed back: the wrong length, or, when the widths of x and the output agree, wrong values
    failure(lesson.check_value_mlp_outputs, lambda x, layers: x, MicroValue,
            says=["mlp(x, layers) with widths"])


def _in_a_notebook(source: str, **names) -> dict:
    namespace = {"math": math, **names}
    exec(source, namespace)
    return namespace


def test_the_judge_sees_the_engine_mistakes():
    assert _lost(Value=Accumulating) == ["test_value_engine_twice"]
    assert _lost(Value=TensorValue) == ["test_value_engine_arithmetic", "test_value_engine_functions",
                                        "test_value_engine_shared", "test_value_engine_twice"]
    naive = _lost(Value=NaiveWalk)
    assert "test_value_engine_shared" in naive and "test_value_engine_twice" in naive
    wrong_mlp = defined("02_autograd", "value_mlp", math=math, Value=MicroValue)["mlp"]
    assert _lost(mlp=wrong_mlp) == ["test_value_mlp_gradients", "test_value_mlp_outputs"]
