"""Lesson 02's visible checks: a correct answer passes, a typical mistake fails with expected/got/hint."""

import math

import pytest
import torch
from check_messages import failure

import course
from graders.checks import CheckFailed
from graders.lesson_checks import autograd as lesson

pytestmark = pytest.mark.usefixtures("english")


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
    failure(lesson.check_finite_difference_grad,
           lambda f, x, eps=1e-6: central_differences(f, x, eps).float(), says=["dtype"])
    failure(lesson.check_finite_difference_grad,
           lambda f, x, eps=1e-6: central_differences(f, x, eps) / 2)


def test_finite_difference_grad_refuses_autograd_and_says_why():
    message = failure(lesson.check_finite_difference_grad, through_autograd)
    assert "is switched off while your function runs" in message
    x = torch.tensor(2.0, requires_grad=True)
    (x * x).backward()  # back on after the check
    assert x.grad.item() == 4.0


def test_finite_difference_grad_sees_an_input_changed_in_place():
    def in_place(f, x, eps=1e-6):
        grad = central_differences(f, x, eps)
        x += 1
        return grad

    failure(lesson.check_finite_difference_grad, in_place, says=["the input modified"])


def test_predicted_grad():
    lesson.check_predicted_grad(lambda a, b, x0: b + 4 * a * x0)
    failure(lesson.check_predicted_grad, lambda a, b, x0: 2 * a * x0 + b)  # forgot one backward
    failure(lesson.check_predicted_grad, lambda a, b, x0: b)  # thought the forward pass reset it
    message = failure(lesson.check_predicted_grad,
                     lambda a, b, x0: lesson.gradient_after_snippet(a, b, x0))
    assert "switched off" in message


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
           says=["raised"])  # no weights: a vector output has no implicit gradient

    def scalar_weights(outputs, weights):
        torch.autograd.backward(outputs, [torch.as_tensor(w, dtype=o.dtype)
                                          for o, w in zip(outputs, weights, strict=True)])

    failure(lesson.check_weighted_backward, scalar_weights, says=["raised"])  # a 0-d weight for a vector

    def ignores_weights(outputs, weights):
        torch.autograd.backward(outputs, [torch.ones_like(o) for o in outputs])

    failure(lesson.check_weighted_backward, ignores_weights, says=["a.grad"])

    def clears_first(outputs, weights):
        for leaf in _leaves_of(outputs):
            leaf.grad = None
        _weighted(outputs, weights)

    failure(lesson.check_weighted_backward, clears_first, says=["a.grad", "held a gradient"])

    def one_backward_each_freeing(outputs, weights):
        for o, v in zip(outputs, _vectors(outputs, weights), strict=True):
            o.backward(v)

    failure(lesson.check_weighted_backward, one_backward_each_freeing, says=["raised"])


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
    failure(lesson.check_weighted_backward_one_entry, _summed_loss, says=["where the engine started"])
    message = failure(lesson.check_weighted_backward_one_entry, _one_backward_each,
                      says=["entries into the engine"])
    assert "3 entries" in message

    def through_grad(outputs, weights):
        leaves = _leaves_of(outputs)
        gradients = torch.autograd.grad(outputs, leaves, _vectors(outputs, weights))
        for leaf, gradient in zip(leaves, gradients, strict=True):
            leaf.grad = gradient if leaf.grad is None else leaf.grad + gradient

    lesson.check_weighted_backward(through_grad)
    failure(lesson.check_weighted_backward_one_entry, through_grad,
           says=["the engine's mode", "an entry that accumulates into .grad"])


def test_engine_spy_sees_every_way_in_and_leaves_the_engine_as_it_was():
    x = torch.tensor(2.0, requires_grad=True)
    original = torch.autograd._engine_run_backward
    with lesson.engine_spy() as entries:
        y = x ** 3
        y.backward(retain_graph=True)
        torch.autograd.backward([y], retain_graph=True)
        torch.autograd.grad(y, x)
    assert torch.autograd._engine_run_backward is original
    assert [entry["accumulate"] for entry in entries] == [True, True, False]
    assert all(entry["roots"][0] is y for entry in entries)
    assert x.grad.item() == 24.0


def test_weighted_case_is_worked_out_right():
    case = lesson.weighted_case(torch.Generator().manual_seed(0))
    a, b, _ = case["leaves"]
    before = a.grad.clone()
    summed = sum((torch.as_tensor(w, dtype=torch.float64) * o).sum()
                 for o, w in zip(case["outputs"], case["weights"], strict=True))
    grad_a, grad_b = torch.autograd.grad(summed, [a, b])
    torch.testing.assert_close(before + grad_a, case["expected"][0])
    torch.testing.assert_close(grad_b, case["expected"][1])


def _second(f, x):
    leaf = x.detach().requires_grad_(True)
    (first,) = torch.autograd.grad(f(leaf).sum(), leaf, create_graph=True)
    return torch.autograd.grad(first.sum(), leaf)[0]


def test_second_derivative():
    lesson.check_second_derivative(_second)

    def first_only(f, x):
        leaf = x.detach().requires_grad_(True)
        return torch.autograd.grad(f(leaf).sum(), leaf)[0]

    failure(lesson.check_second_derivative, first_only)

    def without_create_graph(f, x):
        leaf = x.detach().requires_grad_(True)
        (first,) = torch.autograd.grad(f(leaf).sum(), leaf)
        return torch.autograd.grad(first.sum(), leaf)[0]

    failure(lesson.check_second_derivative, without_create_graph, says=["raised"])

    def marks_the_callers_x(f, x):
        x.requires_grad_(True)
        return _second(f, x)

    failure(lesson.check_second_derivative, marks_the_callers_x, says=["the input modified"])


def test_second_derivative_refuses_the_library_hessian():
    message = failure(lesson.check_second_derivative,
                     lambda f, x: torch.autograd.functional.hessian(lambda t: f(t).sum(), x).diagonal())
    assert "torch.autograd.functional.hessian is switched off" in message


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

    failure(lesson.check_sgd_step, outside_no_grad, says=["raised"])

    def touches_every_param(params, lr):
        with torch.no_grad():
            for param in params:
                param.sub_(lr * (param.grad if param.grad is not None else torch.ones_like(param)))
                param.grad = None

    failure(lesson.check_sgd_step, touches_every_param, says=["params[2]"])


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

    failure(lesson.check_freeze_all_but_last, last_child, says=["requires_grad of every parameter"])

    def forgets_to_unfreeze(model):  # right only when the last layer was trainable already
        with_params = [layer for layer in model.children() if list(layer.parameters())]
        for layer in with_params[:-1]:
            layer.requires_grad_(False)
        return 0

    failure(lesson.check_freeze_all_but_last, forgets_to_unfreeze, says=["all frozen"])
    failure(lesson.check_trainable_count, lambda model: _freeze(model) + 1)
    failure(lesson.check_trainable_count, lambda model: float(_freeze(model)), says=["float"])


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

    failure(lesson.check_compound_value, one_too_many, says=["[1]", "expected: 5"])

    def through_floats(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return torch.tensor(result.item(), dtype=torch.float64), steps

    lesson.check_compound_value(through_floats)  # the value is right...
    failure(lesson.check_compound_grads, through_floats, says=["disconnected from the graph"])

    def tensor_steps(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return result, torch.tensor(steps)

    failure(lesson.check_compound_value, tensor_steps, says=["int"])
    failure(lesson.check_compound_value, lambda x, rate, limit: _compound(x, rate, limit)[0],
           says=["tuple"])


def test_the_loop_rules_catch_a_loop_that_stops_early():
    def stops_early(x, rate, limit):
        result, steps = _compound(x, rate, limit)
        return (result / (1 + rate), steps - 1) if steps > 1 else (result, steps)

    message = failure(lesson.check_compound_value, stops_early)
    assert "compound(100, 0.1, 150.0)" in message


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
    failure(lesson.check_clipped_identity_forward, ClippedIdentityClampsBelow, says=["x above"])
    failure(lesson.check_clipped_identity_backward, ClippedIdentityStraightThrough, says=["x.grad after"])

    class Plain:
        apply = staticmethod(lambda x, low, high: x.clamp(low, high))

    failure(lesson.check_clipped_identity_forward, Plain, says=["ClippedIdentity grad_fn"])


def test_black_box_hides_its_graph():
    x = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    value = lesson.black_box(2.0)(x)
    assert not value.requires_grad
    assert value.item() == pytest.approx(2 * (math.sin(0.5) + math.sin(1.0)))


def test_messages_and_hints_follow_the_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_finite_difference_grad(through_autograd)
    message = str(caught.value)
    for part in ("esperado:", "obtenido:", "pista:", "está desactivado", "sección 3",
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
