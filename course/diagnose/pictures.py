"""Pictures of a bug: one quantity, step by step, in a buggy run and in a fixed one.

Taught in lesson 05 (debugging_lab), section 1.

A bug in a training loop rarely raises; it shows as a number that drifts away from what the
correct loop gives. :func:`draw_buggy_vs_fixed` draws that number for both runs on one axes and
marks the first step at which they part, so that a student sees *when* the bug starts to matter
instead of reading a column of figures. The lesson computes the values; this module only draws
them, with its labels in the lesson's language (``course.say``).

    fig, axes = plt.subplots(1, 2)
    split = draw_buggy_vs_fixed(axes[0], broken["grad"], fixed["grad"], title="the gradient step() uses")
    draw_buggy_vs_fixed(axes[1], broken["loss"], fixed["loss"], title="loss", split=split, legend=False)
"""

import math

from course.settings import say

__all__ = ["BUGGY_COLOR", "FIXED_COLOR", "draw_buggy_vs_fixed", "first_split"]

BUGGY_COLOR = "tab:red"
FIXED_COLOR = "tab:blue"

TEXTS = {
    "buggy": {"es": "con el error", "en": "with the bug"},
    "fixed": {"es": "corregido", "en": "fixed"},
    "step": {"es": "paso de entrenamiento", "en": "training step"},
    "split": {"es": "se separan en el paso {step}", "en": "they part at step {step}"},
    "same": {"es": "iguales en todos los pasos", "en": "equal at every step"},
}


def _as_floats(values, name: str) -> list[float]:
    """``values`` (a list, a tuple or a 1-D tensor of numbers) as a list of floats."""
    if hasattr(values, "detach"):  # a tensor: never keep its graph or its device
        values = values.detach().cpu().reshape(-1).tolist()
    try:
        floats = [float(value) for value in values]
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a sequence of numbers, one per step; got {values!r}") from error
    if not floats:
        raise ValueError(f"{name} is empty: record one value per step before drawing it.")
    return floats


def _same(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def first_split(buggy, fixed, rtol: float = 1e-4, atol: float = 1e-8) -> int | None:
    """The first step, counted from 1, at which the two runs' values differ; ``None`` if never.

    Values are equal when ``math.isclose(buggy, fixed, rel_tol=rtol, abs_tol=atol)``; two NaNs are
    equal, a NaN and a number are not. Both runs must hold one value per step, the same number.
    """
    buggy, fixed = _as_floats(buggy, "buggy"), _as_floats(fixed, "fixed")
    if len(buggy) != len(fixed):
        raise ValueError(f"the two runs must have one value per step each; buggy has {len(buggy)} "
                         f"values, fixed has {len(fixed)}.")
    for step, (a, b) in enumerate(zip(buggy, fixed, strict=True), start=1):
        if not _same(a, b, rtol, atol):
            return step
    return None


def draw_buggy_vs_fixed(ax, buggy, fixed, *, title=None, ylabel=None, split="auto", legend=True,
                        reference=None, yscale: str = "linear", rtol: float = 1e-4, atol: float = 1e-8):
    """Draw one quantity per step for a buggy and a fixed run on ``ax``; mark where they part.

    ``buggy`` and ``fixed`` hold one value per step (step 1 first). ``split`` is the step to mark:
    ``"auto"`` finds the first step where the values differ (:func:`first_split`), an ``int``
    marks that step (to mark the same step on every panel of a figure), ``None`` marks nothing.
    ``reference`` draws a grey dashed line at that value (the right answer, when there is one).
    ``title`` and ``ylabel`` are plain strings or ``{"es": ..., "en": ...}``. Values that are not
    finite leave a gap. Returns the step marked (or ``None``).
    """
    buggy_values, fixed_values = _as_floats(buggy, "buggy"), _as_floats(fixed, "fixed")
    found = first_split(buggy_values, fixed_values, rtol, atol)
    if split == "auto":
        split = found
    elif split is not None and not (isinstance(split, int) and 1 <= split <= len(buggy_values)):
        raise ValueError(f"split must be 'auto', None or a step between 1 and {len(buggy_values)}; "
                         f"got {split!r}")
    steps = range(1, len(buggy_values) + 1)
    if reference is not None:
        ax.axhline(float(reference), color="0.5", linestyle="--", linewidth=1)
    ax.plot(steps, fixed_values, color=FIXED_COLOR, linewidth=2, label=say(TEXTS["fixed"]))
    ax.plot(steps, buggy_values, color=BUGGY_COLOR, linewidth=2, label=say(TEXTS["buggy"]))
    if split is not None:
        ax.axvline(split, color="0.35", linestyle=":", linewidth=1.5,
                   label=say(TEXTS["split"]).format(step=split))
        ax.plot([split], [buggy_values[split - 1]], "o", color=BUGGY_COLOR, markersize=6)
        ax.annotate(str(split), xy=(split, 1), xycoords=("data", "axes fraction"), xytext=(3, -3),
                    textcoords="offset points", ha="left", va="top", fontsize=8, color="0.35")
    elif found is None:
        ax.text(0.02, 0.98, say(TEXTS["same"]), transform=ax.transAxes, ha="left", va="top",
                fontsize=8, color="0.35")
    ax.set_yscale(yscale)
    ax.set_xlabel(say(TEXTS["step"]))
    if ylabel is not None:
        ax.set_ylabel(say(ylabel))
    if title is not None:
        ax.set_title(say(title), fontsize=10)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    return split
