"""Run a few steps of a training step under observation and name the classic bugs they show.

The contract
------------
``diagnose(train_step, model, batch)`` calls ``train_step(model, batch, optimizer)`` ``steps`` times
and watches what happens. The step is expected to do one full update and return the loss as a
number:

    def train_step(model, batch, optimizer):
        x, y = batch
        model.train()
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

``diagnose`` never touches the caller's model: it runs the steps on a deep copy, with an optimizer
it builds itself (plain SGD, ``lr=0.01``, unless ``optimizer`` says otherwise) and spies on, under a
fixed random seed (the caller's random state is left as it was).

What it watches, and the code of the finding it reports:

``grads_not_cleared``     ``.grad`` still holds the previous step's gradients when backward adds new ones
``step_before_backward``  ``optimizer.step()`` runs before any ``backward()`` of the same step
``params_unchanged``      no parameter changed at all, or some never moved because no gradient reached them
``eval_mode``             a forward pass in evaluation mode whose graph reaches ``backward()``
``no_grad_missing``       a forward pass with gradients on whose graph no ``backward()`` ever used
``graph_kept``            a returned tensor still attached to the graph, or graph nodes of a step that
                          outlive it (a running total of loss tensors, a list of predictions...)
``nan_or_inf``            the loss, a gradient or a parameter stops being finite (first step reported)
``shape_mismatch``        an element-wise loss (``mse_loss``, ``l1_loss``...) whose prediction and target
                          shapes differ, or a subtraction ``(N, 1) - (N,)`` that broadcasts to ``(N, N)``
``softmax_before_loss``   ``cross_entropy`` / ``nll_loss`` fed with probabilities from a softmax
``device_mismatch``       the step raised because tensors sit on different devices
``pickled_model``         ``torch.load`` refused a whole pickled model (``weights_only=True``)
``inplace_modified``      backward raised because an in-place operation overwrote a saved tensor
``step_raised``           any other exception (the checks that need a finished step are skipped)

Each :class:`Finding` carries its code, the step (counted from 1) where it was first seen, a message
and a line of advice in the student's language (``es`` or ``en``; by default the one the lesson chose
with ``course.set_language``). ``diagnose`` returns the findings, an empty list when it saw
nothing wrong, and prints them unless ``show=False``.

Limits: it reports symptoms, not proofs. It watches the model's own calls (``model(x)``), the torch
functions the step calls and the optimizer it was given; a step that builds its own optimizer, or
a bug that shows only after more steps than ``steps``, goes unseen. An empty list is a good first
answer, not a guarantee.
"""

import copy
import gc
import math
import numbers
import pickle
import warnings
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from course.settings import get_language

CODES = (
    "device_mismatch",
    "pickled_model",
    "inplace_modified",
    "step_raised",
    "shape_mismatch",
    "softmax_before_loss",
    "step_before_backward",
    "grads_not_cleared",
    "eval_mode",
    "no_grad_missing",
    "graph_kept",
    "nan_or_inf",
    "params_unchanged",
)

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

TEXTS = {
    "en": {
        "grads_not_cleared": (
            "backward() added this step's gradients on top of the previous ones ({params}): "
            "nothing cleared .grad, so every update uses a growing sum of old gradients.",
            "call optimizer.zero_grad() at the start of every step, before loss.backward().",
        ),
        "step_before_backward": (
            "optimizer.step() ran before loss.backward() in the same step, so it applied stale "
            "or missing gradients.",
            "keep the order zero_grad() → forward → loss → backward() → step().",
        ),
        "params_unchanged": (
            "{tensors} in {steps}: {params}.",
            "make sure the step calls optimizer.step() after loss.backward(), that the optimizer "
            "was built on model.parameters(), and that the loss depends on those parameters.",
        ),
        "eval_mode": (
            "a training forward pass ran in evaluation mode (in eval: {modules}); Dropout and "
            "BatchNorm behave as at test time, so the model trains on the wrong computation.",
            "call model.train() at the start of each training step, or restore the mode an "
            "evaluation found (mode = model.training ... model.train(mode)).",
        ),
        "no_grad_missing": (
            "a forward pass ran with gradients on, but no backward() used its graph: time and "
            "memory spent recording a graph nobody needs.",
            "wrap evaluation and monitoring passes in torch.no_grad() (or torch.inference_mode()).",
        ),
        "graph_kept": (
            "{what}: the graph of every step stays alive and memory keeps growing.",
            "keep numbers, not tensors: use loss.item() (or .detach()) for logs and running "
            "totals, and return loss.item().",
        ),
        "graph_kept_returned": "the step returned a tensor still attached to the graph ({what})",
        "graph_kept_alive": (
            "1 graph node built in this step was still alive after it ended",
            "{count} graph nodes built in this step were still alive after it ended",
        ),
        "graph_kept_why": "something keeps a tensor with a grad_fn: a running total, a list of losses...",
        "unchanged_tensors": (
            "1 parameter tensor did not change",
            "{count} parameter tensors did not change",
        ),
        "steps": ("1 step", "{count} steps"),
        "nan_or_inf": (
            "non-finite values (NaN or Inf) appeared in {what} at this step.",
            "lower the learning rate (try 10x smaller), normalise the inputs or clip the "
            "gradients; stop at the first non-finite loss to see where it starts.",
        ),
        "nan_loss": "the loss",
        "nan_grads": "the gradients of {params}",
        "nan_params": "the parameters {params}",
        "shape_mismatch": (
            "{operation} compared a prediction of shape {input} with a target of shape {target}; "
            "broadcasting makes it {result}, so the loss is wrong and no error says so.",
            "make the shapes equal: target.view_as(pred), or pred.squeeze(-1) when the model has "
            "one output.",
        ),
        "softmax_before_loss": (
            "{operation} received probabilities (rows that sum to 1) instead of raw logits; it "
            "applies log_softmax itself, so the gradients shrink and training stalls.",
            "remove the softmax from the model and give the loss the raw logits; apply softmax "
            "only when you need probabilities.",
        ),
        "device_mismatch": (
            "the step raised a device error: {error}",
            "move the batch to the model's device inside the step: "
            "device = next(model.parameters()).device; x, y = x.to(device), y.to(device).",
        ),
        "pickled_model": (
            "torch.load refused a whole pickled model: since PyTorch 2.6 it reads only weights "
            "by default (weights_only=True). {error}",
            "save model.state_dict() and load it into a freshly built model with "
            "model.load_state_dict(torch.load(path)).",
        ),
        "inplace_modified": (
            "backward() failed because an in-place operation overwrote a tensor autograd had "
            "saved: {error}",
            "replace the in-place operation (x += ..., x.relu_(), x[...] = ...) on forward-pass "
            "tensors with an out-of-place one (x = x + ...).",
        ),
        "step_raised": (
            "the step raised {kind}: {error}",
            "run the step once on its own and read the traceback; the other checks need a step "
            "that finishes.",
        ),
        "header": ("diagnose · {name} · {steps} step observed",
                   "diagnose · {name} · {steps} steps observed"),
        "none": "no problems found.",
        "some": ("{count} problem found:", "{count} problems found:"),
        "whole_model": "the whole model",
        "step": "step",
        "fix": "fix",
        "more": "and {count} more",
    },
    "es": {
        "grads_not_cleared": (
            "backward() sumó los gradientes de este paso a los del anterior ({params}): nadie "
            "vació .grad, así que cada actualización usa una suma creciente de gradientes viejos.",
            "llama a optimizer.zero_grad() al principio de cada paso, antes de loss.backward().",
        ),
        "step_before_backward": (
            "optimizer.step() se ejecutó antes que loss.backward() dentro del mismo paso, así que "
            "aplicó gradientes viejos o inexistentes.",
            "respeta el orden zero_grad() → forward → pérdida → backward() → step().",
        ),
        "params_unchanged": (
            "{tensors} en {steps}: {params}.",
            "comprueba que el paso llama a optimizer.step() después de loss.backward(), que el "
            "optimizador se creó con model.parameters() y que la pérdida depende de esos parámetros.",
        ),
        "eval_mode": (
            "una pasada de entrenamiento se hizo en modo evaluación (en eval: {modules}); Dropout "
            "y BatchNorm se comportan como en la prueba, así que el modelo entrena un cálculo "
            "equivocado.",
            "llama a model.train() al principio de cada paso de entrenamiento, o restaura el modo "
            "que encontró la evaluación (modo = model.training ... model.train(modo)).",
        ),
        "no_grad_missing": (
            "una pasada hacia delante se hizo con los gradientes activados, pero ningún backward() "
            "usó su grafo: tiempo y memoria gastados en grabar un grafo que nadie necesita.",
            "envuelve las pasadas de evaluación y de seguimiento en torch.no_grad() (o "
            "torch.inference_mode()).",
        ),
        "graph_kept": (
            "{what}: el grafo de cada paso sigue vivo y la memoria no para de crecer.",
            "guarda números, no tensores: usa loss.item() (o .detach()) para registros y "
            "acumulados, y devuelve loss.item().",
        ),
        "graph_kept_returned": "el paso devolvió un tensor todavía unido al grafo ({what})",
        "graph_kept_alive": (
            "1 nodo del grafo creado en este paso seguía vivo al terminar",
            "{count} nodos del grafo creados en este paso seguían vivos al terminar",
        ),
        "graph_kept_why": "algo guarda un tensor con grad_fn: un acumulado, una lista de pérdidas...",
        "unchanged_tensors": (
            "1 tensor de parámetros no cambió",
            "{count} tensores de parámetros no cambiaron",
        ),
        "steps": ("1 paso", "{count} pasos"),
        "nan_or_inf": (
            "aparecieron valores no finitos (NaN o Inf) en {what} en este paso.",
            "baja la tasa de aprendizaje (prueba 10 veces menor), normaliza las entradas o recorta "
            "los gradientes; para en la primera pérdida no finita para ver dónde empieza.",
        ),
        "nan_loss": "la pérdida",
        "nan_grads": "el gradiente de {params}",
        "nan_params": "los parámetros {params}",
        "shape_mismatch": (
            "{operation} comparó una predicción de forma {input} con un objetivo de forma "
            "{target}; el broadcasting lo convierte en {result}, así que la pérdida está mal y "
            "ningún error lo dice.",
            "iguala las formas: target.view_as(pred), o pred.squeeze(-1) si el modelo tiene una "
            "sola salida.",
        ),
        "softmax_before_loss": (
            "{operation} recibió probabilidades (filas que suman 1) en lugar de logits; la pérdida "
            "ya aplica log_softmax, así que los gradientes se encogen y el entrenamiento se atasca.",
            "quita el softmax del modelo y pasa a la pérdida los logits tal cual; aplica softmax "
            "solo cuando necesites probabilidades.",
        ),
        "device_mismatch": (
            "el paso lanzó un error de dispositivo: {error}",
            "mueve el lote al dispositivo del modelo dentro del paso: "
            "device = next(model.parameters()).device; x, y = x.to(device), y.to(device).",
        ),
        "pickled_model": (
            "torch.load rechazó un modelo entero guardado con pickle: desde PyTorch 2.6 solo lee "
            "pesos por defecto (weights_only=True). {error}",
            "guarda model.state_dict() y cárgalo en un modelo recién construido con "
            "model.load_state_dict(torch.load(ruta)).",
        ),
        "inplace_modified": (
            "backward() falló porque una operación in-place sobrescribió un tensor que autograd "
            "había guardado: {error}",
            "cambia la operación in-place (x += ..., x.relu_(), x[...] = ...) sobre tensores del "
            "forward por una que cree un tensor nuevo (x = x + ...).",
        ),
        "step_raised": (
            "el paso lanzó {kind}: {error}",
            "ejecuta el paso una vez por separado y lee el traceback; las demás comprobaciones "
            "necesitan un paso que termine.",
        ),
        "header": ("diagnose · {name} · {steps} paso observado",
                   "diagnose · {name} · {steps} pasos observados"),
        "none": "ningún problema encontrado.",
        "some": ("{count} problema encontrado:", "{count} problemas encontrados:"),
        "whole_model": "todo el modelo",
        "step": "paso",
        "fix": "arreglo",
        "more": "y {count} más",
    },
}


@dataclass
class Finding:
    """One problem ``diagnose`` saw: a stable ``code``, the first ``step`` (from 1) and two sentences."""

    code: str
    step: int | None
    message: str = field(repr=False)
    advice: str = field(repr=False)
    language: str = field(default="en", repr=False)

    def __str__(self) -> str:
        words = TEXTS[self.language]
        where = f" {words['step']} {self.step}:" if self.step is not None else ""
        return f"[{self.code}]{where} {self.message}\n    → {words['fix']}: {self.advice}"


class _Sentinel:
    """Stored in a graph node's metadata: alive exactly as long as the node is."""


_SENTINEL_KEY = "course.diagnose"


def _plural(forms, count) -> str:
    """``(singular, plural)`` chosen by ``count`` and filled in with it."""
    return forms[count != 1].format(count=count)


def _names(names, words, limit=3) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += " " + words["more"].format(count=len(names) - limit)
    return shown


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


class _Observer:
    """Everything diagnose records while the steps run."""

    def __init__(self, model, words):
        self.model = model
        self.words = words
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.step = 0
        self.found = {}  # code → (step, details)
        self.backward_seen = False
        self.seen_params = set()
        self.forwards = []  # this step's grad-enabled forward passes
        self.sentinels = []  # this step's weak references to graph sentinels

    def record(self, code, details=None, step="current"):
        """Keep the first occurrence of ``code``; ``step=None`` for a finding about the whole run."""
        if code not in self.found:
            self.found[code] = (self.step if step == "current" else step, details or {})

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

    # -- after each finished step
    def end_step(self, result):
        for tensor in _tensors_in(result):
            if tensor.grad_fn is not None:
                what = f"{type(tensor.grad_fn).__name__}, shape {tuple(tensor.shape)}"
                self.record("graph_kept", {"what": self.words["graph_kept_returned"].format(what=what)})
                break
        loss = _loss_value(result)
        if loss is not None and not math.isfinite(loss):
            self.record("nan_or_inf", {"what": self.words["nan_loss"]})
        for record in self.forwards:
            if record["used"] and record["eval"]:
                self.record("eval_mode", {"modules": _names(record["eval"], self.words)})
            if not record["used"] and self.backward_seen:
                self.record("no_grad_missing")
        bad_grads = [name for name, p in self.model.named_parameters() if not _is_finite(p.grad)]
        bad_params = [name for name, p in self.model.named_parameters() if not _is_finite(p)]
        if bad_params:
            what = self.words["nan_params"].format(params=_names(bad_params, self.words))
            self.record("nan_or_inf", {"what": what})
        elif bad_grads:
            what = self.words["nan_grads"].format(params=_names(bad_grads, self.words))
            self.record("nan_or_inf", {"what": what})

    def count_kept(self):
        """Graph nodes built in this step that something outside the step still holds."""
        if not any(ref() is not None for ref in self.sentinels):
            return 0
        gc.collect()
        return sum(ref() is not None for ref in self.sentinels)

    def on_exception(self, error):
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


class _Watch(TorchFunctionMode):
    def __init__(self, observer):
        super().__init__()
        self.observer = observer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.observer.before_call(func, args, kwargs)
        out = func(*args, **kwargs)
        self.observer.after_call(out)
        return out


def _make_optimizer(optimizer, params):
    if optimizer is None:
        return torch.optim.SGD(params, lr=0.01)
    if isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            "diagnose builds its own optimizer on a copy of the model: pass an optimizer class or a "
            "function of the parameters, e.g. optimizer=lambda params: torch.optim.Adam(params, lr=1e-3)."
        )
    return optimizer(params)


def _spy_on(optimizer, observer):
    step = optimizer.step

    def spied_step(*args, **kwargs):
        observer.on_optimizer_step()
        return step(*args, **kwargs)

    optimizer.step = spied_step


def format_findings(findings, name: str, steps: int, language: str) -> str:
    """The report ``diagnose`` prints."""
    words = TEXTS[language]
    head = words["header"][steps != 1].format(name=name, steps=steps)
    if not findings:
        return f"{head} · {words['none']}"
    lines = [f"{head} · {words['some'][len(findings) != 1].format(count=len(findings))}"]
    for number, finding in enumerate(findings, start=1):
        lines.append(f"  {number}. " + str(finding).replace("\n", "\n   "))
    return "\n".join(lines)


def diagnose(train_step, model, batch, steps: int = 3, language=None, *, optimizer=None,
             show: bool = True, seed: int = 0) -> list:
    """Run ``train_step(model_copy, batch, optimizer)`` ``steps`` times and report what went wrong.

    ``optimizer`` is an optimizer class or a function ``params -> optimizer`` (default: SGD with
    ``lr=0.01``). ``language`` is ``"es"`` or ``"en"`` (default: the lesson's). Returns a list of
    :class:`Finding`, empty when the steps look right; prints the report unless ``show=False``.
    """
    if language is None:
        language = get_language()
    if language not in TEXTS:
        raise ValueError(f"language must be one of {tuple(TEXTS)}, got {language!r}")
    if not callable(train_step):
        raise TypeError(f"train_step must be a function (model, batch, optimizer) -> loss, "
                        f"got {train_step!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    words = TEXTS[language]
    try:
        model = copy.deepcopy(model)
    except Exception:  # a module deepcopy cannot handle: observe the original instead
        pass
    observer = _Observer(model, words)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("diagnose needs a model with trainable parameters (requires_grad=True); "
                         "this one has none.")
    before = {name: p.detach().clone() for name, p in model.named_parameters()
              if p.requires_grad and p.device.type != "meta"}
    opt = _make_optimizer(optimizer, params)
    _spy_on(opt, observer)
    # Hooks that live outside the model, so that a step may still pickle or deep-copy it: a pre-hook
    # on each parameter's gradient accumulator (it runs before the new gradient is added to .grad),
    # and a global forward hook that looks only at this model.
    accumulators, handles = [], []
    with torch.enable_grad():
        for param in params:
            accumulator = param.view_as(param).grad_fn.next_functions[0][0]
            accumulators.append(accumulator)  # held, so that autograd keeps using this one
            handles.append(accumulator.register_prehook(
                lambda grad_outputs, param=param: observer.on_param_grad(param)))

    def forward_hook(module, args, output):
        if module is model:
            observer.on_forward(module, output)

    handles.append(torch.nn.modules.module.register_module_forward_hook(forward_hook))
    raised = False
    try:
        # warnings the step raises (MSELoss broadcasting...) are recorded, not printed: the findings
        # say what they mean
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            torch.manual_seed(seed)
            for _ in range(steps):
                observer.start_step()
                try:
                    with _Watch(observer):
                        result = train_step(model, batch, opt)
                except Exception as error:  # the student's step failed: that is a finding too
                    observer.on_exception(error)
                    raised = True
                    break
                observer.end_step(result)
                del result
                kept = 0 if "graph_kept" in observer.found else observer.count_kept()
                if kept:
                    alive = _plural(words["graph_kept_alive"], kept)
                    what = f"{alive} ({words['graph_kept_why']})"
                    observer.record("graph_kept", {"what": what})
                if "nan_or_inf" in observer.found:
                    break
    finally:
        for handle in handles:
            handle.remove()
    if not raised and "step_before_backward" not in observer.found and "nan_or_inf" not in observer.found:
        named = dict(model.named_parameters())
        unchanged = [name for name in before if torch.equal(before[name], named[name].detach())]
        if len(unchanged) < len(before):
            # some parameters moved, so the step does update: name only those no gradient reached
            # (a bias just before a BatchNorm gets a gradient of almost zero, and that is fine)
            unchanged = [name for name in unchanged
                         if named[name].grad is None or not bool(named[name].grad.ne(0).any())]
        if unchanged:
            details = {"tensors": _plural(words["unchanged_tensors"], len(unchanged)),
                       "steps": _plural(words["steps"], observer.step),
                       "params": _names(unchanged, words)}
            observer.record("params_unchanged", details, step=None)
    if "grads_not_cleared" in observer.found:
        step, details = observer.found["grads_not_cleared"]
        order = {name: index for index, (name, _) in enumerate(model.named_parameters())}
        names = sorted(details["params"], key=lambda name: order.get(name, len(order)))
        observer.found["grads_not_cleared"] = (step, {"params": _names(names, words)})
    findings = []
    for code in sorted(observer.found, key=lambda c: (observer.found[c][0] or 10**9, CODES.index(c))):
        step, details = observer.found[code]
        message, advice = words[code]
        findings.append(Finding(code, step, message.format(**details), advice, language))
    if show:
        name = getattr(train_step, "__name__", type(train_step).__name__)
        print(format_findings(findings, name, observer.step, language))
    return findings
