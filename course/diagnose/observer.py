"""How ``diagnose`` watches a training step: the observer, the hooks and the torch function mode.

Taught in lesson 05 (debugging_lab), section 0.

:class:`Observer` keeps what it sees as findings (a code, the first step, details for the message).
It is told about the step through hooks that live outside the model (:func:`attach_hooks`), a spy
on the optimizer (:func:`spy_on`) and a torch function mode (:class:`Watch`) that sees every torch
call, then checks each finished step (:meth:`Observer.end_step`) and the whole run
(:meth:`Observer.check_unchanged`, :meth:`Observer.finish`).
"""

import gc
import math
import numbers
import pickle
import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from course.diagnose.messages import name_list, plural

# Losses that compare prediction and target element by element: different shapes broadcast silently.
ELEMENTWISE_LOSSES = (
    F.mse_loss,
    F.l1_loss,
    F.smooth_l1_loss,
    F.huber_loss,
    F.binary_cross_entropy,
    F.binary_cross_entropy_with_logits,
    F.soft_margin_loss,
)
# Losses that apply log_softmax themselves (cross_entropy) or expect log-probabilities (nll_loss).
LOGIT_LOSSES = (F.cross_entropy, F.nll_loss)
# Nodes that only reshape or copy what they receive: a sigmoid behind them still fed the loss.
_PASS_THROUGH_NODES = ("View", "Reshape", "Squeeze", "Unsqueeze", "Select", "Slice", "Permute", "Transpose",
                       "Expand", "Clone", "ToCopy", "Alias", "Unsafe")


class _Sentinel:
    """Stored in a graph node's metadata: alive exactly as long as the node is."""


_SENTINEL_KEY = "course.diagnose"


def _tensors_in(value, depth=0):
    """The tensors inside a return value (a tensor, or one inside tuples, lists and dicts)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, depth + 1)


def _loss_value(value):
    """The number a step returned as its loss (the first element of a tuple), or ``None``."""
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type != "meta":
        return float(value.detach().float().cpu())
    return None


def _is_finite(tensor) -> bool:
    if tensor is None or tensor.device.type == "meta" or not tensor.is_floating_point():
        return True
    return bool(torch.isfinite(tensor.detach()).all())


def _argument(args, kwargs, position, name):
    if len(args) > position:
        return args[position]
    return kwargs.get(name)


def _comes_from_sigmoid(tensor) -> bool:
    """Whether ``tensor`` is a sigmoid's output, perhaps reshaped or indexed (``.squeeze(1)``, ``[:, 0]``,
    ``nn.Flatten``...)."""
    node = tensor.grad_fn if isinstance(tensor, torch.Tensor) else None
    while node is not None and type(node).__name__.startswith(_PASS_THROUGH_NODES):
        node = next((next_node for next_node, _ in node.next_functions if next_node is not None), None)
    return node is not None and type(node).__name__.startswith("Sigmoid")


def _looks_like_probabilities(tensor) -> bool:
    if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta" or tensor.dim() < 2:
        return False
    node = type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else ""
    if node.startswith("Softmax"):
        return True
    if not tensor.is_floating_point() or tensor.shape[1] < 2:
        return False
    with torch.no_grad():
        values = tensor.detach().float()
        sums = values.sum(dim=1)
        return bool((values >= 0).all() and torch.allclose(sums, torch.ones_like(sums), atol=1e-4))


class Observer:
    """Everything diagnose records while the steps run: ``found`` maps a code to ``(step, details)``."""

    def __init__(self, model, words):
        self.model = model
        self.words = words
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.initial = {name: p.detach().clone() for name, p in model.named_parameters()
                        if p.requires_grad and p.device.type != "meta"}
        self._accumulators = []  # held, so that autograd keeps using the ones that carry our hooks
        self._handles = []
        self.step = 0
        self.found = {}  # code → (step, details)
        self.raised = False  # a step raised: the run stopped there
        self.backward_seen = False
        self.seen_params = set()
        self.forwards = []  # this step's grad-enabled forward passes
        self.sentinels = []  # this step's weak references to graph sentinels

    def record(self, code, details=None, step="current"):
        """Keep the first occurrence of ``code``; ``step=None`` for a finding about the whole run."""
        if code not in self.found:
            self.found[code] = (self.step if step == "current" else step, details or {})

    def attach(self, params):
        """Install the hooks that tell the observer about gradients and forward passes.

        They live outside the model, so that a step may still pickle or deep-copy it: a pre-hook on
        each parameter's gradient accumulator (it runs before the new gradient is added to
        ``.grad``), and a global forward hook that looks only at this model. :meth:`detach` removes
        them.
        """
        with torch.enable_grad():
            for param in params:
                accumulator = param.view_as(param).grad_fn.next_functions[0][0]
                self._accumulators.append(accumulator)
                self._handles.append(accumulator.register_prehook(
                    lambda grad_outputs, param=param: self.on_param_grad(param)))

        def forward_hook(module, args, output):
            if module is self.model:
                self.on_forward(module, output)

        self._handles.append(torch.nn.modules.module.register_module_forward_hook(forward_hook))

    def detach(self):
        for handle in self._handles:
            handle.remove()
        self._handles, self._accumulators = [], []

    def start_step(self):
        self.step += 1
        self.backward_seen = False
        self.seen_params = set()
        self.forwards = []
        self.sentinels = []

    # -- the optimizer spy
    def on_optimizer_step(self):
        if not self.backward_seen:
            self.record("step_before_backward")

    # -- parameter hooks: run while backward delivers a gradient, before it is added to .grad
    def on_param_grad(self, param):
        self.backward_seen = True
        if id(param) in self.seen_params:
            return  # a second backward in the same step may add to it on purpose
        self.seen_params.add(id(param))
        stale = param.grad
        if stale is not None and stale.device.type != "meta" and bool(stale.detach().ne(0).any()):
            self.record("grads_not_cleared", {"params": []})
            step, details = self.found["grads_not_cleared"]
            if step == self.step:
                details["params"].append(self.names.get(id(param), "?"))

    # -- a forward hook on the model
    def on_forward(self, module, output):
        if not torch.is_grad_enabled():
            return
        tensor = next((t for t in _tensors_in(output) if t.grad_fn is not None), None)
        if tensor is None:
            return
        if not module.training:
            in_eval = [self.words["whole_model"]]
        else:
            in_eval = [name for name, m in module.named_modules() if not m.training]
        record = {"eval": in_eval, "used": False}

        def used(grad_outputs):
            record["used"] = True

        tensor.grad_fn.register_prehook(used)
        self.forwards.append(record)

    # -- the torch function mode: sees every torch call of the step
    def before_call(self, func, args, kwargs):
        if func in ELEMENTWISE_LOSSES:
            pred, target = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "target")
            if func is F.binary_cross_entropy_with_logits and _comes_from_sigmoid(pred):
                self.record("sigmoid_before_logits_loss", {"operation": f"F.{func.__name__}"})
            if isinstance(pred, torch.Tensor) and isinstance(target, torch.Tensor):
                if pred.shape != target.shape:
                    self._shape_mismatch(f"F.{func.__name__}", pred, target)
        elif func in LOGIT_LOSSES:
            logits = _argument(args, kwargs, 0, "input")
            if _looks_like_probabilities(logits):
                self.record("softmax_before_loss", {"operation": f"F.{func.__name__}"})
        elif getattr(func, "__name__", "") in ("sub", "__sub__", "__rsub__", "rsub") and len(args) >= 2:
            a, b = args[0], args[1]
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                shapes = sorted([tuple(a.shape), tuple(b.shape)], key=len)
                if len(shapes[0]) == 1 and shapes[1] == (shapes[0][0], 1) and shapes[0][0] > 1:
                    self._shape_mismatch("a - b", a, b)

    def _shape_mismatch(self, operation, pred, target):
        try:
            result = tuple(torch.broadcast_shapes(pred.shape, target.shape))
        except RuntimeError:
            result = "?"
        self.record("shape_mismatch", {"operation": operation, "input": tuple(pred.shape),
                                       "target": tuple(target.shape), "result": result})

    def after_call(self, out):
        if isinstance(out, torch.Tensor) and out.grad_fn is not None:
            metadata = out.grad_fn.metadata
            if _SENTINEL_KEY not in metadata:
                sentinel = _Sentinel()
                metadata[_SENTINEL_KEY] = sentinel
                self.sentinels.append(weakref.ref(sentinel))

    # -- a step that raised
    def on_exception(self, error):
        self.raised = True
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        text = " ".join(" ".join(lines).split())
        if " Hint:" in text:  # autograd's advice to turn on anomaly detection: ours follows
            text = text[:text.index(" Hint:")]
        text = text if len(text) <= 240 else text[:240] + "..."
        if isinstance(error, pickle.UnpicklingError) or "Weights only load failed" in text:
            reason = next((line for line in lines if "Unsupported global" in line), "")
            if "by default." in reason:
                reason = reason[:reason.index("by default.") + len("by default.")]
            self.record("pickled_model", {"error": reason[:240]})
        elif "modified by an inplace operation" in text:
            self.record("inplace_modified", {"error": text})
        elif "device" in text.lower() and ("expected" in text.lower() or "same device" in text.lower()):
            self.record("device_mismatch", {"error": text})
        else:
            self.record("step_raised", {"kind": type(error).__name__, "error": text})

    # -- after each finished step
    def end_step(self, result):
        for tensor in _tensors_in(result):
            if tensor.grad_fn is not None:
                what = f"{type(tensor.grad_fn).__name__}, {self.words['shape']} {tuple(tensor.shape)}"
                self.record("graph_kept", {"what": self.words["graph_kept_returned"].format(what=what)})
                break
        loss = _loss_value(result)
        if loss is not None and not math.isfinite(loss):
            self.record("nan_or_inf", {"what": self.words["nan_loss"]})
        for record in self.forwards:
            if record["used"] and record["eval"]:
                self.record("eval_mode", {"modules": name_list(record["eval"], self.words)})
            if not record["used"] and self.backward_seen:
                self.record("no_grad_missing")
        bad_grads = [name for name, p in self.model.named_parameters() if not _is_finite(p.grad)]
        bad_params = [name for name, p in self.model.named_parameters() if not _is_finite(p)]
        if bad_params:
            what = self.words["nan_params"].format(params=name_list(bad_params, self.words))
            self.record("nan_or_inf", {"what": what})
        elif bad_grads:
            what = self.words["nan_grads"].format(params=name_list(bad_grads, self.words))
            self.record("nan_or_inf", {"what": what})

    def check_graph_kept(self):
        """After a step (its result let go): graph nodes it built that something else still holds."""
        if "graph_kept" in self.found or not any(ref() is not None for ref in self.sentinels):
            return
        gc.collect()
        kept = sum(ref() is not None for ref in self.sentinels)
        if kept:
            alive = plural(self.words["graph_kept_alive"], kept)
            self.record("graph_kept", {"what": f"{alive} ({self.words['graph_kept_why']})"})

    # -- after the last step
    def finish(self):
        """The checks of the whole run: parameters that never moved, stale gradients named in order."""
        # a step that raised, stepped before backward or went non-finite has a finding that already
        # explains parameters that did not move
        if not self.raised and "step_before_backward" not in self.found and "nan_or_inf" not in self.found:
            self._check_unchanged()
        if "grads_not_cleared" in self.found:
            step, details = self.found["grads_not_cleared"]
            order = {name: index for index, (name, _) in enumerate(self.model.named_parameters())}
            names = sorted(details["params"], key=lambda name: order.get(name, len(order)))
            self.found["grads_not_cleared"] = (step, {"params": name_list(names, self.words)})

    def _check_unchanged(self):
        named = dict(self.model.named_parameters())
        unchanged = [name for name, value in self.initial.items() if torch.equal(value, named[name].detach())]
        if len(unchanged) < len(self.initial):
            # some parameters moved, so the step does update: name only those no gradient reached
            # (a bias just before a BatchNorm gets a gradient of almost zero, and that is fine)
            unchanged = [name for name in unchanged
                         if named[name].grad is None or not bool(named[name].grad.ne(0).any())]
        if unchanged:
            details = {"tensors": plural(self.words["unchanged_tensors"], len(unchanged)),
                       "steps": plural(self.words["steps"], self.step),
                       "params": name_list(unchanged, self.words)}
            self.record("params_unchanged", details, step=None)


class Watch(TorchFunctionMode):
    """A torch function mode that shows the observer every torch call of the step."""

    def __init__(self, observer):
        super().__init__()
        self.observer = observer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.observer.before_call(func, args, kwargs)
        out = func(*args, **kwargs)
        self.observer.after_call(out)
        return out


def spy_on(optimizer, observer) -> None:
    """Tell ``observer`` about every ``optimizer.step()`` before it runs."""
    step = optimizer.step

    def spied_step(*args, **kwargs):
        observer.on_optimizer_step()
        return step(*args, **kwargs)

    optimizer.step = spied_step
