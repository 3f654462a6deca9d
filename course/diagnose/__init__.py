"""Run a few steps of a training step under observation and name the classic bugs they show.

Taught in lesson 05 (debugging_lab), section 0.

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
``sigmoid_before_logits_loss``  ``binary_cross_entropy_with_logits`` (``BCEWithLogitsLoss``) fed with a
                          sigmoid's output instead of logits
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
import warnings
from dataclasses import dataclass, field

import torch

from course.diagnose.messages import MESSAGES
from course.diagnose.observer import Observer, Watch, spy_on
from course.settings import get_language

__all__ = ["CODES", "Finding", "diagnose", "format_findings"]

CODES = (
    "device_mismatch",
    "pickled_model",
    "inplace_modified",
    "step_raised",
    "shape_mismatch",
    "softmax_before_loss",
    "sigmoid_before_logits_loss",
    "step_before_backward",
    "grads_not_cleared",
    "eval_mode",
    "no_grad_missing",
    "graph_kept",
    "nan_or_inf",
    "params_unchanged",
)


@dataclass
class Finding:
    """One problem ``diagnose`` saw: a stable ``code``, the first ``step`` (from 1) and two sentences."""

    code: str
    step: int | None
    message: str = field(repr=False)
    advice: str = field(repr=False)
    language: str = field(default="en", repr=False)

    def __str__(self) -> str:
        words = MESSAGES[self.language]
        where = f" {words['step']} {self.step}:" if self.step is not None else ""
        return f"[{self.code}]{where} {self.message}\n    → {words['fix']}: {self.advice}"


def format_findings(findings, name: str, steps: int, language: str) -> str:
    """The report ``diagnose`` prints."""
    words = MESSAGES[language]
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
    language = _check_arguments(train_step, model, steps, language)
    observer, opt = _set_up(model, optimizer, MESSAGES[language], language)
    try:
        _observe_steps(train_step, batch, opt, observer, steps=steps, seed=seed)
    finally:
        observer.detach()
    observer.finish()
    findings = _findings(observer, language)
    if show:
        name = getattr(train_step, "__name__", type(train_step).__name__)
        print(format_findings(findings, name, observer.step, language))
    return findings


def _check_arguments(train_step, model, steps: int, language) -> str:
    """Refuse what diagnose cannot use, with a sentence that says why; returns the language."""
    if language is None:
        language = get_language()
    if language not in MESSAGES:
        raise ValueError(f"language must be one of {tuple(MESSAGES)}, got {language!r}")
    if not callable(train_step):
        raise TypeError(_in(language, {
            "es": "train_step debe ser una función (model, batch, optimizer) -> pérdida; "
                  f"recibió {train_step!r}",
            "en": f"train_step must be a function (model, batch, optimizer) -> loss, got {train_step!r}"}))
    if not isinstance(model, torch.nn.Module):
        kind = type(model).__name__
        raise TypeError(_in(language, {"es": f"model debe ser un nn.Module; recibió {kind}",
                                       "en": f"model must be an nn.Module, got {kind}"}))
    if steps < 1:
        raise ValueError(_in(language, {"es": f"steps debe ser al menos 1; recibió {steps}",
                                        "en": f"steps must be at least 1, got {steps}"}))
    return language


def _in(language: str, texts: dict) -> str:
    """``texts`` in ``language`` (diagnose may be asked for a language other than the lesson's)."""
    return texts[language]


def _set_up(model, optimizer, words, language: str = "en"):
    """An observer of a copy of ``model``, with its hooks attached, and the optimizer it spies on."""
    try:
        model = copy.deepcopy(model)
    except Exception:  # a module deepcopy cannot handle: observe the original instead
        pass
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(_in(language, {
            "es": "diagnose necesita un modelo con parámetros entrenables (requires_grad=True); "
                  "este no tiene ninguno.",
            "en": "diagnose needs a model with trainable parameters (requires_grad=True); this one has none.",
        }))
    observer = Observer(model, words)
    opt = _make_optimizer(optimizer, params, language)
    spy_on(opt, observer)
    observer.attach(params)
    return observer, opt


def _make_optimizer(optimizer, params, language: str = "en"):
    if optimizer is None:
        return torch.optim.SGD(params, lr=0.01)
    if isinstance(optimizer, torch.optim.Optimizer):
        example = "optimizer=lambda params: torch.optim.Adam(params, lr=1e-3)"
        raise TypeError(_in(language, {
            "es": "diagnose crea su propio optimizador sobre una copia del modelo: pasa una clase de "
                  f"optimizador o una función de los parámetros, por ejemplo {example}.",
            "en": "diagnose builds its own optimizer on a copy of the model: pass an optimizer class or a "
                  f"function of the parameters, e.g. {example}.",
        }))
    return optimizer(params)


def _observe_steps(train_step, batch, optimizer, observer: Observer, *, steps: int, seed: int) -> None:
    """Run the steps under watch, until ``steps`` are done, one raises or values stop being finite."""
    # warnings the step raises (MSELoss broadcasting...) are recorded, not printed: the findings
    # say what they mean; every generator is forked, CUDA's too (a step on the GPU draws its dropout
    # there), so that the notebook's random state is left as it was
    with torch.random.fork_rng(), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        for _ in range(steps):
            observer.start_step()
            try:
                with Watch(observer):
                    result = train_step(observer.model, batch, optimizer)
            except Exception as error:  # the student's step failed: that is a finding too
                observer.on_exception(error)
                return
            observer.end_step(result)
            del result  # let go of what the step returned before counting what it left alive
            observer.check_graph_kept()
            if "nan_or_inf" in observer.found:
                return


def _findings(observer: Observer, language: str) -> list:
    """The observer's records as :class:`Finding`, by step (whole-run ones last), then by code."""
    words = MESSAGES[language]
    findings = []
    for code in sorted(observer.found, key=lambda c: (observer.found[c][0] or 10**9, CODES.index(c))):
        step, details = observer.found[code]
        message, advice = words[code]
        findings.append(Finding(code, step, message.format(**details), advice, language))
    return findings
