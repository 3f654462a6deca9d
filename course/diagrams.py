"""Diagrams the lessons draw with matplotlib: boxes, arrows and words, in the edition's language.

Taught in lesson 04 (training_loop), section 4.

:func:`draw_training_loop` draws the five steps every batch goes through:
``zero_grad → forward → loss → backward → step``, and back to the first for the next batch.
"""

import math

import matplotlib.pyplot as plt

from course.settings import say

# The five steps, in order: the code (shared by both editions) and what it does, in each language.
TRAINING_STEPS = (
    ("optimizer.zero_grad()",
     {"es": "1. borra los gradientes\ndel lote anterior", "en": "1. clears the previous\nbatch's gradients"}),
    ("logits = model(x)",
     {"es": "2. pasada hacia delante:\nconstruye el grafo", "en": "2. forward pass:\nbuilds the graph"}),
    ("loss = loss_fn(logits, y)",
     {"es": "3. pérdida: cuánto se equivoca,\nen un solo número",
      "en": "3. loss: how wrong it is,\nas one number"}),
    ("loss.backward()",
     {"es": "4. pasada hacia atrás:\ngradientes en .grad", "en": "4. backward pass:\ngradients into .grad"}),
    ("optimizer.step()",
     {"es": "5. mueve cada peso\ncontra su gradiente", "en": "5. moves each weight\nagainst its gradient"}),
)

STEP_NAMES = ("zero_grad", "forward", "loss", "backward", "step")

__all__ = ["STEP_NAMES", "TRAINING_STEPS", "draw_training_loop"]


def _step_index(step) -> int | None:
    if step is None:
        return None
    if isinstance(step, str):
        if step not in STEP_NAMES:
            raise ValueError(f"step must be one of {STEP_NAMES} or 0-4, got {step!r}")
        return STEP_NAMES.index(step)
    if not 0 <= int(step) < len(STEP_NAMES):
        raise ValueError(f"step must be one of {STEP_NAMES} or 0-4, got {step!r}")
    return int(step)


def draw_training_loop(highlight=None, *, ax=None):
    """The five steps of a training step as boxes on a loop, with arrows between them.

    ``highlight``: a step (``"backward"`` or its index) drawn in a stronger colour. Labels follow
    the edition's language (:func:`course.say`). Returns the figure.
    """
    chosen = _step_index(highlight)
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 5.2))
    else:
        fig = ax.figure
    ax.set_xlim(-1.55, 1.55)
    ax.set_ylim(-1.3, 1.32)
    ax.set_aspect("equal")
    ax.axis("off")

    # five places on an ellipse, clockwise from the top
    places = [(1.05 * math.sin(2 * math.pi * i / 5), 0.9 * math.cos(2 * math.pi * i / 5)) for i in range(5)]
    boxes = []
    for i, ((code, words), (x, y)) in enumerate(zip(TRAINING_STEPS, places, strict=True)):
        strong = i == chosen
        text = ax.text(x, y, f"{code}\n{say(words)}", ha="center", va="center", fontsize=8.5,
                       linespacing=1.35, family="DejaVu Sans",
                       bbox={"boxstyle": "round,pad=0.5", "linewidth": 2.2 if strong else 1.2,
                             "facecolor": "#fde3c8" if strong else "#e8f0fb",
                             "edgecolor": "#d9730d" if strong else "#3b6ea8"})
        boxes.append(text)
    for i, start in enumerate(boxes):
        end = boxes[(i + 1) % len(boxes)]
        ax.annotate("", xy=places[(i + 1) % 5], xytext=places[i],
                    arrowprops={"arrowstyle": "-|>,head_width=0.3,head_length=0.6", "lw": 1.4,
                                "color": "#555555", "connectionstyle": "arc3,rad=-0.25",
                                "patchA": start.get_bbox_patch(), "patchB": end.get_bbox_patch(),
                                "shrinkA": 3, "shrinkB": 3})
    ax.text(0, 0.08, say({"es": "un lote (x, y)", "en": "one batch (x, y)"}), ha="center",
            va="center", fontsize=11, fontweight="bold", color="#333333")
    ax.text(0, -0.14, say({"es": "y vuelta a empezar\ncon el siguiente lote",
                           "en": "then round again\nwith the next batch"}),
            ha="center", va="center", fontsize=9, color="#555555")
    ax.set_title(say({"es": "El bucle de entrenamiento: cinco pasos por lote",
                      "en": "The training loop: five steps per batch"}), fontsize=11)
    fig.tight_layout()
    return fig
