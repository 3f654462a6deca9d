"""Pictures the lessons draw, and the way widgets turn a figure into an image.

Taught in lesson 01 (tensors), section 4; also used by lessons 02 (autograd), 03 (modules),
04 (training_loop), 05 (debugging_lab) and 07 (scale).
"""

import io

import matplotlib.pyplot as plt
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from course.settings import say

# Okabe and Ito's colours, told apart with any colour vision, and a neutral grey: the lessons' figures
# take their colours from here, and give each line a style of its own as well.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9", "green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
             "grey": "#666666"}


def offscreen_figure(figsize, dpi: int) -> Figure:
    """A figure drawn with matplotlib's object API, outside pyplot.

    pyplot keeps every figure it makes open and a notebook shows each one at the end of the cell;
    a figure meant for :func:`figure_png` (a widget's image) must be neither.
    """
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig) -> bytes:
    """``fig`` rendered as PNG bytes (what an ``ipywidgets.Image`` or ``IPython.display.Image`` shows)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _as_2d(shape) -> tuple[int, int]:
    shape = tuple(shape)
    if len(shape) > 2:
        raise ValueError(say({
            "es": f"draw_broadcast dibuja como mucho 2 dimensiones; recibió la forma {shape}.",
            "en": f"draw_broadcast draws at most 2 dimensions, got shape {shape}."}))
    return (1,) * (2 - len(shape)) + shape


def _draw_grid(ax, full, stored, values, title: str, color: str) -> None:
    """One operand stretched to the result's 2-D shape ``full``; ``values`` at that shape, or None."""
    rows, cols = full
    for r in range(rows):
        for c in range(cols):
            real = r < stored[0] and c < stored[1]
            ax.add_patch(Rectangle(
                (c, rows - 1 - r), 1, 1, facecolor=color if real else "white",
                edgecolor="white" if real else color, linewidth=2 if real else 1,
                hatch=None if real else "//", linestyle="-" if real else "--"))
            if values is not None:
                ax.text(c + 0.5, rows - 0.5 - r, f"{values[r, c].item():g}", ha="center",
                        va="center", color="white" if real else color, fontsize=9)
    ax.set_xlim(-0.1, cols + 0.1)
    ax.set_ylim(-0.1, rows + 0.1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def draw_broadcast(a, b, labels=("a", "b", "a + b")):
    """Draw how ``a + b`` broadcasts: stored values solid, the values broadcasting repeats hatched.

    ``a`` and ``b`` are tensors (their values are written in the cells) or shapes, of at most two
    dimensions. Shapes align from the right; a missing or size-1 dimension is stretched without
    copying memory. Shapes that cannot broadcast raise PyTorch's own error.
    """
    tensors = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    shape_a, shape_b = (tuple(a.shape), tuple(b.shape)) if tensors else (tuple(a), tuple(b))
    result = tuple(torch.broadcast_shapes(shape_a, shape_b))
    full = _as_2d(result)
    if tensors:
        operands = [a.expand(result).reshape(full), b.expand(result).reshape(full),
                    (a + b).reshape(full)]
    else:
        operands = [None, None, None]
    fig, axes = plt.subplots(1, 3, figsize=(3 * (full[1] + 1), full[0] + 1.2))
    colors = ("tab:blue", "tab:orange", "tab:green")
    shapes = (shape_a, shape_b, result)
    for ax, values, shape, label, color in zip(axes, operands, shapes, labels, colors, strict=True):
        _draw_grid(ax, full, _as_2d(shape), values, f"{label}: {shape}", color)
    fig.tight_layout()
    return fig
