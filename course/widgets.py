"""Interactive pictures for the lessons, built so that they also run headless (papermill, grading).

Taught in lesson 02 (autograd), section 3.

The widgets draw with matplotlib's object API into PNG bytes shown by an ``ipywidgets.Image``:
no pyplot figure is left open, no ``Output`` capture is needed, and nothing is written to stderr
when no browser is attached.
"""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from course.plots import figure_png, offscreen_figure
from course.settings import say


def tangent_at(f, x0: float) -> tuple[float, float]:
    """``(f(x0), f'(x0))``, the slope computed by autograd (in float64)."""
    x = torch.tensor(float(x0), dtype=torch.float64, requires_grad=True)
    y = f(x)
    if not isinstance(y, torch.Tensor) or y.numel() != 1:
        raise ValueError(say({
            "es": "f debe llevar un tensor 0-d a un tensor 0-d (entra un número, sale un número).",
            "en": "f must map a 0-d tensor to a 0-d tensor (one number in, one number out).",
        }))
    (slope,) = torch.autograd.grad(y, x)
    return y.item(), slope.item()


def _check_range(x_range) -> tuple[float, float]:
    low, high = map(float, x_range)
    if not low < high:
        raise ValueError(say({"es": f"x_range debe ser (low, high) con low < high; recibió {x_range!r}.",
                              "en": f"x_range must be (low, high) with low < high, got {x_range!r}."}))
    return low, high


def _curve(f, x_range, points: int = 200):
    low, high = _check_range(x_range)
    xs = torch.linspace(low, high, points, dtype=torch.float64)
    with torch.no_grad():
        ys = torch.stack([f(x).reshape(()) for x in xs])
    return xs, ys


def plot_tangents(ax, f, x_points, x_range, label: str = "f(x)") -> list[tuple[float, float, float]]:
    """Draw ``f`` over ``x_range`` and its tangent at each point; returns ``(x0, f(x0), slope)``."""
    xs, ys = _curve(f, x_range)
    ax.plot(xs, ys, color="tab:blue", lw=2, label=label)
    span = (xs[-1] - xs[0]).item()
    y_low, y_high = ys.min().item(), ys.max().item()
    margin = 0.15 * (y_high - y_low or 1.0)
    height = y_high - y_low + 2 * margin
    results = []
    for x0 in x_points:
        y0, slope = tangent_at(f, x0)
        # the same drawn length whatever the slope: shorter in x when the line is steep
        half = 0.18 * span / (1 + (slope * span / height) ** 2) ** 0.5
        tx = torch.tensor([x0 - half, x0 + half])
        ax.plot(tx, y0 + slope * (tx - x0), color="tab:red", lw=1.5)
        ax.plot([x0], [y0], "o", color="tab:red")
        # below-right of a rising line, above-right of a falling one: clear of the line
        offset = (6, 8) if slope < 0 else (6, -14)
        text = say({"es": "pendiente", "en": "slope"}) + f" {slope:.3g}"
        ax.annotate(text, (x0, y0), textcoords="offset points", xytext=offset, fontsize=9, color="tab:red")
        results.append((float(x0), y0, slope))
    ax.set_xlim(xs[0].item(), xs[-1].item())
    ax.set_ylim(y_low - margin, y_high + margin)
    ax.axhline(0, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("x")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    return results


def draw_tangent(f, x_points, x_range, label: str = "f(x)"):
    """A static picture: ``f`` and its autograd tangent at one point or several. Returns the figure."""
    if isinstance(x_points, int | float):
        x_points = [x_points]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    plot_tangents(ax, f, list(x_points), x_range, label)
    ax.set_title(say({"es": "rectas tangentes, pendientes calculadas por autograd",
                      "en": "tangent lines, slopes from autograd"}), fontsize=10)
    fig.tight_layout()
    return fig


def _render_png(f, x0: float, x_range, label: str) -> bytes:
    fig = offscreen_figure(figsize=(6, 3.6), dpi=90)
    ax = fig.add_subplot()
    plot_tangents(ax, f, [x0], x_range, label)
    fig.tight_layout()
    return figure_png(fig)


def _readout(f, x0: float) -> str:
    y0, slope = tangent_at(f, x0)
    return f"x = {x0:.3f} &nbsp; f(x) = {y0:.4g} &nbsp; <b>f'(x) = {slope:.4g}</b> (autograd)"


def tangent_explorer(f, x_range, x0: float | None = None, label: str = "f(x)", steps: int = 200):
    """A slider that moves ``x`` along ``f``; the picture shows the tangent autograd computed.

    Returns an ``ipywidgets.VBox`` of ``(slider, readout, image)``; display it in a notebook.
    Moving the slider recomputes ``f(x)`` and ``f'(x)`` with autograd and redraws.
    """
    low, high = _check_range(x_range)
    start = (low + high) / 2 if x0 is None else float(x0)
    slider = widgets.FloatSlider(value=start, min=low, max=high, step=(high - low) / steps,
                                 description="x", continuous_update=False, readout_format=".2f",
                                 layout=widgets.Layout(width="420px"))
    readout = widgets.HTML(_readout(f, start))
    image = widgets.Image(value=_render_png(f, start, x_range, label), format="png",
                          layout=widgets.Layout(width="540px"))

    def update(change) -> None:
        x_now = float(change["new"])
        readout.value = _readout(f, x_now)
        image.value = _render_png(f, x_now, x_range, label)

    slider.observe(update, names="value")
    return widgets.VBox([slider, readout, image])
