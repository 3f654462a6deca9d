"""Lesson 05 (debugging lab): the spies, recorders and visible checks its grade cells call.

The checks watch what a student's function does instead of redoing it: a :class:`_Trace` collects
the forward passes of a :class:`_RecordingModel`, its backward passes (hooks on the parameters,
which run before the gradient is added to ``.grad``: a pass onto stale gradients shows) and the
gradients each update of a ``checks.SpySGD`` used. While an answer that is a loop runs,
``course.training``'s loops are switched off (``SHORTCUTS``). Hidden tests compare with reference
implementations that live in the grade cells.
"""

import contextlib
import copy
import functools
import gc
import math
import sys
import warnings
import weakref
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from course import training
from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = ["HINTS", "MORE_HINTS", "check_binary_classifier_learns", "check_binary_predict_proba",
           "check_block", "check_concepts", "check_diagnose_lr_too_high", "check_diagnose_vanishing",
           "check_epoch_outputs", "check_epoch_steps", "check_fault_names", "check_first_bad_step_by_hand",
           "check_first_bad_step_on_training", "check_first_bad_step_scripted",
           "check_fit_regressor_epochs", "check_fit_regressor_one_batch", "check_fit_regressor_one_epoch",
           "check_layer_statistics_backward", "check_layer_statistics_forward",
           "check_layer_statistics_update", "check_like_reference", "check_logits_on_model_device",
           "check_lr_range_test_restores", "check_lr_range_test_steps", "check_overfit_one_batch_fits",
           "check_overfit_one_batch_losses", "check_probe_step_returns", "check_probe_step_update",
           "check_regression_loss", "check_regression_loss_by_hand", "check_residual_by_hand",
           "check_train_and_evaluate_epochs", "check_train_and_evaluate_one_step",
           "check_train_and_evaluate_returned", "classification_batch", "epoch_losses_as_step",
           "grade_concepts", "grade_fault_named", "grads_of", "mlp", "show_fault_kinds", "show_questions"]

# ------------------------------------------------------------------------------------------- hints
HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# --------------------------------------------------------------------------- course loops switched off
# These exercises ask for the loop itself: course.training's loops are off while an answer runs, in
# every check that runs one.
_COURSE_LOOPS = [(training, name) for name in ("run_epoch", "fit_model", "predict", "progress")]
SHORTCUTS = dict.fromkeys(["check_probe_step_update", "check_probe_step_returns", "check_like_reference",
                           "check_epoch_steps", "check_epoch_outputs"], _COURSE_LOOPS)
_LOOPS_OFF = checks.both("en este ejercicio el bucle lo escribes tú: {name} no está disponible",
                         "in this exercise you write the loop yourself: {name} is unavailable")


def _run(check: str, answer, *args, name, hint):
    """``answer(*args)`` with the loops of ``check`` off; an exception is reported as a failure."""
    __tracebackhide__ = True
    return checks.run_answer(answer, *args, name=name, hint=hint, shortcuts=SHORTCUTS[check],
                             message=_LOOPS_OFF)


# ------------------------------------------------------------------------------------ tiny data
def classification_batch(n: int, n_in: int, n_classes: int, generator, scale: float = 1.0):
    """Random inputs and labels: a batch no answer can know in advance."""
    return (scale * torch.randn(n, n_in, generator=generator),
            torch.randint(0, n_classes, (n,), generator=generator))


def mlp(n_in: int, n_hidden: int, n_out: int, *, batchnorm=False, dropout=0.0, activation=nn.ReLU):
    """A small classifier, optionally with BatchNorm and Dropout (the layers whose mode matters)."""
    layers = [nn.Linear(n_in, n_hidden)]
    layers += [nn.BatchNorm1d(n_hidden)] if batchnorm else []
    layers += [activation()]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers, nn.Linear(n_hidden, n_out))


def _leave_old_gradients(model, value: float = 0.5) -> None:
    """Fill ``.grad`` as an earlier step would have left it."""
    for param in model.parameters():
        param.grad = torch.full_like(param, value)


@torch.no_grad()
def _eval_outputs(model, x):
    """What the model gives in evaluation mode, computed on a copy (the original is not touched)."""
    return copy.deepcopy(model).train(False)(x)


# -------------------------------------------------------------------------- the trace and its spies
_EVENTS = {
    "forward": checks.both("pasada hacia delante (modo entrenamiento)", "forward pass (training mode)"),
    "forward in eval": checks.both("pasada hacia delante (modo evaluación)",
                                   "forward pass (evaluation mode)"),
    "no graph": checks.both("sin grafo", "no graph"),
    "backward": checks.both("pasada hacia atrás", "backward pass"),
    "stale backward": checks.both("pasada hacia atrás sobre gradientes viejos en .grad",
                                  "backward pass onto old gradients in .grad"),
    "step": checks.both("step() del optimizador", "optimizer step()"),
}


def _describe_events(events) -> str:
    def one(event):
        kind, _, graph = event.partition("+")
        return checks.say(_EVENTS[kind]) + (f", {checks.say(_EVENTS[graph])}" if graph else "")

    return " → ".join(one(event) for event in events) or "-"


class _Trace:
    """What a training step did, in order, and the gradients each optimizer step used."""

    def __init__(self):
        self.events = []
        self.seen = []         # for each optimizer step: the gradients it used

    def clear(self):
        self.__init__()

    def forward(self, training: bool):
        mode = "forward" if training else "forward in eval"
        self.events.append(mode if torch.is_grad_enabled() else f"{mode}+no graph")

    def gradient(self, param):
        """Called before a gradient is added to ``param.grad``: the first one opens a backward pass."""
        if not self.events or self.events[-1] not in ("backward", "stale backward"):
            stale = param.grad is not None and bool(param.grad.ne(0).any())
            self.events.append("stale backward" if stale else "backward")

    def step(self, grads):
        self.events.append("step")
        self.seen.append(grads)


class _RecordingModel(nn.Module):
    """A model that writes down each forward pass: its mode and whether it builds a graph."""

    def __init__(self, inner, trace):
        super().__init__()
        self.inner = inner
        self.trace = trace

    def forward(self, x):
        output = self.inner(x)
        self.trace.forward(self.training)
        return output


@contextlib.contextmanager
def _watching_gradients(model, trace):
    """Hooks on every parameter that tell ``trace`` when backward delivers a gradient, and onto what."""
    handles = [param.register_hook(lambda grad, param=param: trace.gradient(param))
               for param in model.parameters()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _spied_setup(inner, lr, *, old_gradients=True):
    """A recording model around ``inner``, a spy SGD over it, and their shared trace."""
    trace = _Trace()
    model = _RecordingModel(inner, trace)
    if old_gradients:
        _leave_old_gradients(model)
    optimizer = checks.SpySGD(model.parameters(), lr, on_step=lambda record: trace.step(record.grads))
    return model, optimizer, trace


def _call_step(check, function, model, batch, optimizer, trace, name, exercise, *extra):
    """One call of a student's step under watch, with the loops of ``check`` off; what it returned."""
    __tracebackhide__ = True
    trace.clear()
    with _watching_gradients(model, trace):
        return _run(check, function, model, batch, optimizer, *extra, name=name, hint=HINTS[exercise])


# ------------------------------------------------------------------------- what the checks compare
def _check_step_used(trace, model, expected_grads, call, exercise) -> None:
    """The optimizer's update used exactly ``expected_grads`` (one per parameter)."""
    used = zip(model.named_parameters(), trace.seen[0], expected_grads, strict=False)
    for (key, _), seen, expected in used:
        checks.check_close(seen, expected, hint=HINTS[exercise],
                           name=checks.both(f"gradiente de {key} que usó step() [llamada {call}]",
                                            f"gradient of {key} that step() used [call {call}]"))


# ------------------------------------------------------------------- exercise 1: step_with_probe
def _probe_case(seed, n_in, n_classes):
    """A training batch and a held-out one, of other sizes and scale."""
    g = checks.seeded_generator(seed)
    return (classification_batch(12, n_in, n_classes, g),
            classification_batch(6, n_in, n_classes, g, scale=2.0))


def _gradients_at(model, batch):
    """The cross-entropy's gradient of each parameter on ``batch``, at the weights of a copy of
    ``model`` (nothing reaches the original's ``.grad``)."""
    twin = copy.deepcopy(model)
    x, y = batch
    return torch.autograd.grad(F.cross_entropy(twin(x), y), list(twin.parameters()))


def _total_norm(grads) -> float:
    return torch.linalg.vector_norm(torch.cat([grad.flatten() for grad in grads])).item()


def _probe_name(n_in, n_classes, call):
    return f"step_with_probe(MLP {n_in}-8-{n_classes}, batch, optimizer, probe) [call {call}]"


@checks.keeps_random_state
def check_probe_step_update(step_with_probe, seed=501, n_in=3, n_classes=3, calls=2):
    """Calls with old gradients in ``.grad``: one step() per call, which uses the training batch's
    gradient at the weights the call found, and nothing of the probe's."""
    batch, probe = _probe_case(seed, n_in, n_classes)
    model, optimizer, trace = _spied_setup(mlp(n_in, 8, n_classes), lr=0.1)
    hint = HINTS["step_with_probe"]
    for call in range(1, calls + 1):
        name = _probe_name(n_in, n_classes, call)
        expected = _gradients_at(model.inner, batch)
        _call_step("check_probe_step_update", step_with_probe, model, batch, optimizer, trace, name,
                   "step_with_probe", probe)
        checks.check_equal(len(trace.seen), 1, hint=hint,
                           name=checks.both(f"llamadas a step() [{name}]", f"calls to step() [{name}]"))
        _check_step_used(trace, model, expected, call, "step_with_probe")


@checks.keeps_random_state
def check_probe_step_returns(step_with_probe, seed=502, n_in=4, n_classes=5, calls=2):
    """Each call returns the training loss and the probe's gradient norm, both at the weights the
    call found (whatever its update did to them)."""
    batch, probe = _probe_case(seed, n_in, n_classes)
    model, optimizer, trace = _spied_setup(mlp(n_in, 8, n_classes), lr=0.1)
    for call in range(1, calls + 1):
        name = _probe_name(n_in, n_classes, call)
        loss = F.cross_entropy(copy.deepcopy(model.inner)(batch[0]), batch[1]).item()
        expected = (loss, _total_norm(_gradients_at(model.inner, probe)))
        got = _call_step("check_probe_step_returns", step_with_probe, model, batch, optimizer, trace, name,
                         "step_with_probe", probe)
        _check_same_result(got, expected, name, HINTS["step_with_probe"])


@checks.keeps_random_state
def check_like_reference(function, reference, model, batch, lr, *, label, exercise, calls=3,
                         extra=()):
    """Hidden tests: ``function`` and ``reference`` on twin models, with old gradients in ``.grad``.

    After each call they must have returned the same, and left the same parameters, buffers and mode.
    """
    twin = copy.deepcopy(model)
    for net in (model, twin):
        _leave_old_gradients(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    twin_optimizer = torch.optim.SGD(twin.parameters(), lr=lr)
    hint = HINTS[exercise]
    for call in range(1, calls + 1):
        name = f"{function.__name__}({label}) [call {call}]"
        got = _run("check_like_reference", function, model, batch, optimizer, *extra, name=name, hint=hint)
        expected = reference(twin, batch, twin_optimizer, *extra)
        _check_same_result(got, expected, name, hint)
        checks.check_equal(model.training, twin.training, name=f"model.training [{name}]", hint=hint)
        states = zip([*model.named_parameters(), *model.named_buffers()],
                     [*twin.parameters(), *twin.buffers()], strict=False)
        for (key, got_tensor), expected_tensor in states:
            checks.check_close(got_tensor.detach(), expected_tensor.detach(), hint=hint,
                               name=checks.both(f"{key} tras la llamada {call}", f"{key} after call {call}"))


def _check_same_result(got, expected, name, hint) -> None:
    """A float, or a tuple of floats, equal to the reference's."""
    if isinstance(expected, tuple):
        checks.check_type(got, tuple, name=name, hint=hint)
        checks.check_equal(len(got), len(expected), name=f"len({name})", hint=hint)
        for index, (one, other) in enumerate(zip(got, expected, strict=False)):
            _check_same_result(one, other, f"{name}[{index}]", hint)
        return
    checks.check_type(got, float, name=name, hint=hint)
    checks.check_close(got, expected, name=name, hint=hint)


# ---------------------------------------------------------- exercise 3: logits_on_model_device
@checks.keeps_random_state
def check_logits_on_model_device(logits_on_model_device, lesson_device, seed=504, n_in=3, n_out=2, n=4):
    """A model on the CPU, on ``meta`` and on the lesson's device; the batch always on the CPU."""
    model = mlp(n_in, 5, n_out)
    x = torch.randn(n, n_in, generator=checks.seeded_generator(seed))
    hint = HINTS["logits_on_model_device"]
    for target in [torch.device("cpu"), torch.device("meta"), torch.device(lesson_device)]:
        moved = copy.deepcopy(model).to(target)
        name = f"logits_on_model_device(MLP {n_in}-5-{n_out} on {target.type}, x on cpu)"
        got = checks.check_runs(logits_on_model_device, moved, x, name=name, hint=hint)
        checks.check_device(got, target, name=name, hint=hint)
        checks.check_shape(got, (n, n_out), name=name, hint=hint)
        if target.type != "meta":
            checks.check_close(got.cpu(), _eval_outputs(model, x), name=name, hint=hint)


# -------------------------------------------------------------------- exercise 4: regression_loss
@checks.keeps_random_state
def check_regression_loss(regression_loss, pred, target, expected, expected_grad):
    """No warning, a scalar equal to ``expected``, and ``expected_grad`` with respect to ``pred``."""
    pred = pred.clone().requires_grad_(True)
    name = f"regression_loss(pred {tuple(pred.shape)}, target {tuple(target.shape)})"
    hint = HINTS["regression_loss"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = checks.check_runs(regression_loss, pred, target, name=name, hint=hint)
    checks.check_equal([str(w.message) for w in caught], [], hint=hint,
                       name=checks.both(f"avisos de {name}", f"warnings from {name}"))
    checks.check_shape(got, (), name=name, hint=hint)
    checks.check_close(got, expected, name=name, hint=hint)
    (grad,) = checks.check_runs(torch.autograd.grad, got, pred, hint=hint,
                                name=checks.both(f"gradiente de {name}", f"gradient of {name}"))
    checks.check_close(grad, expected_grad.reshape(pred.shape), hint=hint,
                       name=checks.both(f"gradiente de {name} respecto a pred",
                                        f"gradient of {name} with respect to pred"))


@checks.keeps_random_state
def check_regression_loss_by_hand(regression_loss):
    """pred 1, 2, 4 against target 1, 3, 2: squared errors 0, 1, 4; then a single example, 2.5
    against 0.5 (N = 1, where a shape that drops every size-1 dimension is no longer (N,)); in every
    pair of shapes."""
    for pred, target, mean, grad in [
            (torch.tensor([1.0, 2.0, 4.0]), torch.tensor([1.0, 3.0, 2.0]), torch.tensor(5 / 3),
             torch.tensor([0.0, -2 / 3, 4 / 3])),
            (torch.tensor([2.5]), torch.tensor([0.5]), torch.tensor(4.0), torch.tensor([4.0]))]:
        for p in (pred[:, None], pred):
            for t in (target, target[:, None]):
                check_regression_loss(regression_loss, p, t, mean, grad)


# ------------------------------------------------------------ exercise 5: train_epoch_with_outputs
class _Tag:
    """Hung on a graph node: it lives exactly as long as that node."""


class _TaggingLoss:
    """Cross-entropy that tags each batch's graph (the loss's node and the outputs') and notes, at
    every batch, how many earlier batches still have one alive."""

    def __init__(self):
        self.tags, self.values, self.outputs, self.older_alive = [], [], [], []

    def __call__(self, output, target):
        value = F.cross_entropy(output, target)
        self.older_alive.append(self.alive(self.tags[:-1]))   # the previous batch's may still be alive
        nodes = [value.grad_fn, output.grad_fn]
        self.tags.append([self._tag(node) for node in nodes if node is not None])
        self.values.append(value.item())
        self.outputs.append(output.detach().clone())
        return value

    @staticmethod
    def _tag(node):
        tag = _Tag()
        node.metadata["tag"] = tag
        return weakref.ref(tag)

    @staticmethod
    def alive(batches) -> int:
        def living():
            return sum(any(tag() is not None for tag in tags) for tags in batches)

        if living():
            gc.collect(1)   # a cycle may hold one for a while; the young generations are enough, and cheap
        return living()


def _watched_epoch(check, answer, seed, n_batches, n_in, batch_size):
    """The answer on fresh batches, a recording model and a spy SGD: what it returned, the trace,
    the tagging loss, and the call's name."""
    g = checks.seeded_generator(seed)
    batches = [classification_batch(batch_size, n_in, 3, g) for _ in range(n_batches)]
    model, optimizer, trace = _spied_setup(mlp(n_in, 8, 3), lr=0.1, old_gradients=False)
    loss_fn = _TaggingLoss()
    name = (f"train_epoch_with_outputs(MLP {n_in}-8-3, {n_batches} batches of {batch_size}, loss_fn, "
            f"optimizer)")
    with _watching_gradients(model, trace):
        result = _run(check, answer, model, batches, loss_fn, optimizer, name=name,
                      hint=HINTS["train_epoch_with_outputs"])
    return result, trace, loss_fn, name


def _check_pair(result, loss_fn, n_batches, name, hint) -> None:
    """A pair was returned, and each batch's loss came from ``loss_fn``, whose graphs are tagged."""
    checks.check_type(result, tuple, name=name, hint=hint)
    checks.check_equal(len(result), 2, name=f"len({name})", hint=hint)
    checks.check_equal(len(loss_fn.values), n_batches, hint=hint,
                       name=checks.both(f"llamadas a loss_fn [{name}]", f"calls to loss_fn [{name}]"))


@checks.keeps_random_state
def check_epoch_steps(train_epoch_with_outputs, seed=509, n_batches=5, n_in=2, batch_size=8):
    """A step per batch (one forward, a clean backward, an update) and each batch's loss as a float."""
    result, trace, loss_fn, name = _watched_epoch("check_epoch_steps", train_epoch_with_outputs, seed,
                                                  n_batches, n_in, batch_size)
    hint = HINTS["train_epoch_with_outputs"]
    events = [event for event in trace.events if event != "step"]
    checks.check_equal(trace.events.count("step"), n_batches, hint=hint,
                       name=checks.both(f"llamadas a step() [{name}]", f"calls to step() [{name}]"))
    checks.check_true(events == ["forward", "backward"] * n_batches, name=name, hint=hint,
                      expected=checks.both(f"por lote: {_describe_events(['forward', 'backward'])}",
                                           f"per batch: {_describe_events(['forward', 'backward'])}"),
                      got=_describe_events(events))
    _check_pair(result, loss_fn, n_batches, name, hint)
    checks.check_type(result[0], list, name=f"{name}[0]", hint=hint)
    checks.check_equal(len(result[0]), n_batches, name=f"len({name}[0])", hint=hint)
    for index, loss in enumerate(result[0]):
        checks.check_type(loss, float, name=f"{name}[0][{index}]", hint=hint)
    checks.check_close(torch.tensor(result[0]), torch.tensor(loss_fn.values), name=f"{name}[0]", hint=hint)


@checks.keeps_random_state
def check_epoch_outputs(train_epoch_with_outputs, seed=517, n_batches=5, n_in=2, batch_size=6):
    """The outputs each step computed, in order, in one tensor that holds no graph; and no batch's
    graph alive once the next batch computes its loss, nor when the epoch returns."""
    result, _, loss_fn, name = _watched_epoch("check_epoch_outputs", train_epoch_with_outputs, seed,
                                              n_batches, n_in, batch_size)
    hint = HINTS["train_epoch_with_outputs"]
    _check_pair(result, loss_fn, n_batches, name, hint)
    outputs = result[1]
    checks.check_type(outputs, torch.Tensor, name=f"{name}[1]", hint=hint)
    checks.check_close(outputs.detach(), torch.cat(loss_fn.outputs), name=f"{name}[1]", hint=hint)
    checks.check_equal(outputs.requires_grad, False, name=f"{name}[1].requires_grad", hint=hint)
    checks.check_equal(max(loss_fn.older_alive), 0, hint=hint,
                       name=checks.both("lotes anteriores con su grafo aún vivo durante la época",
                                        "earlier batches whose graph is still alive during the epoch"))
    checks.check_equal(loss_fn.alive(loss_fn.tags), 0, hint=hint,
                       name=checks.both(f"lotes con su grafo aún vivo cuando {name} termina",
                                        f"batches whose graph is still alive when {name} returns"))


def epoch_losses_as_step(train_epoch):
    """An epoch function that returns ``(losses, ...)`` called as a step, ``(model, batches,
    optimizer)``, returning its losses as a tuple: for check_like_reference."""
    def step(model, batches, optimizer):
        returned = train_epoch(model, batches, F.cross_entropy, optimizer)
        return tuple(returned[0]) if isinstance(returned, tuple) else returned

    step.__name__ = train_epoch.__name__
    return step


# ------------------------------------------------------------- exercise 6: residual_block_fixed
def _block_and_grads(block, x, out_grad):
    """The block's output on ``x`` and its gradients with respect to x, fc.weight and fc.bias."""
    out = block(x)
    return out, torch.autograd.grad(out, [x, block.fc.weight, block.fc.bias], out_grad)


@torch.no_grad()
def _set_linear(fc, weight, bias) -> None:
    fc.weight.copy_(weight)
    fc.bias.copy_(bias)


@checks.keeps_random_state
def check_block(ResidualBlockFixed, dim, x, expected, expected_grads, out_grad, *, set_weights=None):
    """Output, gradients and an untouched input; ``set_weights`` fixes fc for a hand-made case."""
    block = ResidualBlockFixed(dim)
    if set_weights is not None:
        _set_linear(block.fc, *set_weights)
    x = x.clone().requires_grad_(True)
    before = x.detach().clone()
    name = f"ResidualBlockFixed({dim})(x {tuple(x.shape)})"
    hint = HINTS["residual_block_fixed"]
    out, grads = checks.check_runs(_block_and_grads, block, x, out_grad, hint=hint,
                                   name=checks.both(f"{name} y su pasada hacia atrás",
                                                    f"{name} and its backward pass"))
    checks.check_close(out, expected(block, x) if callable(expected) else expected, name=name, hint=hint)
    checks.check_unchanged(before, x.detach(), name=checks.both(f"x tras {name}", f"x after {name}"),
                           hint=hint)
    wanted = expected_grads(block, x, out_grad) if callable(expected_grads) else expected_grads
    for label, got, want in zip(["x", "fc.weight", "fc.bias"], grads, wanted, strict=False):
        checks.check_close(got, want, hint=hint,
                           name=checks.both(f"gradiente respecto a {label} [{name}]",
                                            f"gradient with respect to {label} [{name}]"))


@checks.keeps_random_state
def check_residual_by_hand(ResidualBlockFixed):
    """fc = 2·x + (0, −1) on two rows worked out by hand: one unit of each row passes the relu."""
    x = torch.tensor([[1.0, -2.0], [-0.5, 3.0]])
    weights = (2 * torch.eye(2), torch.tensor([0.0, -1.0]))
    output = torch.tensor([[3.0, -2.0], [-0.5, 8.0]])                  # x + relu([[2, -5], [-1, 5]])
    grads = (torch.tensor([[3.0, 1.0], [1.0, 3.0]]),                  # 1 + 2 where the relu passes
             torch.tensor([[1.0, -2.0], [-0.5, 3.0]]),                # row i: the x whose unit i passes
             torch.tensor([1.0, 1.0]))
    check_block(ResidualBlockFixed, 2, x, output, grads, torch.ones(2, 2), set_weights=weights)


def grads_of(reference_forward):
    """For hidden tests: the gradients of ``reference_forward(block, x)`` (x, fc.weight, fc.bias)."""
    def grads(block, x, out_grad):
        x = x.detach().requires_grad_(True)
        out = reference_forward(block, x)
        return torch.autograd.grad(out, [x, block.fc.weight, block.fc.bias], out_grad)

    return grads


# ------------------------------------------------------------------- exercise 7: first_bad_step
def _scripted(losses):
    """A train_step that returns the given losses one after another, and the list of its calls."""
    calls = []

    def train_step(model, batch, optimizer):
        calls.append(1)
        return losses[len(calls) - 1]

    return train_step, calls


@checks.keeps_random_state
def check_first_bad_step_scripted(first_bad_step, losses, max_steps, expected):
    """The first non-finite loss's step number (or None), and no call to train_step after it."""
    step, calls = _scripted(losses)
    shown = "[" + ", ".join(f"{float(v):g}" for v in losses[:max_steps]) + "]"
    name = f"first_bad_step(losses {shown}, max_steps={max_steps})"
    hint = HINTS["first_bad_step"]
    got = checks.check_runs(first_bad_step, step, None, None, None, max_steps, name=name, hint=hint)
    checks.check_equal(got, expected, name=name, hint=hint)
    checks.check_equal(len(calls), expected or max_steps, hint=hint,
                       name=checks.both(f"llamadas a train_step [{name}]", f"calls to train_step [{name}]"))


@checks.keeps_random_state
def check_first_bad_step_by_hand(first_bad_step):
    check_first_bad_step_scripted(first_bad_step, [0.9, 0.7, 3.5, float("inf"), float("nan"), 1.0], 6, 4)
    check_first_bad_step_scripted(first_bad_step, [torch.tensor(1.0), torch.tensor(0.5),
                                                   torch.tensor(float("nan"))], 3, 3)
    check_first_bad_step_scripted(first_bad_step, [1.0, 0.8, 0.6, 0.5, float("nan")], 4, None)


@checks.keeps_random_state
def check_first_bad_step_on_training(first_bad_step, seed=513, lr=0.05, max_steps=200):
    """Real training that diverges: the answer is the number of the first non-finite loss it returned."""
    g = checks.seeded_generator(seed)
    x = torch.randn(32, 2, generator=g) * torch.tensor([1.0, 30.0])
    y = x @ torch.tensor([1.0, 0.1])
    returned = []

    def regression_step(net, batch, sgd):
        sgd.zero_grad(set_to_none=True)
        error = F.mse_loss(net(batch[0]).squeeze(1), batch[1])
        error.backward()
        sgd.step()
        returned.append(error.item())
        return returned[-1]

    name = f"first_bad_step(real training, lr={lr}, max_steps={max_steps})"
    hint = HINTS["first_bad_step"]
    with checks.seeded(seed):
        net = nn.Linear(2, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=lr)
        got = checks.check_runs(first_bad_step, regression_step, net, (x, y), optimizer,
                                max_steps, name=name, hint=hint)
    first = next((step for step, value in enumerate(returned, 1) if not math.isfinite(value)), None)
    checks.check_equal(got, first, name=name, hint=hint)
    checks.check_equal(len(returned), first or max_steps, hint=hint,
                       name=checks.both(f"llamadas a train_step [{name}]", f"calls to train_step [{name}]"))


# ------------------------------------------------------------------- exercise 8: BinaryClassifier
def _blobs_of(n, k, d, generator):
    centers = 4 * torch.randn(k, d, generator=generator)
    y = torch.randint(0, k, (n,), generator=generator)
    return centers[y] + 0.5 * torch.randn(n, d, generator=generator), y


def _binary_blobs(n, d, generator):
    """Two clouds of points; the labels are floats, 0.0 or 1.0, as ``BCEWithLogitsLoss`` takes them."""
    x, y = _blobs_of(n, 2, d, generator)
    return x, y.float()


def _sigmoid_floor(y) -> float:
    """The least ``BCEWithLogitsLoss`` can be when the model already ends in a sigmoid: its outputs s
    lie in (0, 1), so the loss sees σ(s) in (0.5, σ(1)); each 1 costs at least -log σ(1), each 0 log 2."""
    positives = y.mean().item()
    return positives * F.softplus(torch.tensor(-1.0)).item() + (1 - positives) * math.log(2)


def _trained_binary(BinaryClassifier, x, y, n_in, steps, name, hint):
    """A fresh ``BinaryClassifier(n_in, 16)`` after ``steps`` Adam steps of ``BCEWithLogitsLoss``, and its
    last loss; the output's shape is checked first, for a batch and for a single example."""
    net = BinaryClassifier(n_in, 16)
    checks.check_shape(checks.check_runs(net, x, name=f"{name}(x)", hint=hint), (len(x),), name=f"{name}(x)",
                       hint=hint)
    checks.check_shape(checks.check_runs(net, x[:1], name=f"{name}(x[:1])", hint=hint), (1,),
                       name=f"{name}(x[:1])", hint=hint)
    loss_fn = nn.BCEWithLogitsLoss()
    adam = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(steps):
        adam.zero_grad(set_to_none=True)
        objective = loss_fn(net(x), y)
        objective.backward()
        adam.step()
    return net, objective.item()


@checks.keeps_random_state
def check_binary_classifier_learns(BinaryClassifier, seed=517, n_in=2, steps=40):
    """Logits of shape (N,), also for N = 1; trained with ``BCEWithLogitsLoss``, the loss goes well below
    the floor a sigmoid inside the model would impose."""
    x, y = _binary_blobs(48, n_in, checks.seeded_generator(seed))
    hint = HINTS["binary_classifier"]
    name = f"BinaryClassifier({n_in}, 16)"
    with checks.seeded(seed):                  # the weights, and whatever the model draws as it trains
        _, loss = _trained_binary(BinaryClassifier, x, y, n_in, steps, name, hint)
    floor = _sigmoid_floor(y)
    checks.check_true(loss < floor / 2, hint=hint, got=f"{loss:.4f}",
                      name=checks.both(
                          f"BCEWithLogitsLoss tras {steps} pasos de Adam [{name}, 48 ejemplos]",
                          f"BCEWithLogitsLoss after {steps} Adam steps [{name}, 48 examples]"),
                      expected=checks.both(
                          f"menos de {floor / 2:.3f} (con un sigmoide dentro del modelo no baja "
                          f"de {floor:.3f})",
                          f"below {floor / 2:.3f} (with a sigmoid inside the model it cannot go below "
                          f"{floor:.3f})"))


@checks.keeps_random_state
def check_binary_predict_proba(BinaryClassifier, seed=518, n_in=3, n=10, steps=40):
    """Probabilities of class 1, shape (N,), whose log-odds are the logits; once trained, confident
    ones reach past 0.1 and 0.9 (a sigmoid applied twice keeps them between 0.5 and 0.73)."""
    g = checks.seeded_generator(seed)
    x = torch.randn(n, n_in, generator=g)
    hint = HINTS["binary_classifier"]
    name = f"BinaryClassifier({n_in}, 8).predict_proba(x)"
    with checks.seeded(seed):
        net = BinaryClassifier(n_in, 8)
        probabilities = checks.check_runs(net.predict_proba, x, name=name, hint=hint)
        logits = checks.check_runs(net, x, name=f"BinaryClassifier({n_in}, 8)(x)", hint=hint)
    checks.check_shape(probabilities, (n,), name=name, hint=hint)
    checks.check_shape(logits, (n,), name=f"BinaryClassifier({n_in}, 8)(x)", hint=hint)
    probabilities, logits = probabilities.detach(), logits.detach()
    inside = bool(((probabilities > 0) & (probabilities < 1)).all())
    checks.check_true(inside, name=name, hint=hint, got=checks.describe(probabilities),
                      expected=checks.both("valores entre 0 y 1", "values between 0 and 1"))
    log_odds = probabilities.log() - (1 - probabilities).log()
    checks.check_close(log_odds, logits, hint=hint,
                       name=checks.both(f"log(p / (1 - p)) con p = {name}, frente a los logits",
                                        f"log(p / (1 - p)) with p = {name}, against the logits"))
    train_x, train_y = _binary_blobs(48, n_in, g)
    trained_name = f"BinaryClassifier({n_in}, 16)"
    with checks.seeded(seed):
        trained, _ = _trained_binary(BinaryClassifier, train_x, train_y, n_in, steps, trained_name, hint)
        spread = checks.check_runs(trained.predict_proba, train_x, name=f"{trained_name}.predict_proba(x)",
                                   hint=hint).detach()
    low, high = spread.min().item(), spread.max().item()
    checks.check_true(low < 0.1 and high > 0.9, hint=hint, got=f"min {low:.3f}, max {high:.3f}",
                      name=checks.both(f"{trained_name}.predict_proba(x) tras {steps} pasos de Adam",
                                       f"{trained_name}.predict_proba(x) after {steps} Adam steps"),
                      expected=checks.both("probabilidades seguras: alguna por debajo de 0.1 y alguna por "
                                           "encima de 0.9 (un sigmoide aplicado dos veces las deja entre 0.5 "
                                           "y 0.73)",
                                           "confident probabilities: some below 0.1 and some above 0.9 (a "
                                           "sigmoid applied twice keeps them between 0.5 and 0.73)"))


# ------------------------------------------------------------- exercise 9: layer_statistics
# The expected statistics come from torch itself, on a copy of the model: its layers run one by
# one, autograd.grad on their outputs, and plain SGD's update worked out from the weights' gradients.
STATISTICS = ("activation_std", "dead_share", "grad_norm", "update_ratio")
_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


@contextlib.contextmanager
def _quiet_first_layer():
    """PyTorch's warning that a full backward hook on the first layer (whose input needs no gradient)
    sees only its output's gradient, kept out of the grade cells' output."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        yield


def _statistics_net(seed: int, widths: list):
    """Linear layers of ``widths`` (first the inputs', last the outputs'), each hidden one followed by
    a ReLU (the second a Tanh in a net of four Linear layers or more), a quarter of each ReLU's units
    dead on any input (a bias far below what the weights can reach); inputs, targets, loss."""
    generator = checks.seeded_generator(seed)
    layers = []
    for index, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=False)):
        linear = nn.Linear(n_in, n_out)
        bias = 0.1 * torch.randn(n_out, generator=generator)
        weight = torch.randn(n_out, n_in, generator=generator) / math.sqrt(n_in)
        layers.append(linear)
        if index < len(widths) - 2:
            tanh = index == 1 and len(widths) > 4
            if not tanh:
                bias[torch.randperm(n_out, generator=generator)[:max(1, n_out // 4)]] = -50.0
            layers.append(nn.Tanh() if tanh else nn.ReLU())
        _set_linear(linear, weight, bias)
    inputs = torch.randn(16, widths[0], generator=generator)
    if seed % 2:
        return nn.Sequential(*layers), inputs, torch.randn(16, widths[-1], generator=generator), F.mse_loss
    labels = torch.randint(0, widths[-1], (16,), generator=generator)
    return nn.Sequential(*layers), inputs, labels, F.cross_entropy


def _describe_net(model, loss_fn) -> str:
    return " → ".join(f"Linear({layer.in_features}, {layer.out_features})" if isinstance(layer, nn.Linear)
                      else type(layer).__name__ for layer in model) + f"; {loss_fn.__name__}"


def _measured(model, inputs, targets, loss_fn) -> dict:
    """On ``model`` (a copy: it is not updated): each layer's output, run one by one, and the
    statistics of ``STATISTICS`` but the update; with the gradients of the Linear weights."""
    outputs, signal = [], inputs
    for layer in model:
        signal = layer(signal)
        outputs.append(signal)
    linear = [index for index, layer in enumerate(model) if isinstance(layer, nn.Linear)]
    relu = [index for index, layer in enumerate(model) if isinstance(layer, nn.ReLU)]
    count = len(linear)
    wanted = ([outputs[index] for index in linear] + [model[index].weight for index in linear]
              + [model[index].bias for index in linear])
    objective = loss_fn(signal, targets)
    found = torch.autograd.grad(objective, wanted)
    return {"activation_std": [torch.std(outputs[index].detach()).item() for index in linear],
            "dead_share": [(outputs[index].detach() <= 0).all(dim=0).double().mean().item()
                           for index in relu],
            "grad_norm": [torch.linalg.vector_norm(grad).item() for grad in found[:count]],
            "weight_grads": list(found[count:2 * count]), "bias_grads": list(found[2 * count:]),
            "loss": objective.item()}


SHORTCUTS.update(dict.fromkeys(["check_layer_statistics_forward", "check_layer_statistics_backward",
                                "check_layer_statistics_update"],
                               [(sys.modules[__name__], "_measured")]))


@torch.no_grad()
def _relative_change(after, before) -> float:
    """‖after − before‖ / ‖before‖, a float."""
    return (torch.linalg.vector_norm(after - before) / torch.linalg.vector_norm(before)).item()


def _hooks_left(model) -> list:
    """``model[i]: kind`` for every hook still registered on a layer or a parameter."""
    left = [f"{name or 'model'}: {table.strip('_')}" for name, module in model.named_modules()
            for table in _HOOK_TABLES if getattr(module, table, None)]
    return left + [f"{name}: tensor hook" for name, param in model.named_parameters()
                   if param._backward_hooks]


def _statistics_cases(generator, depths):
    """Seeds and widths of nets drawn from ``generator``: one per depth (number of Linear layers)."""
    return [(_seed(generator), [_draw(generator, 2, 5)] + [_draw(generator, 4, 10) for _ in range(depth - 1)]
             + [_draw(generator, 2, 4)], _rate(generator, 0.05, 0.3)) for depth in depths]


def _statistics_call(layer_statistics, seed, widths, lr, check, name_of=None):
    """The student's function on a fresh net (training mode, old gradients in ``.grad``) with a
    spying SGD; the net, what the copy measured, the weights before, the result and the call's name."""
    with checks.seeded(seed):
        model, inputs, targets, loss_fn = _statistics_net(seed, widths)
    expected = _measured(copy.deepcopy(model), inputs, targets, loss_fn)
    before = [layer.weight.detach().clone() for layer in model if isinstance(layer, nn.Linear)]
    _leave_old_gradients(model)
    optimizer = checks.SpySGD(model.parameters(), lr=lr)
    name = f"layer_statistics({_describe_net(model, loss_fn)}; SGD lr={lr})"
    with _quiet_first_layer():
        got = checks.run_answer(layer_statistics, model, inputs, targets, loss_fn, optimizer, name=name,
                                hint=HINTS["layer_statistics"], shortcuts=SHORTCUTS[check])
    return model, optimizer, expected, before, got, name


def _check_statistic(got, key, expected, name, hint, rtol=1e-4, atol=1e-7) -> None:
    """``got[key]`` is a list of numbers, one per layer, close to ``expected``."""
    checks.check_type(got, dict, name=name, hint=hint)
    checks.check_true(key in got, name=name, hint=hint, expected=checks.both(
        f"un dict con la clave {key!r}", f"a dict with the key {key!r}"), got=f"keys {sorted(map(str, got))}")
    values = got[key]
    label = f"{name}[{key!r}]"
    checks.check_type(values, (list, tuple), name=label, hint=hint)
    checks.check_equal(len(values), len(expected), hint=hint, name=checks.both(
        f"len({label}) (una entrada por capa de ese tipo)",
        f"len({label}) (one entry per layer of that kind)"))
    numbers = [checks.plain_number(value) for value in values]
    checks.check_true(None not in numbers, name=label, hint=hint, got=checks.describe(values),
                      expected=checks.both("un número por capa", "one number per layer"))
    checks.check_close(torch.tensor(numbers, dtype=torch.float64),
                       torch.tensor(expected, dtype=torch.float64), name=label, hint=hint,
                       rtol=rtol, atol=atol)


@checks.keeps_random_state
def check_layer_statistics_forward(layer_statistics, depths=(2, 3, 4)):
    """The spread of each Linear's output and the share of dead units of each ReLU, on nets of random
    widths with some units dead on every input (and a Tanh, which is not a ReLU)."""
    hint = HINTS["layer_statistics"]
    for seed, widths, lr in _statistics_cases(checks.fresh_generator(), depths):
        with checks.one_thread():
            _, _, expected, _, got, name = _statistics_call(layer_statistics, seed, widths, lr,
                                                            "check_layer_statistics_forward")
        for key in ("activation_std", "dead_share"):
            _check_statistic(got, key, expected[key], name, hint)


@checks.keeps_random_state
def check_layer_statistics_backward(layer_statistics, depths=(2, 3, 4)):
    """The norm of the loss's gradient with respect to each Linear's output."""
    hint = HINTS["layer_statistics"]
    for seed, widths, lr in _statistics_cases(checks.fresh_generator(), depths):
        with checks.one_thread():
            _, _, expected, _, got, name = _statistics_call(layer_statistics, seed, widths, lr,
                                                            "check_layer_statistics_backward")
        _check_statistic(got, "grad_norm", expected["grad_norm"], name, hint)


@checks.keeps_random_state
def check_layer_statistics_update(layer_statistics, depths=(2, 3, 4)):
    """One optimizer step on this batch's gradients (old ones wait in ``.grad``), ‖Δw‖ / ‖w‖ of each
    Linear's weight, no hook left behind and the model still in training mode."""
    hint = HINTS["layer_statistics"]
    for seed, widths, lr in _statistics_cases(checks.fresh_generator(), depths):
        with checks.one_thread():
            model, optimizer, expected, before, got, name = _statistics_call(
                layer_statistics, seed, widths, lr, "check_layer_statistics_update")
        checks.check_equal(len(optimizer.steps), 1, hint=hint, name=checks.both(
            f"llamadas a step() del optimizador [{name}]", f"calls to the optimizer's step() [{name}]"))
        linear = [layer for layer in model if isinstance(layer, nn.Linear)]
        steps = zip(linear, before, expected["weight_grads"], strict=False)
        for index, (layer, start, grad) in enumerate(steps):
            checks.check_close(layer.weight.detach(), start - lr * grad, hint=hint, name=checks.both(
                f"peso de la Linear {index} tras {name} (un paso con los gradientes de este lote)",
                f"weight of Linear {index} after {name} (one step on this batch's gradients)"))
        moved = [_relative_change(layer.weight, start) for layer, start in zip(linear, before, strict=False)]
        _check_statistic(got, "update_ratio", moved, name, hint, rtol=1e-3, atol=1e-9)
        left = _hooks_left(model)
        checks.check_true(not left, name=name, hint=hint, got="; ".join(left),
                          expected=checks.both("ningún hook registrado al terminar",
                                               "no hook left registered"))
        checks.check_equal(model.training, True, name=f"model.training [{name}]", hint=hint)


# ---------------------------------------------------------------- exercise 10: diagnose_run
# Runs of a few steps measured by this module's own collector, never the student's: healthy ones
# (He initialisation, a learning rate whose first update is about 1e-3 of the weights), vanishing
# ones (weights drawn far too small) and ones whose learning rate is far too high.
KINDS = ("healthy", "vanishing", "lr_too_high")
RUN_STEPS = 20


def _toy_task(generator):
    """Section 0's kind of data, drawn anew: three clouds in the plane, or points around a line."""
    if _draw(generator, 0, 1):
        centres = 3 * torch.randn(3, 2, generator=generator)
        labels = torch.randint(0, 3, (32,), generator=generator)
        points = centres[labels] + 0.6 * torch.randn(32, 2, generator=generator)
        return "blobs", points, labels, F.cross_entropy
    x = torch.randn(32, 1, generator=generator)
    slope, offset = _rate(generator, 1.0, 3.0) * (2 * _draw(generator, 0, 1) - 1), _rate(generator, -1.0, 1.0)
    return "line", x, slope * x + offset + 0.1 * torch.randn(32, 1, generator=generator), F.mse_loss


def _run_net(generator, n_in, n_out, depth, width, scale):
    """``depth`` Linear layers with ReLUs between, weights drawn from He's scale times ``scale``."""
    sizes = [n_in] + [width] * (depth - 1) + [n_out]
    layers = []
    for index in range(depth):
        linear = nn.Linear(sizes[index], sizes[index + 1])
        weight = scale * math.sqrt(2 / sizes[index]) * torch.randn(linear.weight.shape, generator=generator)
        _set_linear(linear, weight, torch.zeros(sizes[index + 1]))
        layers += [linear] + ([nn.ReLU()] if index < depth - 1 else [])
    return nn.Sequential(*layers)


def _sgd_step(model, measured, lr) -> list:
    """Plain SGD on the Linear layers with the gradients ``measured``: ‖Δw‖ / ‖w‖ of each weight."""
    ratios = []
    for layer, weight_grad, bias_grad in zip(model[::2], measured["weight_grads"], measured["bias_grads"],
                                             strict=False):
        start = layer.weight.detach().clone()
        _set_linear(layer, start - lr * weight_grad, layer.bias.detach() - lr * bias_grad)
        ratios.append(_relative_change(layer.weight, start))
    return ratios


# A drawn network is sometimes a borderline case: about one healthy run in a thousand has a first layer
# whose gradient is a twentieth of the largest. Such draws are drawn again, so that the kinds stay
# apart by a margin wide enough for any rule read off section 14's figures.
HEALTHY_FIRST_LAYER, VANISHING_FIRST_LAYER = 0.1, 0.02  # its first-step gradient norm / the largest


def training_run(kind: str, seed: int, steps: int = RUN_STEPS) -> dict:
    """A short run of ``kind`` drawn from ``seed``: the loss and the four statistics of every step (as
    ``layer_statistics`` returns them), plain floats; a run that blows up stops before its first
    non-finite step."""
    for attempt in range(100):
        drawn = (seed + 7919 * attempt) % 2**31
        with checks.one_thread(), checks.seeded(drawn):
            run = _training_run(kind, drawn, steps)
        if _clear_case(kind, run):
            return run
    raise RuntimeError(f"no clear {kind} run drawn from seed {seed}")


def _clear_case(kind: str, run: dict) -> bool:
    if kind == "lr_too_high":
        return True
    first_step = run["grad_norm"][0]
    share = first_step[0] / max(first_step)
    return share < VANISHING_FIRST_LAYER if kind == "vanishing" else share > HEALTHY_FIRST_LAYER


def _training_run(kind, seed, steps):
    generator = checks.seeded_generator(seed)
    task, inputs, targets, loss_fn = _toy_task(generator)
    depth, width = _draw(generator, 4, 6), _draw(generator, 12, 24)
    scale = _rate(generator, 0.05, 0.2) if kind == "vanishing" else _rate(generator, 0.8, 1.2)
    model = _run_net(generator, inputs.shape[1], 3 if task == "blobs" else 1, depth, width, scale)
    if kind == "vanishing":
        lr = _rate(generator, 0.002, 0.01)
    else:       # the first update's largest (healthy) or middle (too high) ‖Δw‖ / ‖w‖ is the target
        target = _rate(generator, 3e-4, 2e-3) if kind == "healthy" else _rate(generator, 0.05, 0.3)
        first = _measured(model, inputs, targets, loss_fn)
        per_unit = torch.tensor([_relative_change(layer.weight + grad, layer.weight)
                                 for grad, layer in zip(first["weight_grads"], model[::2], strict=False)])
        lr = target / (per_unit.max() if kind == "healthy" else per_unit.median()).item()
    run = {"loss": [], **{key: [] for key in STATISTICS}}
    for _ in range(steps):
        measured = _measured(model, inputs, targets, loss_fn)
        ratios = _sgd_step(model, measured, lr)
        step = {"loss": measured["loss"], **{key: measured[key] for key in STATISTICS[:3]},
                "update_ratio": ratios}
        if not all(math.isfinite(value) for value in [step["loss"], *ratios, *step["grad_norm"],
                                                       *step["activation_std"]]):
            break
        for key, value in step.items():
            run[key].append(value)
    return run


def _diagnosis_kinds(generator, other: str, runs: int) -> list:
    """``(kind, seed)`` of ``runs`` runs of ``other`` and as many healthy ones, shuffled."""
    kinds = [other, "healthy"] * runs
    order = torch.randperm(len(kinds), generator=generator).tolist()
    return [(kinds[index], _seed(generator)) for index in order]


def _check_diagnoses(diagnose_run, other: str, runs: int) -> None:
    hint = HINTS["diagnose_run"]
    asked = _diagnosis_kinds(checks.fresh_generator(), other, runs)
    for number, (kind, seed) in enumerate(asked, 1):
        run = training_run(kind, seed)
        name = checks.both(
            f"diagnose_run(entrenamiento {number} de {len(asked)}: {len(run['grad_norm'][0])} capas Linear, "
            f"{len(run['loss'])} pasos)",
            f"diagnose_run(run {number} of {len(asked)}: {len(run['grad_norm'][0])} Linear layers, "
            f"{len(run['loss'])} steps)")
        got = checks.check_runs(diagnose_run, run, name=name, hint=hint)
        checks.check_equal(got, kind, name=name, hint=hint)


@checks.keeps_random_state
def check_diagnose_vanishing(diagnose_run, runs=3):
    """Runs whose weights were drawn far too small, among healthy ones: each labelled right."""
    _check_diagnoses(diagnose_run, "vanishing", runs)


@checks.keeps_random_state
def check_diagnose_lr_too_high(diagnose_run, runs=3):
    """Runs whose learning rate is far too high, among healthy ones: each labelled right."""
    _check_diagnoses(diagnose_run, "lr_too_high", runs)


# ------------------------------------------------------------------------------- the judge's calls
# What the judge compares with the reference (graders/judge/calls.py): each fixed bug shows in the
# data an outcome returns (the weights after steps taken onto old gradients, the mode after the call,
# the bytes autograd saved, the graphs still alive, the logits on held-out inputs, the file's
# contents). The outcomes run in the student's kernel on the answer and in the judge on the
# reference's, on inputs drawn from the class's secret; they build everything from plain numbers.
TRAINING = {"rtol": 1e-4, "atol": 1e-6}  # a few steps may amplify the last bits of a float
STATISTICS_TOLERANCE = {"rtol": 1e-4, "atol": 1e-7}
UPDATE_TOLERANCE = {"rtol": 1e-3, "atol": 1e-7}  # a small difference of two close weights


def _draw(generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _seed(generator) -> int:
    return int(torch.randint(0, 2**31, (1,), generator=generator))


def _rate(generator, low: float, high: float) -> float:
    return round(low + (high - low) * float(torch.rand(1, generator=generator)), 4)


def _state(model) -> dict:
    """The model's parameters and buffers, as plain tensors."""
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def _floats(values) -> tuple:
    """Returned numbers as a float64 tensor (compared within the tolerance), and whether each is a float."""
    return (torch.tensor([float(value) for value in values], dtype=torch.float64),
            [isinstance(value, float) for value in values])


@torch.no_grad()
def _filled_by_shape(model, seed: int):
    """Each parameter drawn from ``seed`` and its shape alone: any model of the asked layers, however
    its attributes are named or ordered, starts from the same weights as the reference."""
    for param in model.parameters():
        key = zlib.crc32(repr(tuple(param.shape)).encode())
        generator = torch.Generator().manual_seed(seed * 4_294_967_296 + key)
        param.copy_((2 * torch.rand(param.shape, generator=generator) - 1) / math.sqrt(param.shape[-1]))
    return model


def _probe_steps(generator):
    return [(_seed(generator), _draw(generator, 2, 5), _draw(generator, 2, 4), _draw(generator, 8, 16),
             _rate(generator, 0.05, 0.4)) for _ in range(3)]


def _probe_run(step_with_probe, seed, n_in, n_classes, n, lr, calls):
    """``calls`` calls on a small MLP whose ``.grad`` holds an earlier step's leftovers, with a
    held-out batch as the probe: what they returned, and the model."""
    generator = checks.seeded_generator(seed)
    batch = classification_batch(n, n_in, n_classes, generator)
    probe = classification_batch(max(2, n // 2), n_in, n_classes, generator, scale=2.0)
    with checks.seeded(seed):
        model = mlp(n_in, 6, n_classes, activation=nn.Tanh)
        _leave_old_gradients(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        return [step_with_probe(model, batch, optimizer, probe) for _ in range(calls)], model


def probe_step_update_outcome(step_with_probe, seed, n_in, n_classes, n, lr) -> dict:
    """The weights after two calls (stale gradients, or the probe's, moved them elsewhere)."""
    _, model = _probe_run(step_with_probe, seed, n_in, n_classes, n, lr, calls=2)
    return _state(model)


def probe_step_returns_outcome(step_with_probe, seed, n_in, n_classes, n, lr) -> tuple:
    """What one call returned: a tuple? the training loss and the probe's gradient norm, floats?"""
    (pair,), _ = _probe_run(step_with_probe, seed, n_in, n_classes, n, lr, calls=1)
    return (isinstance(pair, tuple), *_floats(pair))


def _device_cases(generator):
    return [(_seed(generator), _draw(generator, 1, 7), _draw(generator, 2, 6), _draw(generator, 1, 8))
            for _ in range(2)]


def logits_on_model_device_outcome(logits_on_model_device, seed, n_in, n_out, n) -> tuple:
    """A batch on the CPU given to a model on the CPU (the logits) and to the same model on ``meta``
    (the output's shape and device: a batch left on the CPU, or sent to a device named in the code,
    raises there)."""
    x = torch.randn(n, n_in, generator=checks.seeded_generator(seed))
    with checks.seeded(seed):
        model = mlp(n_in, 5, n_out)
    on_cpu = logits_on_model_device(model, x)
    on_meta = logits_on_model_device(copy.deepcopy(model).to("meta"), x)
    return on_cpu.detach().clone(), tuple(on_meta.shape), on_meta.device


def _trained_logits(net, x, y, loss_fn, held_out, steps=6):
    """The logits on ``held_out``, then the losses of ``steps`` Adam steps on (x, y) and the
    held-out logits again."""
    before = net(held_out).detach().clone()
    adam = torch.optim.Adam(net.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        adam.zero_grad(set_to_none=True)
        objective = loss_fn(net(x), y)
        objective.backward()
        adam.step()
        losses.append(objective.item())
    return before, torch.tensor(losses), net(held_out).detach().clone()


def _regression_cases(generator):
    n = _draw(generator, 2, 12)
    pairs = [((n, 1), (n,)), ((n,), (n, 1)), ((1, 1), (1,)), ((1,), (1, 1))]
    return [(torch.randn(pred, generator=generator), torch.randn(target, generator=generator))
            for pred, target in pairs]


def regression_loss_outcome(regression_loss, pred, target) -> tuple:
    """The loss, its gradient with respect to ``pred`` and the number of warnings it emitted."""
    pred = pred.clone().requires_grad_(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = regression_loss(pred, target)
    (grad,) = torch.autograd.grad(got, pred)
    return got.detach().clone(), grad, len(caught)


def _epochs(generator):
    return [(_seed(generator), _draw(generator, 3, 6), _draw(generator, 2, 4), _draw(generator, 4, 8),
             _rate(generator, 0.05, 0.3)) for _ in range(2)]


def _epoch_run(answer, seed, n_batches, n_in, batch_size, lr):
    """An epoch on a small MLP with leftovers in ``.grad`` and a loss that tags each batch's graph:
    what the answer returned, the model after, the loss, and how many forward passes it ran."""
    generator = checks.seeded_generator(seed)
    batches = [classification_batch(batch_size, n_in, 3, generator) for _ in range(n_batches)]
    loss_fn = _TaggingLoss()
    forwards = []
    with checks.seeded(seed):
        model = mlp(n_in, 5, 3, activation=nn.Tanh)
        model.register_forward_pre_hook(lambda *args: forwards.append(1))
        _leave_old_gradients(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        return answer(model, batches, loss_fn, optimizer), model, loss_fn, len(forwards)


def epoch_steps_outcome(train_epoch_with_outputs, seed, n_batches, n_in, batch_size, lr) -> tuple:
    """The losses returned (a list of floats?), the weights after, the losses computed and the
    forward passes run (one per batch)."""
    (losses, _), model, loss_fn, forwards = _epoch_run(train_epoch_with_outputs, seed, n_batches, n_in,
                                                       batch_size, lr)
    return (isinstance(losses, list), *_floats(losses), _state(model),
            torch.tensor(loss_fn.values, dtype=torch.float64), forwards)


def epoch_outputs_outcome(train_epoch_with_outputs, seed, n_batches, n_in, batch_size, lr) -> tuple:
    """The outputs returned, whether they require grad, and how many batches kept their graph alive
    during the epoch and at its end (outputs kept with their graph keep them all)."""
    (_, outputs), _, loss_fn, _ = _epoch_run(train_epoch_with_outputs, seed, n_batches, n_in, batch_size, lr)
    return (outputs.detach().clone(), outputs.requires_grad, max(loss_fn.older_alive, default=0),
            loss_fn.alive(loss_fn.tags))


def _blocks(generator):
    cases = []
    for shape in ([_draw(generator, 1, 6)], [_draw(generator, 1, 3), _draw(generator, 2, 4)]):
        dim = _draw(generator, 2, 6)
        x, out_grad = (torch.randn(*shape, dim, generator=generator) for _ in range(2))
        weight, bias = torch.randn(dim, dim, generator=generator), torch.randn(dim, generator=generator)
        cases.append((x, out_grad, weight, bias))
    return cases


def residual_block_fixed_outcome(ResidualBlockFixed, x, out_grad, weight, bias) -> tuple:
    """A block whose fc is (weight, bias): its output on ``x``, the gradients with respect to x,
    fc.weight and fc.bias of ``out · out_grad`` (an in-place addition makes backward raise), and
    whether x came back unchanged."""
    with checks.seeded(0):
        block = ResidualBlockFixed(x.shape[-1])
    _set_linear(block.fc, weight, bias)
    x = x.clone().requires_grad_(True)
    before = x.detach().clone()
    out, grads = _block_and_grads(block, x, out_grad)
    return out.detach().clone(), list(grads), torch.equal(before, x.detach())


def _loss_scripts(generator):
    """Losses whose first non-finite one comes before the last of ``max_steps`` (as floats, then as
    tensors: training must stop there), and after them."""
    cases = []
    for kind in ("found", "not found", "tensors"):
        first = _draw(generator, 2, 14)
        last = (1, first - 1) if kind == "not found" else (first + 1, first + 5)  # steps left to stop
        max_steps = _draw(generator, *last)
        bad = [math.nan, math.inf, -math.inf][_draw(generator, 0, 2)]
        losses = [round(value, 4) for value in (10 * torch.rand(first - 1, generator=generator)).tolist()]
        cases.append((losses + [bad] + [1.0] * 8, max_steps, kind == "tensors"))
    return cases


def first_bad_step_outcome(first_bad_step, losses, max_steps, as_tensors) -> tuple:
    """A train_step that returns ``losses`` one after another (one-element tensors if ``as_tensors``):
    the step returned, and how many times train_step was called (none after the first bad one)."""
    step, calls = _scripted([torch.tensor(value) for value in losses] if as_tensors else list(losses))
    return first_bad_step(step, None, None, None, max_steps), len(calls)


def _binary_cases(generator):
    return [(_draw(generator, 2, 6), _draw(generator, 5, 10), _seed(generator)) for _ in range(2)]


def binary_classifier_outcome(BinaryClassifier, n_in, n_hidden, seed) -> tuple:
    """``BinaryClassifier`` with its weights drawn from ``seed``: the logits of one example (shape
    (1,)), the held-out logits, the ``BCEWithLogitsLoss`` of a few Adam steps and the held-out
    logits after them (a sigmoid in the model changes them)."""
    generator = checks.seeded_generator(seed)
    x, y = _binary_blobs(24, n_in, generator)
    held_out = 3 * torch.randn(5, n_in, generator=generator)
    with checks.seeded(seed):
        net = _filled_by_shape(BinaryClassifier(n_in, n_hidden), seed)
        one = net(held_out[:1]).detach().clone()
        return (one, *_trained_logits(net, x, y, nn.BCEWithLogitsLoss(), held_out))


def binary_predict_proba_outcome(BinaryClassifier, n_in, n_hidden, seed) -> tuple:
    """``predict_proba`` of a batch and of one example, with the weights drawn from ``seed``."""
    x = 3 * torch.randn(6, n_in, generator=checks.seeded_generator(seed))
    with checks.seeded(seed):
        net = _filled_by_shape(BinaryClassifier(n_in, n_hidden), seed)
        return net.predict_proba(x).detach().clone(), net.predict_proba(x[:1]).detach().clone()


def _statistics_requests(generator):
    return _statistics_cases(generator, (2, 3, 4))


def _statistics_of(layer_statistics, seed, widths, lr):
    """The answer on a fresh net with old gradients in ``.grad`` and plain SGD: the net, the result."""
    with checks.one_thread(), checks.seeded(seed):
        model, inputs, targets, loss_fn = _statistics_net(seed, widths)
        _leave_old_gradients(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        with _quiet_first_layer(), checks.shortcuts_off(SHORTCUTS["check_layer_statistics_forward"],
                                                         layer_statistics):
            return model, layer_statistics(model, inputs, targets, loss_fn, optimizer)


def _numbers(got, key) -> torch.Tensor:
    """``got[key]`` as a float64 tensor (a value that is not a number makes the call fail)."""
    return torch.tensor([float(checks.plain_number(value)) for value in got[key]], dtype=torch.float64)


def layer_statistics_forward_outcome(layer_statistics, seed, widths, lr) -> tuple:
    """The spread of each Linear's output and the dead share of each ReLU the answer measured."""
    _, got = _statistics_of(layer_statistics, seed, widths, lr)
    return _numbers(got, "activation_std"), _numbers(got, "dead_share")


def layer_statistics_backward_outcome(layer_statistics, seed, widths, lr) -> torch.Tensor:
    """The norm of the gradient arriving at each Linear's output, as the answer measured it."""
    return _numbers(_statistics_of(layer_statistics, seed, widths, lr)[1], "grad_norm")


def layer_statistics_update_outcome(layer_statistics, seed, widths, lr) -> tuple:
    """The update ratios the answer measured, the weights after its step (one step, on this batch's
    gradients), the hooks it left behind and the model's mode."""
    model, got = _statistics_of(layer_statistics, seed, widths, lr)
    return _numbers(got, "update_ratio"), _state(model), _hooks_left(model), model.training


def diagnose_run_outcome(diagnose_run, run) -> object:
    """The label the answer gives a run (a copy of it: the judge's inputs stay as they were)."""
    return diagnose_run(copy.deepcopy(run))


def _diagnosis_runs(generator, other: str):
    """Three runs of ``other`` and three healthy ones, shuffled, as plain dicts of floats."""
    return [(training_run(kind, seed),) for kind, seed in _diagnosis_kinds(generator, other, 3)]


# ---- section 15: overfit one batch, learning-rate range test
# Exercise 11 watches the model it hands over: a forward hook notes each new set of weights the model
# runs with and the loss of that forward pass, so that the losses returned can be matched with the
# weights they were measured on, one per step, whatever optimizer the answer picked. Exercise 12
# hands over a spy optimizer that notes each step's learning rates, gradients and weights, kept in a
# log that copies of the optimizer share (an answer may run the test on copies).
FIT_BELOW = 0.05        # the loss a memorised batch must reach, as the check measures it
EARLY_STOP = 1e-3       # an answer may stop once a loss below this has been recorded
BLOW_UP = 4.0           # the range test stops once a loss exceeds this many times the lowest so far
SHORTCUTS.update(dict.fromkeys(["check_overfit_one_batch_fits", "check_overfit_one_batch_losses",
                                "check_lr_range_test_steps", "check_lr_range_test_restores"], _COURSE_LOOPS))


def _generator_of(seed):
    return checks.fresh_generator() if seed is None else checks.seeded_generator(seed)


def _on_one_thread(function):
    """``function`` run on one thread (section 14's ``_one_thread``): many tiny steps run fastest so."""
    @functools.wraps(function)
    def on_one(*args, **kwargs):
        __tracebackhide__ = True
        with checks.one_thread():
            return function(*args, **kwargs)

    return on_one


def _deep_mlp(n_in: int, width: int, depth: int, n_out: int):
    """``depth`` hidden layers of ``width`` units (ReLU); ``width`` 1 is a bottleneck that cannot memorise."""
    layers, size = [], n_in
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    return nn.Sequential(*layers, nn.Linear(size, n_out))


def _vector(params) -> torch.Tensor:
    return torch.cat([param.detach().reshape(-1) for param in params]).clone()


class _WeightsSeen:
    """Forward hooks on ``model``: each new set of weights it runs with, and the loss of the first forward
    pass with them (``None`` when that output is not one of the batch). :meth:`done` adds the weights
    the model was left with; ``len(states) - 1`` is then the number of updates."""

    def __init__(self, model, targets, loss_fn):
        self.params, self.targets, self.loss_fn = list(model.parameters()), targets, loss_fn
        self.states = []          # [weights, loss of the first forward with them]
        self.handle = model.register_forward_hook(self._seen)

    def _seen(self, module, inputs, output):
        weights = _vector(self.params)
        if not self.states or not torch.equal(weights, self.states[-1][0]):
            kept = output.detach().clone() if isinstance(output, torch.Tensor) else None
            self.states.append([weights, kept])

    def done(self):
        """Stop watching; each state's output becomes its loss on the batch (``None`` for an output of
        another batch, or none)."""
        self.handle.remove()
        weights = _vector(self.params)
        if not self.states or not torch.equal(weights, self.states[-1][0]):
            self.states.append([weights, None])
        for state in self.states:
            output, state[1] = state[1], None
            with torch.no_grad(), contextlib.suppress(Exception):   # an output of another batch: no loss
                if output is not None and output.shape[:1] == self.targets.shape[:1]:
                    state[1] = float(self.loss_fn(output, self.targets))
        return self


def _memorising_task(generator, fittable: bool):
    """Sizes, a batch of random points with random labels (the model must memorise them) and a model:
    a small MLP, or one with a bottleneck of width 1 for 6 classes, which cannot."""
    if fittable:
        n_in, width, depth = _draw(generator, 6, 12), _draw(generator, 16, 40), _draw(generator, 1, 2)
        n_classes, n = _draw(generator, 3, 6), _draw(generator, 8, 32)
    else:
        n_in, width, depth, n_classes, n = _draw(generator, 3, 6), 1, 1, 6, _draw(generator, 18, 30)
    return n_in, width, depth, n_classes, n


def _memorise(overfit_one_batch, sizes, seed, max_steps, *, run):
    """The answer on a fresh model: what it returned, the model's loss before (measured on a copy) and
    after, and the weights it ran with."""
    n_in, width, depth, n_classes, n = sizes
    generator = checks.seeded_generator(seed)
    inputs = torch.randn(n, n_in, generator=generator)
    targets = torch.randint(0, n_classes, (n,), generator=generator)
    with checks.seeded(seed):
        model = _deep_mlp(n_in, width, depth, n_classes)
        before = F.cross_entropy(copy.deepcopy(model)(inputs).detach(), targets).item()
        seen = _WeightsSeen(model, targets, F.cross_entropy)
        try:
            returned = run(overfit_one_batch, model, inputs, targets, F.cross_entropy, max_steps)
        finally:
            seen.done()
    after = F.cross_entropy(model(inputs).detach(), targets).item()
    return returned, before, after, seen.states


def _losses_problem(returned, states, max_steps):
    """What is wrong with the losses returned, as ``(expected, got)`` texts; ``None`` when they are the
    real ones: floats, one per update (and one more only after a loss below EARLY_STOP), each the loss
    of the weights of its step, no more than ``max_steps``, and an early stop only below EARLY_STOP."""
    if not isinstance(returned, list) or not all(type(value) is float for value in returned):
        return (checks.both("una lista de float de Python", "a list of Python floats"),
                checks.describe(returned))
    steps = len(states) - 1
    early = bool(returned) and returned[-1] < EARLY_STOP
    if not (len(returned) == steps or (early and len(returned) == steps + 1)) or not returned:
        return (checks.both("una pérdida por paso del optimizador", "one loss per optimizer step"),
                checks.both(f"{len(returned)} pérdidas, {steps} pasos",
                            f"{len(returned)} losses, {steps} steps"))
    if steps > max_steps or len(returned) > max_steps:
        return (checks.both(f"como mucho {max_steps} pasos", f"at most {max_steps} steps"),
                checks.both(f"{steps} pasos", f"{steps} steps"))
    if len(returned) < max_steps and not early:
        return (checks.both(f"{max_steps} pasos, o parar antes solo tras una pérdida menor que "
                            f"{EARLY_STOP:g}",
                            f"{max_steps} steps, or an earlier stop only after a loss below {EARLY_STOP:g}"),
                checks.both(f"paró tras {len(returned)} con pérdida {returned[-1]:.4g}",
                            f"stopped after {len(returned)} with loss {returned[-1]:.4g}"))
    for step, (value, (_, real)) in enumerate(zip(returned, states, strict=False)):
        if real is None or not math.isclose(value, real, rel_tol=1e-4, abs_tol=1e-6):
            shown = "-" if real is None else f"{real:.6g}"
            return (checks.both(f"pérdida {step}: la del modelo con los pesos de ese paso, {shown}",
                                f"loss {step}: the model's with the weights of that step, {shown}"),
                    f"{value:.6g}")
    return None


def _call_overfit(answer, model, inputs, targets, loss_fn, max_steps, *, name):
    return _run("check_overfit_one_batch_fits", answer, model, inputs, targets, loss_fn, max_steps, name=name,
                hint=HINTS["overfit_one_batch"])


@checks.keeps_random_state
@_on_one_thread
def check_overfit_one_batch_fits(overfit_one_batch, seed=None, max_steps=300):
    """A fresh MLP and a batch of random points with random labels: after the call, the model's own loss
    on that batch, measured here, is below FIT_BELOW."""
    generator = _generator_of(seed)
    sizes, case_seed = _memorising_task(generator, fittable=True), _seed(generator)
    n_in, width, depth, n_classes, n = sizes
    name = (f"overfit_one_batch(MLP {n_in}-{'-'.join([str(width)] * depth)}-{n_classes}, {n} examples, "
            f"cross_entropy, max_steps={max_steps})")
    _, _, after, _ = _memorise(overfit_one_batch, sizes, case_seed, max_steps,
                               run=functools.partial(_call_overfit, name=name))
    checks.check_true(after < FIT_BELOW, hint=HINTS["overfit_one_batch"], got=f"{after:.4f}",
                      name=checks.both(f"pérdida del modelo en su lote tras {name}",
                                       f"the model's loss on its batch after {name}"),
                      expected=checks.both(f"menos de {FIT_BELOW} (el lote memorizado)",
                                           f"below {FIT_BELOW} (the batch memorised)"))


@checks.keeps_random_state
@_on_one_thread
def check_overfit_one_batch_losses(overfit_one_batch, seed=None, max_steps=300, bottleneck_steps=25):
    """The losses returned are the real ones, one per step: on a model that can memorise its batch, and
    on one that cannot (a bottleneck of width 1), which must still stop within its max_steps."""
    generator = _generator_of(seed)
    hint = HINTS["overfit_one_batch"]
    for fittable, steps in ((True, max_steps), (False, bottleneck_steps)):
        sizes, case_seed = _memorising_task(generator, fittable), _seed(generator)
        n_in, width, depth, n_classes, n = sizes
        label = f"MLP {n_in}-{width}-{n_classes}" + ("" if fittable else " (bottleneck of width 1)")
        name = f"overfit_one_batch({label}, {n} examples, cross_entropy, max_steps={steps})"
        returned, before, _, states = _memorise(overfit_one_batch, sizes, case_seed, steps,
                                                run=functools.partial(_call_overfit, name=name))
        problem = _losses_problem(returned, states, steps)
        if problem is not None:
            checks.fail(name, checks.say(checks.both("las pérdidas devueltas no son las reales",
                                                     "the losses returned are not the real ones")),
                        checks.say(problem[0]), checks.say(problem[1]), hint)
        checks.check_close(returned[0], before, name=f"{name}[0]", hint=hint)


class _Log(list):
    """A list that copies of its owner share: ``copy.deepcopy`` gives the list itself."""

    def __deepcopy__(self, memo):
        return self


class _RangeSGD(torch.optim.SGD):
    """SGD that notes, in ``log`` (shared with its copies), each step's learning rates, the gradients it
    used and the weights before and after."""

    def __init__(self, params, log, **settings):
        super().__init__(params, **settings)
        self.log = log

    def __getstate__(self):          # a copy keeps the log (an optimizer's state leaves its attributes out)
        return {**super().__getstate__(), "log": self.log}

    def step(self, closure=None):
        params = [param for group in self.param_groups for param in group["params"]]
        note = {"lrs": [group["lr"] for group in self.param_groups], "grads": _snapshot_grads(params),
                "before": _vector(params)}
        result = super().step(closure)
        note["after"] = _vector(params)
        self.log.append(note)
        return result


def _snapshot_grads(params) -> list:
    return [None if param.grad is None else param.grad.detach().clone() for param in params]


def _range_task(seed, n_in, width, n_classes, n_steps, low, high, momentum=0.9):
    """A seeded MLP, ``n_steps`` batches of random points and labels, learning rates growing geometrically
    from ``low`` to ``high`` (Python floats), and a spy SGD with two parameter groups, already warmed up
    by two steps (its momentum is state to give back)."""
    generator = checks.seeded_generator(seed)
    batches = [classification_batch(16, n_in, n_classes, generator) for _ in range(n_steps)]
    lrs = [low * (high / low) ** (k / max(1, n_steps - 1)) for k in range(n_steps)]
    with checks.seeded(seed):
        model = mlp(n_in, width, n_classes)
    params = list(model.parameters())
    log = _Log()
    spy = _RangeSGD([{"params": params[:2]}, {"params": params[2:]}], log, lr=low, momentum=momentum)
    for x, y in batches[:2]:
        spy.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        spy.step()
    spy.zero_grad(set_to_none=True)
    log.clear()
    return model, spy, batches, lrs, log


def _loss_with(model, weights, batch, *, grads: bool = False):
    """The loss of ``model``'s structure with ``weights`` (a vector) on ``batch``, and its gradients."""
    named, start = {}, 0
    for key, param in model.named_parameters():
        named[key] = weights[start:start + param.numel()].view_as(param).clone().requires_grad_(grads)
        start += param.numel()
    measured = F.cross_entropy(torch.func.functional_call(model, named, (batch[0],)), batch[1])
    if not grads:
        return measured.item()
    return measured.item(), torch.autograd.grad(measured, list(named.values()))


def _expected_length(losses, n_steps) -> tuple[int, bool]:
    """How many losses the range test records, and whether it stopped on a bad one: up to the first that
    is not finite or exceeds BLOW_UP times the lowest before it, that one included."""
    for step, value in enumerate(losses[:n_steps]):
        if not math.isfinite(value) or (step and value > BLOW_UP * min(losses[:step])):
            return step + 1, True
    return n_steps, False


def _same_loss(got, want) -> bool:
    if not math.isfinite(want):
        return not math.isfinite(got)
    return math.isfinite(got) and math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-6)


@checks.keeps_random_state
@_on_one_thread
def check_lr_range_test_steps(lr_range_test, seed=None):
    """Two runs, one whose rates grow far enough to blow the loss up and one that stays low: step k ran
    with ``lrs[k]`` in every group on ``batches[k]``, the losses are the real ones, and the run stops
    right after the first loss that is not finite or exceeds BLOW_UP times the lowest before it."""
    generator = _generator_of(seed)
    hint = HINTS["lr_range_test"]
    for low, high in ((1e-3, 100.0), (1e-5, 1e-3)):
        n_in, width, n_classes, n_steps = (_draw(generator, 2, 6), _draw(generator, 8, 24),
                                           _draw(generator, 3, 5), _draw(generator, 25, 35))
        model, optimizer, batches, lrs, log = _range_task(_seed(generator), n_in, width, n_classes, n_steps,
                                                          low, high)
        name = (f"lr_range_test(MLP {n_in}-{width}-{n_classes}, SGD, {n_steps} batches, "
                f"lrs {low:g} → {high:g})")
        start = _vector(model.parameters())
        returned = _run("check_lr_range_test_steps", lr_range_test, model, optimizer, batches,
                        F.cross_entropy, lrs, name=name, hint=hint)
        checks.check_true(isinstance(returned, list) and bool(returned)
                          and all(type(value) is float for value in returned), name=name, hint=hint,
                          expected=checks.both("una lista no vacía de float de Python",
                                               "a non-empty list of Python floats"),
                          got=checks.describe(returned))
        states = [start] + [note["after"] for note in log]
        for step, value in enumerate(returned[:min(len(states), n_steps)]):
            real = _loss_with(model, states[step], batches[step])
            checks.check_true(_same_loss(value, real), name=f"{name}[{step}]", hint=hint, got=f"{value:.6g}",
                              expected=checks.both(
                                  f"{real:.6g}: la pérdida de batches[{step}] con los pesos de antes del "
                                  f"paso {step}",
                                  f"{real:.6g}: the loss of batches[{step}] with the weights before "
                                  f"step {step}"))
        length, stopped = _expected_length(returned, n_steps)
        checks.check_equal(len(returned), length, hint=hint, name=checks.both(
            f"pérdidas anotadas por {name} (se para tras la primera no finita o mayor que {BLOW_UP:g} veces "
            "la menor)",
            f"losses recorded by {name} (it stops after the first one not finite or above {BLOW_UP:g} times "
            "the lowest)"))
        checks.check_equal(len(log), length - 1 if stopped else n_steps, hint=hint, name=checks.both(
            f"pasos del optimizador en {name}", f"optimizer steps in {name}"))
        for step, note in enumerate(log):
            checks.check_equal(note["lrs"], [lrs[step]] * 2, hint=hint, name=checks.both(
                f"tasa de aprendizaje de cada grupo en el paso {step} [{name}]",
                f"learning rate of each group at step {step} [{name}]"))
            _, wanted = _loss_with(model, note["before"], batches[step], grads=True)
            for index, (got, want) in enumerate(zip(note["grads"], wanted, strict=True)):
                checks.check_true(got is not None and torch.allclose(got, want, rtol=1e-4, atol=1e-6),
                                  name=f"{name}, step {step}", hint=hint, got=checks.both(
                                      "otros gradientes", "other gradients"),
                                  expected=checks.both(
                                      f"el gradiente {index} de la pérdida de batches[{step}], y solo ese",
                                      f"gradient {index} of the loss of batches[{step}], and only that"))


@checks.keeps_random_state
@_on_one_thread
def check_lr_range_test_restores(lr_range_test, seed=None):
    """With the model in training and in evaluation mode, and SGD with momentum: after a run that took
    steps, the weights, the momentum, the groups' learning rates and the mode are as they were."""
    generator = _generator_of(seed)
    hint = HINTS["lr_range_test"]
    for in_training in (True, False):
        n_in, width, n_classes, n_steps = (_draw(generator, 2, 6), _draw(generator, 8, 24),
                                           _draw(generator, 3, 5), _draw(generator, 10, 20))
        model, optimizer, batches, lrs, log = _range_task(_seed(generator), n_in, width, n_classes, n_steps,
                                                          1e-3, 100.0)
        model.train(in_training)
        kept = _optimizer_state(model, optimizer)
        weights = _state(model)
        name = f"lr_range_test(MLP {n_in}-{width}-{n_classes}, SGD momentum=0.9, {n_steps} batches)"
        _run("check_lr_range_test_restores", lr_range_test, model, optimizer, batches, F.cross_entropy, lrs,
             name=name, hint=hint)
        checks.check_true(len(log) > 0, name=name, hint=hint, got="0",
                          expected=checks.both("pasos del optimizador durante la prueba",
                                               "optimizer steps during the test"))
        for key, value in _state(model).items():
            checks.check_close(value, weights[key], hint=hint,
                               name=checks.both(f"{key} tras {name}", f"{key} after {name}"))
        now = _optimizer_state(model, optimizer)
        checks.check_equal(now["lrs"], kept["lrs"], hint=hint, name=checks.both(
            f"tasas de aprendizaje de los grupos tras {name}", f"the groups' learning rates after {name}"))
        for index, (got, want) in enumerate(zip(now["momentum"], kept["momentum"], strict=True)):
            checks.check_true(got is not None and torch.equal(got, want), name=name, hint=hint,
                              got=checks.both("otro estado", "another state"),
                              expected=checks.both(f"el momento del parámetro {index} como estaba",
                                                   f"the momentum of parameter {index} as it was"))
        checks.check_equal(model.training, in_training, hint=hint, name=f"model.training [{name}]")


def _optimizer_state(model, optimizer) -> dict:
    """The groups' learning rates and each parameter's momentum buffer, cloned."""
    buffers = [optimizer.state.get(param, {}).get("momentum_buffer") for param in model.parameters()]
    return {"lrs": [group["lr"] for group in optimizer.param_groups],
            "momentum": [None if buffer is None else buffer.detach().clone() for buffer in buffers]}


# ------------------------------------------------------------- section 15: the judge's outcomes
def _memorising_cases(generator, with_bottleneck: bool):
    cases = [(*_memorising_task(generator, True), _seed(generator), 300) for _ in range(2)]
    return cases + ([(*_memorising_task(generator, False), _seed(generator), _draw(generator, 15, 30))]
                    if with_bottleneck else [])


@_on_one_thread
def overfit_one_batch_fits_outcome(overfit_one_batch, n_in, width, depth, n_classes, n, seed,
                                   max_steps) -> dict:
    """A fresh MLP and a batch of random labels: whether the model's loss on it, measured after the
    call, is below FIT_BELOW (whatever optimizer the answer picked)."""
    _, _, after, _ = _memorise(overfit_one_batch, (n_in, width, depth, n_classes, n), seed, max_steps,
                               run=lambda answer, *args: answer(*args))
    return {"fit": after < FIT_BELOW}


@_on_one_thread
def overfit_one_batch_losses_outcome(overfit_one_batch, n_in, width, depth, n_classes, n, seed,
                                     max_steps) -> dict:
    """Whether the losses returned are the real ones (floats, one per step, each the loss of its
    step's weights, within max_steps), the first of them, and how many there are on a model that
    cannot memorise its batch (width 1), where every answer takes max_steps steps."""
    returned, _, _, states = _memorise(overfit_one_batch, (n_in, width, depth, n_classes, n), seed, max_steps,
                                       run=lambda answer, *args: answer(*args))
    real = _losses_problem(returned, states, max_steps) is None
    return {"real": real, "first": returned[0] if real else None,
            "count": len(returned) if width == 1 else None}


def _range_cases(generator):
    return [(_seed(generator), _draw(generator, 2, 6), _draw(generator, 8, 24), _draw(generator, 3, 5),
             _draw(generator, 12, 30), low, high) for low, high in ((1e-3, 100.0), (1e-5, 1e-3))]


@_on_one_thread
def lr_range_test_steps_outcome(lr_range_test, seed, n_in, width, n_classes, n_steps, low, high) -> dict:
    """The losses returned (floats? the values, a non-finite one as a sentinel) and, for each optimizer
    step, the groups' learning rates (a step on another batch, or a loss taken after its step, changes
    the losses)."""
    model, optimizer, batches, lrs, log = _range_task(seed, n_in, width, n_classes, n_steps, low, high)
    with checks.seeded(seed):
        returned = lr_range_test(model, optimizer, batches, F.cross_entropy, lrs)
    values = torch.tensor([float(value) for value in returned], dtype=torch.float64)
    return {"floats": [type(value) is float for value in returned],
            "losses": torch.nan_to_num(values, nan=-1.0, posinf=1e30, neginf=-1e30),
            "lrs": [note["lrs"] for note in log]}


def _restoring_cases(generator):
    return [(_seed(generator), _draw(generator, 2, 6), _draw(generator, 8, 24), _draw(generator, 3, 5),
             _draw(generator, 10, 20), training) for training in (True, False)]


@_on_one_thread
def lr_range_test_restores_outcome(lr_range_test, seed, n_in, width, n_classes, n_steps, training) -> dict:
    """After a range test that blows up (SGD with momentum, the model in ``training`` mode): the
    weights, the momentum buffers, the groups' learning rates, the mode, and how many steps it took
    (a test that does nothing has restored nothing)."""
    model, optimizer, batches, lrs, log = _range_task(seed, n_in, width, n_classes, n_steps, 1e-3, 100.0)
    model.train(training)
    with checks.seeded(seed):
        lr_range_test(model, optimizer, batches, F.cross_entropy, lrs)
    return {"weights": _state(model), **_optimizer_state(model, optimizer), "training": model.training,
            "steps": len(log)}


# ---- section 16: scripts with unnamed faults
# Each repair is graded one fault at a time: every check picks inputs under which the script's other
# two faults change nothing (batches of one example, where (N, 1) and (N,) agree; a single step, where
# nothing is left to clear and the rate has not moved yet; a model without dropout), and compares the
# weights the call leaves with SGD worked out by hand on a linear model, or the returned accuracy with
# the one the check measures. The faults a student names are checked against the truth kept in the
# hidden tests (and by the judge, against the reference's set); the menu lists more kinds than faults.
SHORTCUTS.update(dict.fromkeys(["check_fit_regressor_one_batch", "check_fit_regressor_one_epoch",
                                "check_fit_regressor_epochs", "check_train_and_evaluate_one_step",
                                "check_train_and_evaluate_epochs", "check_train_and_evaluate_returned"],
                               _COURSE_LOOPS))
SCRIPT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
HALVING = 0.5   # fit_regressor's rate is halved after every epoch

FAULT_KINDS = {
    "gradients_never_cleared": checks.both(
        "los gradientes de los pasos anteriores se suman a los del paso actual",
        "the gradients of earlier steps add to those of the current step"),
    "step_before_backward": checks.both(
        "el optimizador da el paso antes de la pasada hacia atrás",
        "the optimizer steps before the backward pass"),
    "target_shape_broadcast": checks.both(
        "la predicción (N, 1) y el objetivo (N,) se comparan con broadcasting: "
        "cada predicción con cada objetivo",
        "the (N, 1) prediction and the (N,) target are broadcast: every prediction against every target"),
    "loss_tensor_accumulated": checks.both(
        "la pérdida se suma como tensor y no como número: sus grafos siguen vivos",
        "the loss is summed as a tensor, not as a number: its graphs stay alive"),
    "scheduler_stepped_per_batch": checks.both(
        "el programador de la tasa de aprendizaje avanza en cada lote y no en cada época",
        "the learning-rate scheduler moves on at every batch instead of every epoch"),
    "softmax_before_cross_entropy": checks.both(
        "la entropía cruzada recibe probabilidades donde espera logits",
        "cross-entropy is given probabilities where it expects logits"),
    "eval_mode_never_undone": checks.both(
        "tras una evaluación, el modelo sigue en modo evaluación durante el entrenamiento que viene",
        "after an evaluation, the model stays in evaluation mode for the training that follows"),
    "accuracy_averaged_over_batches": checks.both(
        "la exactitud es la media de las exactitudes de los lotes, no la proporción de ejemplos acertados",
        "the accuracy is the mean of the batches' accuracies, not the share of right examples"),
    "optimizer_on_another_model": checks.both(
        "el optimizador actualiza los parámetros de otro modelo, no los del que se entrena",
        "the optimizer updates the parameters of another model, not those of the one trained"),
    "labels_as_floats": checks.both(
        "las etiquetas de clase llegan a la entropía cruzada como float (se leen como probabilidades)",
        "class labels reach cross-entropy as floats (read as probabilities)"),
    "evaluation_builds_a_graph": checks.both(
        "la evaluación construye un grafo que nadie usa (sin torch.no_grad())",
        "the evaluation builds a graph nobody uses (no torch.no_grad())"),
    "batch_on_another_device": checks.both(
        "el lote y el modelo están en dispositivos distintos",
        "the batch and the model are on different devices"),
}


def show_fault_kinds() -> None:
    """Print the menu of fault kinds that FAULTS_... sets take their names from."""
    for key, text in FAULT_KINDS.items():
        print(f"{key!r:34} {checks.say(text)}")


# ------------------------------------------------------------- fit_regressor: SGD on a line, by hand
def _line_case(seed, n_in, n_batches, n, epochs, lr):
    """A fresh ``nn.Linear(n_in, 1)`` and ``n_batches`` batches of ``n`` examples, targets ``(n,)``."""
    generator = checks.seeded_generator(seed)
    batches = [(torch.randn(n, n_in, generator=generator), torch.randn(n, generator=generator))
               for _ in range(n_batches)]
    with checks.seeded(seed):
        model = nn.Linear(n_in, 1)
    return model, batches


def _sgd_by_hand(weight, bias, batches, epochs, lr, *, cleared: bool, per_batch: bool):
    """Plain SGD on the mean squared error of ``x @ weight.T + bias`` against the targets, worked out by
    hand in float64: the gradients cleared before each step or not, the rate halved after every batch
    or every epoch. Returns the weight, the bias and the mean loss of each epoch."""
    w, b = weight.detach().double().clone(), bias.detach().double().clone()
    grad_w, grad_b = torch.zeros_like(w), torch.zeros_like(b)
    rate, means = lr, []
    for _ in range(epochs):
        losses = []
        for inputs, targets in batches:
            residual = inputs.double() @ w[0] + b[0] - targets.double()
            losses.append(residual.pow(2).mean().item())
            if cleared:
                grad_w, grad_b = torch.zeros_like(w), torch.zeros_like(b)
            grad_w = grad_w + 2 / len(targets) * (residual @ inputs.double())[None, :]
            grad_b = grad_b + 2 / len(targets) * residual.sum()[None]
            w, b = w - rate * grad_w, b - rate * grad_b
            rate = rate * HALVING if per_batch else rate
        rate = rate if per_batch else rate * HALVING
        means.append(sum(losses) / len(losses))
    return w.float(), b.float(), means


def _close(got, want) -> bool:
    try:
        torch.testing.assert_close(got.detach().float(), want, **SCRIPT_TOLERANCE)
    except (AssertionError, RuntimeError, TypeError):
        return False
    return True


def _run_fit_regressor(answer, case, *, check=None, name=None, hint=None):
    """``answer`` on the case's fresh line model and batches: the model after, and what it returned."""
    seed, n_in, n_batches, n, epochs, lr = case
    model, batches = _line_case(*case)
    start = (model.weight.detach().clone(), model.bias.detach().clone())
    if check is None:
        with checks.seeded(seed):
            returned = answer(model, batches, epochs, lr)
    else:
        returned = _run(check, answer, model, batches, epochs, lr, name=name, hint=hint)
    matches = {(cleared, per_batch): _sgd_by_hand(*start, batches, epochs, lr, cleared=cleared,
                                                  per_batch=per_batch)
               for cleared in (True, False) for per_batch in (True, False)}
    seen = {key: _close(model.weight, w) and _close(model.bias, b) for key, (w, b, _) in matches.items()}
    return model, returned, matches, seen


def _fit_label(case) -> str:
    seed, n_in, n_batches, n, epochs, lr = case
    return (f"fit_regressor_fixed(nn.Linear({n_in}, 1), {n_batches} × ({n}, {n_in}) → ({n},), "
            f"epochs={epochs}, lr={lr})")


def _check_history(returned, epochs, name, hint) -> None:
    __tracebackhide__ = True
    checks.check_type(returned, list, name=name, hint=hint)
    checks.check_equal(len(returned), epochs, hint=hint, name=checks.both(f"len(lo devuelto por {name})",
                                                                      f"len(what {name} returned)"))
    for epoch, value in enumerate(returned):
        checks.check_type(value, float, name=f"{name}[{epoch}]", hint=hint)


def _check_weights(model, want, name, hint, steps) -> None:
    __tracebackhide__ = True
    w, b, _ = want
    for label, got, expected in (("weight", model.weight, w), ("bias", model.bias, b)):
        checks.check_close(got.detach(), expected, hint=hint, **SCRIPT_TOLERANCE, name=checks.both(
            f"model.{label} tras {name} (lo que da SGD hecho a mano, pasos: {steps})",
            f"model.{label} after {name} (what SGD worked out by hand gives, steps: {steps})"))


def _fit_cases(generator, *, kind: str):
    """``(seed, n_in, n_batches, n, epochs, lr)``: one batch of several examples and one epoch; several
    batches of one example and one epoch; several epochs of batches of one example."""
    sizes = {"one_batch": lambda: (1, _draw(generator, 4, 9), 1),
             "one_epoch": lambda: (_draw(generator, 2, 4), 1, 1),
             "epochs": lambda: (_draw(generator, 2, 3), 1, _draw(generator, 2, 3))}[kind]
    cases = []
    for _ in range(2):
        n_batches, n, epochs = sizes()
        cases.append((_seed(generator), _draw(generator, 2, 4), n_batches, n, epochs,
                      _rate(generator, 0.05, 0.2)))
    return cases


@checks.keeps_random_state
def check_fit_regressor_one_batch(fit_regressor_fixed, seed=None):
    """One epoch of one batch of several examples, targets ``(N,)``, on a fresh model: the weights are
    those of one SGD step on the mean squared error, and the loss returned is that step's."""
    hint = HINTS["fit_regressor_fixed"]
    for case in _fit_cases(_generator_of(seed), kind="one_batch"):
        name = _fit_label(case)
        model, returned, matches, _ = _run_fit_regressor(fit_regressor_fixed, case, name=name, hint=hint,
                                                         check="check_fit_regressor_one_batch")
        _check_history(returned, case[4], name, hint)
        want = matches[True, False]
        _check_weights(model, want, name, hint, 1)
        checks.check_close(returned[0], want[2][0], hint=hint, rtol=1e-4, atol=1e-6, name=checks.both(
            f"la pérdida de la época que devuelve {name}", f"the epoch's loss {name} returns"))


@checks.keeps_random_state
def check_fit_regressor_one_epoch(fit_regressor_fixed, seed=None):
    """One epoch of several batches of one example each, on a fresh model: each step moves the weights
    with the gradient of its own batch (at the first epoch's rate, or a rate that moves per batch)."""
    _check_fit_regressor_steps(fit_regressor_fixed, seed, "one_epoch", accepted=((True, False), (True, True)))


@checks.keeps_random_state
def check_fit_regressor_epochs(fit_regressor_fixed, seed=None):
    """Several epochs of batches of one example each: the rate is ``lr`` in the first epoch and halves
    after each epoch (with or without leftovers in ``.grad``)."""
    _check_fit_regressor_steps(fit_regressor_fixed, seed, "epochs", accepted=((True, False), (False, False)))


def _check_fit_regressor_steps(fit_regressor_fixed, seed, kind: str, accepted) -> None:
    """The weights after the call are those of SGD by hand in one of the ``accepted`` ways ``(gradients
    cleared, rate halved per batch)``; otherwise the failure shows the right way's."""
    __tracebackhide__ = True
    hint = HINTS["fit_regressor_fixed"]
    for case in _fit_cases(_generator_of(seed), kind=kind):
        name = _fit_label(case)
        model, returned, matches, seen = _run_fit_regressor(fit_regressor_fixed, case, name=name, hint=hint,
                                                            check=f"check_fit_regressor_{kind}")
        _check_history(returned, case[4], name, hint)
        if not any(seen[way] for way in accepted):
            _check_weights(model, matches[True, False], name, hint, case[2] * case[4])


def fit_regressor_one_batch_outcome(fit_regressor_fixed, seed, n_in, n_batches, n, epochs, lr) -> tuple:
    """One step on a fresh line model: the weights after it, and the losses returned (floats?)."""
    model, returned, _, _ = _run_fit_regressor(fit_regressor_fixed, (seed, n_in, n_batches, n, epochs, lr))
    return (*_floats(returned), _state(model))


def fit_regressor_one_epoch_outcome(fit_regressor_fixed, seed, n_in, n_batches, n, epochs, lr) -> dict:
    """Whether the weights are those of steps that each used their own batch's gradient alone."""
    _, _, _, seen = _run_fit_regressor(fit_regressor_fixed, (seed, n_in, n_batches, n, epochs, lr))
    return {"own gradients": seen[True, False] or seen[True, True]}


def fit_regressor_epochs_outcome(fit_regressor_fixed, seed, n_in, n_batches, n, epochs, lr) -> dict:
    """Whether the weights are those of a rate halved once per epoch."""
    _, _, _, seen = _run_fit_regressor(fit_regressor_fixed, (seed, n_in, n_batches, n, epochs, lr))
    return {"rate per epoch": seen[True, False] or seen[False, False]}


# ------------------------------------------------------ train_and_evaluate: one step, modes, accuracy
def _classes_case(seed, n_in, n_classes, n_train, n_batches, dropout):
    generator = checks.seeded_generator(seed)
    train = [classification_batch(n_train, n_in, n_classes, generator) for _ in range(n_batches)]
    # the test batches: one example, then the same point under every label and a few more, so
    # that the two batches' accuracies differ whatever the model predicts
    point = torch.randn(1, n_in, generator=generator)
    extra = classification_batch(_draw(generator, 1, 4), n_in, n_classes, generator)
    test = [(point, torch.randint(0, n_classes, (1,), generator=generator)),
            (torch.cat([point.expand(n_classes, n_in), extra[0]]),
             torch.cat([torch.arange(n_classes), extra[1]]))]
    with checks.seeded(seed):
        model = mlp(n_in, 8, n_classes, dropout=dropout) if dropout else nn.Linear(n_in, n_classes)
    return model, train, test


def _train_label(case) -> str:
    seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr = case
    what = (f"MLP {n_in}-8-{n_classes} with Dropout({dropout})" if dropout
            else f"nn.Linear({n_in}, {n_classes})")
    return (f"train_and_evaluate_fixed({what}, {n_batches} training batches of {n_train}, "
            f"2 test batches, epochs={epochs}, lr={lr})")


def _train_cases(generator, *, kind: str):
    """``(seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr)``."""
    cases = []
    for _ in range(2):
        n_in, n_classes, n_train = _draw(generator, 2, 5), _draw(generator, 2, 5), _draw(generator, 4, 10)
        n_batches, dropout, epochs = {"one_step": (1, 0.0, 1), "epochs": (2, 0.5, _draw(generator, 2, 3)),
                                      "returned": (_draw(generator, 1, 3), 0.0, _draw(generator, 1, 2))}[kind]
        cases.append((_seed(generator), n_in, n_classes, n_train, n_batches, dropout, epochs,
                      _rate(generator, 0.1, 0.5)))
    return cases


def _run_train_and_evaluate(answer, case, *, check=None, name=None, hint=None):
    """``answer`` on the case's model and batches, watched: the model, what it returned, its start, and
    for each forward pass on a training batch with a graph, whether Dropout was in training mode."""
    seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr = case
    model, train, test = _classes_case(seed, n_in, n_classes, n_train, n_batches, dropout)
    start = {key: value.detach().clone() for key, value in model.state_dict().items()}
    inputs = [x for x, _ in train]
    modes = []

    def note(module, args, output):
        if torch.is_grad_enabled() and args and any(args[0] is x for x in inputs):
            modes.append(model[2].training if dropout else module.training)

    handle = model.register_forward_hook(note)
    try:
        if check is None:
            with checks.seeded(seed):
                returned = answer(model, train, test, epochs, lr)
        else:
            returned = _run(check, answer, model, train, test, epochs, lr, name=name, hint=hint)
    finally:
        handle.remove()
    return model, returned, start, modes, (train, test)


def _one_step_by_hand(start, x, y, lr):
    """The weight and bias of a linear classifier after one SGD step on the cross-entropy of its logits."""
    w, b = start["weight"].double(), start["bias"].double()
    logits = x.double() @ w.T + b
    pull = (logits.softmax(dim=1) - F.one_hot(y, w.shape[0]).double()) / len(y)
    return (w - lr * pull.T @ x.double()).float(), (b - lr * pull.sum(dim=0)).float()


@torch.no_grad()
def _share_right(model, test) -> float:
    """The share of the test examples the model, in evaluation mode (a copy), classifies right."""
    judge = copy.deepcopy(model).train(False)
    right = sum(int((judge(x).argmax(dim=1) == y).sum()) for x, y in test)
    return right / sum(len(y) for _, y in test)


@checks.keeps_random_state
def check_train_and_evaluate_one_step(train_and_evaluate_fixed, seed=None):
    """One epoch of one batch on a linear classifier: the weights are those of one SGD step on the
    cross-entropy of the model's outputs."""
    hint = HINTS["train_and_evaluate_fixed"]
    for case in _train_cases(_generator_of(seed), kind="one_step"):
        name = _train_label(case)
        model, _, start, _, (train, _) = _run_train_and_evaluate(
            train_and_evaluate_fixed, case, check="check_train_and_evaluate_one_step", name=name, hint=hint)
        _check_weights(model, (*_one_step_by_hand(start, *train[0], case[-1]), None), name, hint, 1)


@checks.keeps_random_state
def check_train_and_evaluate_epochs(train_and_evaluate_fixed, seed=None):
    """Several epochs on a model with Dropout: one forward pass with a graph per training batch and
    epoch, each with Dropout in training mode."""
    hint = HINTS["train_and_evaluate_fixed"]
    for case in _train_cases(_generator_of(seed), kind="epochs"):
        name = _train_label(case)
        _, _, _, modes, _ = _run_train_and_evaluate(train_and_evaluate_fixed, case, name=name, hint=hint,
                                                    check="check_train_and_evaluate_epochs")
        steps = case[4] * case[6]
        checks.check_true(len(modes) == steps and all(modes), hint=hint, name=checks.both(
            f"model[2] (Dropout).training en las pasadas hacia delante de entrenamiento de {name}",
            f"model[2] (Dropout).training in the training forward passes of {name}"),
            expected=checks.both(f"{steps} pasadas, todas con training=True",
                                 f"{steps} passes, all with training=True"),
            got=checks.both(f"{len(modes)} pasadas: {modes}", f"{len(modes)} passes: {modes}"))


@checks.keeps_random_state
def check_train_and_evaluate_returned(train_and_evaluate_fixed, seed=None):
    """Test batches of different sizes on a linear classifier: the number returned is the share of the
    test examples the trained model classifies right."""
    hint = HINTS["train_and_evaluate_fixed"]
    for case in _train_cases(_generator_of(seed), kind="returned"):
        name = _train_label(case)
        model, returned, _, _, (_, test) = _run_train_and_evaluate(
            train_and_evaluate_fixed, case, check="check_train_and_evaluate_returned", name=name, hint=hint)
        sizes = " + ".join(str(len(y)) for _, y in test)
        share = _share_right(model, test)
        checks.check_close(returned, share, hint=hint, rtol=0, atol=1e-6, name=checks.both(
            f"lo que devuelve {name} (la exactitud del modelo entrenado sobre {sizes} ejemplos de prueba)",
            f"what {name} returns (the trained model's accuracy over {sizes} test examples)"))


def train_and_evaluate_one_step_outcome(train_and_evaluate_fixed, seed, n_in, n_classes, n_train, n_batches,
                                        dropout, epochs, lr) -> dict:
    """The linear classifier's weights after one epoch of one batch."""
    model, _, _, _, _ = _run_train_and_evaluate(
        train_and_evaluate_fixed, (seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr))
    return _state(model)


def train_and_evaluate_epochs_outcome(train_and_evaluate_fixed, seed, n_in, n_classes, n_train, n_batches,
                                      dropout, epochs, lr) -> list:
    """Dropout's mode in each forward pass with a graph on a training batch."""
    _, _, _, modes, _ = _run_train_and_evaluate(
        train_and_evaluate_fixed, (seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr))
    return modes


def train_and_evaluate_returned_outcome(train_and_evaluate_fixed, seed, n_in, n_classes, n_train, n_batches,
                                        dropout, epochs, lr) -> dict:
    """Whether the number returned is the trained model's share of right test examples."""
    model, returned, _, _, (_, test) = _run_train_and_evaluate(
        train_and_evaluate_fixed, (seed, n_in, n_classes, n_train, n_batches, dropout, epochs, lr))
    number = checks.plain_number(returned)
    return {"share of right examples": number is not None and abs(number - _share_right(model, test)) < 1e-6}


# ------------------------------------------------------------------------------- naming the faults
def _names(value, name) -> set:
    """The names in ``value`` (a set, list or tuple of menu keys), or a failure that lists the keys."""
    __tracebackhide__ = True
    hint = HINTS[name.lower().removeprefix("faults_") + "_faults"]
    checks.check_type(value, (set, frozenset, list, tuple), name=name, hint=hint)
    unknown = sorted(repr(item) for item in value if not isinstance(item, str) or item not in FAULT_KINDS)
    if unknown:
        checks.fail(name, checks.both("hay nombres que no están en el menú",
                                      "some names are not in the menu"),
                    ", ".join(repr(key) for key in FAULT_KINDS), ", ".join(unknown), hint)
    return set(value)


@checks.keeps_random_state
def check_fault_names(value, name: str) -> None:
    """The visible part of a naming cell: ``value`` is a set of keys of the menu (``show_fault_kinds()``).
    Which of them are faults is graded with the hidden tests."""
    __tracebackhide__ = True
    _names(value, name)


def grade_fault_named(value, truth: set, fault: str, name: str) -> None:
    """The hidden part of a naming cell: ``fault`` is named, and no name is a fault the script lacks."""
    __tracebackhide__ = True
    names = _names(value, name)
    hint = HINTS[name.lower().removeprefix("faults_") + "_faults"]
    wrong = len(names - set(truth))
    if wrong:
        checks.fail(name, checks.both(f"{wrong} de los nombres no son fallos de este script",
                                      f"{wrong} of the names are not faults of this script"),
                    checks.say(checks.both("solo fallos del script", "only faults of the script")),
                    checks.say(checks.both(f"{len(names)} nombres", f"{len(names)} names")), hint)
    if fault not in names:
        checks.fail(name, checks.both("un fallo del script no está nombrado",
                                      "a fault of the script is not named"),
                    checks.say(checks.both("ese fallo entre los nombres", "that fault among the names")),
                    checks.say(checks.both(f"{len(names)} nombres, todos fallos del script",
                                           f"{len(names)} names, all faults of the script")), hint)


def _no_inputs(generator) -> list:
    return [()]


def faults_outcome(value) -> list:
    """The names a FAULTS_... value holds, sorted (a set does not travel to the judge); None if it is
    not a set, list or tuple of strings."""
    if not isinstance(value, set | frozenset | list | tuple) or not all(isinstance(i, str) for i in value):
        return None
    return sorted(set(value))


def faults_accept(got, want, args, *, index: int) -> bool:
    """The reference's ``index``-th fault (its names sorted) is named, and no name is outside its set."""
    return (isinstance(got, list) and isinstance(want, list) and want[index] in got
            and set(got) <= set(want))


_TRAINED_BY_SCRIPT = ("train_and_evaluate_fixed", "train_and_evaluate_fixed")
JUDGED = [
    checks.JudgedCall("test_probe_step_update", "step_with_probe", "step_with_probe", _probe_steps, TRAINING,
                      outcome=probe_step_update_outcome),
    checks.JudgedCall("test_probe_step_returns", "step_with_probe", "step_with_probe", _probe_steps, TRAINING,
                      outcome=probe_step_returns_outcome),
    checks.JudgedCall("test_logits_on_model_device", "logits_on_model_device", "logits_on_model_device",
                      _device_cases, outcome=logits_on_model_device_outcome),
    checks.JudgedCall("test_regression_loss", "regression_loss", "regression_loss", _regression_cases,
                      outcome=regression_loss_outcome),
    checks.JudgedCall("test_epoch_outputs_steps", "train_epoch_with_outputs", "train_epoch_with_outputs",
                      _epochs, TRAINING, outcome=epoch_steps_outcome),
    checks.JudgedCall("test_epoch_outputs_kept", "train_epoch_with_outputs", "train_epoch_with_outputs",
                      _epochs, TRAINING, outcome=epoch_outputs_outcome),
    checks.JudgedCall("test_residual_block_fixed", "ResidualBlockFixed", "residual_block_fixed", _blocks,
                      outcome=residual_block_fixed_outcome),
    checks.JudgedCall("test_first_bad_step", "first_bad_step", "first_bad_step", _loss_scripts,
                      outcome=first_bad_step_outcome),
    checks.JudgedCall("test_binary_classifier_logits", "BinaryClassifier", "binary_classifier", _binary_cases,
                      TRAINING, outcome=binary_classifier_outcome),
    checks.JudgedCall("test_binary_classifier_proba", "BinaryClassifier", "binary_classifier", _binary_cases,
                      outcome=binary_predict_proba_outcome),
    checks.JudgedCall("test_layer_statistics_forward", "layer_statistics", "layer_statistics",
                      _statistics_requests, STATISTICS_TOLERANCE, outcome=layer_statistics_forward_outcome),
    checks.JudgedCall("test_layer_statistics_backward", "layer_statistics", "layer_statistics",
                      _statistics_requests, STATISTICS_TOLERANCE, outcome=layer_statistics_backward_outcome),
    checks.JudgedCall("test_layer_statistics_update", "layer_statistics", "layer_statistics",
                      _statistics_requests, UPDATE_TOLERANCE, outcome=layer_statistics_update_outcome),
    checks.JudgedCall("test_diagnose_vanishing", "diagnose_run", "diagnose_run",
                      functools.partial(_diagnosis_runs, other="vanishing"), outcome=diagnose_run_outcome),
    checks.JudgedCall("test_diagnose_lr_too_high", "diagnose_run", "diagnose_run",
                      functools.partial(_diagnosis_runs, other="lr_too_high"), outcome=diagnose_run_outcome),
    checks.JudgedCall("test_overfit_one_batch_fits", "overfit_one_batch", "overfit_one_batch",
                      functools.partial(_memorising_cases, with_bottleneck=False),
                      outcome=overfit_one_batch_fits_outcome),
    checks.JudgedCall("test_overfit_one_batch_losses", "overfit_one_batch", "overfit_one_batch",
                      functools.partial(_memorising_cases, with_bottleneck=True),
                      outcome=overfit_one_batch_losses_outcome),
    checks.JudgedCall("test_lr_range_test_steps", "lr_range_test", "lr_range_test", _range_cases, TRAINING,
                      outcome=lr_range_test_steps_outcome),
    checks.JudgedCall("test_lr_range_test_restores", "lr_range_test", "lr_range_test", _restoring_cases,
                      outcome=lr_range_test_restores_outcome),
    checks.JudgedCall("test_fit_regressor_one_batch", "fit_regressor_fixed", "fit_regressor_fixed",
                      functools.partial(_fit_cases, kind="one_batch"), SCRIPT_TOLERANCE,
                      outcome=fit_regressor_one_batch_outcome),
    checks.JudgedCall("test_fit_regressor_one_epoch", "fit_regressor_fixed", "fit_regressor_fixed",
                      functools.partial(_fit_cases, kind="one_epoch"),
                      outcome=fit_regressor_one_epoch_outcome),
    checks.JudgedCall("test_fit_regressor_epochs", "fit_regressor_fixed", "fit_regressor_fixed",
                      functools.partial(_fit_cases, kind="epochs"), outcome=fit_regressor_epochs_outcome),
    checks.JudgedCall("test_train_and_evaluate_one_step", *_TRAINED_BY_SCRIPT,
                      functools.partial(_train_cases, kind="one_step"), SCRIPT_TOLERANCE,
                      outcome=train_and_evaluate_one_step_outcome),
    checks.JudgedCall("test_train_and_evaluate_epochs", *_TRAINED_BY_SCRIPT,
                      functools.partial(_train_cases, kind="epochs"),
                      outcome=train_and_evaluate_epochs_outcome),
    checks.JudgedCall("test_train_and_evaluate_returned", *_TRAINED_BY_SCRIPT,
                      functools.partial(_train_cases, kind="returned"),
                      outcome=train_and_evaluate_returned_outcome),
    # the faults named: judged against the reference's set (the answer cell's), one cell per fault, the
    # reference's names sorted; the grade cells' ids do not say which fault each one is
    *[checks.JudgedCall(f"test_{script}_named_{index + 1}", f"FAULTS_{script.upper()}",
                        f"{script}_faults", _no_inputs, outcome=faults_outcome,
                        accept=functools.partial(faults_accept, index=index))
      for script in ("fit_regressor", "train_and_evaluate") for index in range(3)],
]
