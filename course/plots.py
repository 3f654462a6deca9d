"""Pictures the lessons draw."""

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle


def _as_2d(shape) -> tuple[int, int]:
    shape = tuple(shape)
    if len(shape) > 2:
        raise ValueError(f"draw_broadcast draws shapes of at most 2 dimensions, got {shape}.")
    return (1,) * (2 - len(shape)) + shape


def _draw_grid(ax, real: tuple[int, int], full: tuple[int, int], title: str, color: str) -> None:
    rows, cols = full
    for r in range(rows):
        for c in range(cols):
            stored = r < real[0] and c < real[1]
            ax.add_patch(Rectangle((c, rows - 1 - r), 1, 1, facecolor=color if stored else "white",
                                   edgecolor=color, hatch=None if stored else "//",
                                   linestyle="-" if stored else "--", alpha=1 if stored else 0.6))
    ax.set_xlim(-0.2, cols + 0.2)
    ax.set_ylim(-0.2, rows + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def draw_broadcast(shape_a, shape_b, labels=("a", "b", "a + b")):
    """Draw how two shapes broadcast: stored values solid, values broadcasting repeats hatched.

    Shapes are aligned from the right; a missing or size-1 dimension is stretched without
    copying memory. Raises the same error as PyTorch when the shapes cannot broadcast.
    """
    result = tuple(torch.broadcast_shapes(tuple(shape_a), tuple(shape_b)))
    full = _as_2d(result)
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))
    for ax, shape, label, color in zip(
        axes, (shape_a, shape_b, result), labels, ("tab:blue", "tab:orange", "tab:green"), strict=True
    ):
        _draw_grid(ax, _as_2d(shape), full, f"{label}: {tuple(shape)}", color)
    fig.tight_layout()
    return fig
