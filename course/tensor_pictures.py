"""Lesson 01's pictures: how a tensor sits in memory (strides), and what a reduction along ``dim`` does.

Taught in lesson 01 (tensors), sections 3 and 6.

Each function returns a matplotlib figure made with pyplot, so that a notebook shows it at the end
of the cell; every text a student reads follows the edition's language (``course.say``).
"""

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from course.settings import say

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
TEXT = {
    "storage": {"es": "memoria de {name}: {n} valores seguidos (debajo, la posición de cada uno)",
                "en": "storage of {name}: {n} values in a row (below, each one's position)"},
    "shape": {"es": "forma {shape} · stride {stride}", "en": "shape {shape} · stride {stride}"},
    "base": {"es": "su memoria es la fila de arriba", "en": "its storage is the row above"},
    "shares": {"es": "comparte la memoria de {name}", "en": "shares {name}'s storage"},
    "copy": {"es": "copia: memoria propia (abajo)", "en": "a copy: storage of its own (at the bottom)"},
    "next_row": {"es": "fila siguiente: +{step} en memoria", "en": "next row: +{step} in storage"},
    "next_column": {"es": "columna siguiente: +{step} en memoria",
                    "en": "next column: +{step} in storage"},
    "own_storage": {"es": "memoria nueva de {name}: sus valores, fila a fila",
                    "en": "new storage of {name}: its values, row after row"},
    "rows_sum": {"es": "las filas se suman en una fila", "en": "the rows add up into one row"},
    "columns_sum": {"es": "las columnas se suman en una columna",
                    "en": "the columns add up into one column"},
    "result": {"es": "resultado: forma {shape}", "en": "result: shape {shape}"},
}


def _text(key: str, **fields) -> str:
    return say(TEXT[key]).format(**fields)


def _cell(ax, x: float, y: float, value, color: str, size: float = 1.0, fontsize: int = 10) -> None:
    ax.add_patch(Rectangle((x, y), size, size, facecolor=color, edgecolor="white", linewidth=2))
    ax.text(x + size / 2, y + size / 2, f"{value:g}", ha="center", va="center", color="white",
            fontsize=fontsize)


def _storage_of(tensor: torch.Tensor) -> torch.Tensor:
    """Every value of ``tensor``'s storage, in memory order, as a 1-D tensor."""
    count = tensor.untyped_storage().nbytes() // tensor.element_size()
    return torch.empty(0, dtype=tensor.dtype).set_(tensor.untyped_storage(), 0, (count,))


def _shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _storage_row(ax, values, colors, fontsize: int) -> None:
    """``values`` as one row of cells, each with its position in memory written below it."""
    for position, (value, color) in enumerate(zip(values, colors, strict=True)):
        _cell(ax, position, 0, value, color, fontsize=fontsize)
        ax.text(position + 0.5, -0.3, str(position), ha="center", va="center", fontsize=7,
                color="dimgray")
    ax.set_xlim(-0.1, len(values) + 0.1)
    ax.set_ylim(-0.7, 1.1)
    ax.set_aspect("equal")
    ax.axis("off")


def draw_strides(base, views, name: str = "x"):
    """Draw ``base``'s storage as one row of cells, then ``base`` and each of ``views`` as grids.

    ``base`` is a contiguous 2-D tensor with distinct values (``torch.arange(12).view(3, 4)``);
    ``views`` maps an expression to the 2-D tensor it gives (``{"x.t()": x.t()}``). Every value
    keeps the colour of the row of ``base`` it comes from. Each grid's title gives its shape,
    ``stride()`` and ``is_contiguous()``, and whether it shares ``base``'s storage or holds a copy;
    a copy's own storage is drawn at the bottom, one row of cells like ``base``'s at the top.
    """
    if base.ndim != 2 or not base.is_contiguous():
        raise ValueError(say({
            "es": f"draw_strides dibuja una base contigua de 2 dimensiones; recibió la forma "
                  f"{tuple(base.shape)} con stride {base.stride()}.",
            "en": f"draw_strides draws a contiguous 2-D base, got shape {tuple(base.shape)}, "
                  f"stride {base.stride()}."}))
    panels = {name: base, **views}
    base_values = base.flatten().tolist()
    row_length = base.shape[1]

    def color_of(value) -> str:
        position = base_values.index(value) if value in base_values else None
        return "tab:gray" if position is None else COLORS[position // row_length % len(COLORS)]

    for label, tensor in views.items():
        if tensor.ndim != 2:
            raise ValueError(say({
                "es": f"draw_strides dibuja tensores de 2 dimensiones; {label} tiene forma "
                      f"{tuple(tensor.shape)}.",
                "en": f"draw_strides draws 2-D tensors, {label} has shape {tuple(tensor.shape)}."}))
    copies = {label: t for label, t in views.items() if not _shares_storage(t, base)}
    rows = max(t.shape[0] for t in panels.values())
    fig = plt.figure(figsize=(3.3 * len(panels), 3.0 + 0.7 * rows + 1.2 * len(copies)))
    grid = fig.add_gridspec(2 + len(copies), len(panels),
                            height_ratios=[1.6, rows + 1.2] + [1.6] * len(copies))
    storage_rows = {name: base, **copies}     # one row of memory across the figure each
    for k, (label, tensor) in enumerate(storage_rows.items()):
        ax = fig.add_subplot(grid[0 if k == 0 else k + 1, :])
        values = _storage_of(tensor).tolist()
        _storage_row(ax, values, [color_of(v) for v in values], fontsize=10)
        ax.set_title(_text("storage", name=name, n=len(values)) if k == 0
                     else _text("own_storage", name=label), fontsize=10)

    for k, (label, tensor) in enumerate(panels.items()):
        ax = fig.add_subplot(grid[1, k])
        n_rows, n_cols = tensor.shape
        for r in range(n_rows):
            for c in range(n_cols):
                value = tensor[r, c].item()
                _cell(ax, c, rows - 1 - r, value, color_of(value))   # grids aligned at the top
        bottom = rows - n_rows
        ax.text(n_cols / 2, bottom - 0.35, _text("next_column", step=tensor.stride(1)), ha="center",
                va="center", fontsize=8)
        ax.text(n_cols / 2, bottom - 0.85, _text("next_row", step=tensor.stride(0)), ha="center",
                va="center", fontsize=8)
        ax.set_xlim(min(0, n_cols / 2 - 3), max(n_cols, n_cols / 2 + 3))
        ax.set_ylim(-1.2, rows + 0.1)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title("\n".join([
            label,
            _text("shape", shape=tuple(tensor.shape), stride=tensor.stride()),
            f"is_contiguous() = {tensor.is_contiguous()}",
            _text("base") if tensor is base else _text("copy") if label in copies
            else _text("shares", name=name),
        ]), fontsize=9)
    fig.tight_layout()
    return fig


def draw_reduction(m, name: str = "m"):
    """Draw ``m.sum(dim=0)`` and ``m.sum(dim=1)`` for a small 2-D ``m``, side by side.

    Left, each column has its own colour and the rows add up into one row: shape ``(cols,)``, or
    ``(1, cols)`` with ``keepdim=True``. Right, each row has its own colour and the columns add up
    into one column: ``(rows,)``, or ``(rows, 1)`` with ``keepdim=True``.
    """
    if m.ndim != 2:
        raise ValueError(say({
            "es": f"draw_reduction dibuja un tensor de 2 dimensiones; recibió la forma {tuple(m.shape)}.",
            "en": f"draw_reduction draws a 2-D tensor, got shape {tuple(m.shape)}."}))
    n_rows, n_cols = m.shape
    fig, axes = plt.subplots(1, 2, figsize=(1.4 * (n_cols + 3), 0.6 * n_rows + 2.6))
    for ax, dim in zip(axes, (0, 1), strict=True):
        total = m.sum(dim=dim)
        kept = m.sum(dim=dim, keepdim=True)
        for r in range(n_rows):
            for c in range(n_cols):
                group = c if dim == 0 else r
                _cell(ax, c, n_rows - 1 - r, m[r, c].item(), COLORS[group % len(COLORS)])
        for k, value in enumerate(total.tolist()):
            color = COLORS[k % len(COLORS)]
            if dim == 0:   # one row under the matrix, an arrow down each column
                ax.annotate("", xy=(k + 0.5, -0.55), xytext=(k + 0.5, -0.05),
                            arrowprops={"arrowstyle": "->", "color": color})
                _cell(ax, k, -1.6, value, color)
            else:          # one column right of the matrix, an arrow along each row
                y = n_rows - 1 - k
                ax.annotate("", xy=(n_cols + 0.55, y + 0.5), xytext=(n_cols + 0.05, y + 0.5),
                            arrowprops={"arrowstyle": "->", "color": color})
                _cell(ax, n_cols + 0.6, y, value, color)
        ax.set_xlim(-0.1, n_cols + 1.7)
        ax.set_ylim(-1.7, n_rows + 0.1)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title("\n".join([
            f"{name}.sum(dim={dim})",
            _text("rows_sum" if dim == 0 else "columns_sum"),
            _text("result", shape=tuple(total.shape)),
            f"keepdim=True: {tuple(kept.shape)}",
        ]), fontsize=10)
    fig.tight_layout()
    return fig
