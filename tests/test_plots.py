import matplotlib
import pytest
import torch

from course.plots import draw_broadcast, figure_png, offscreen_figure

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def test_draw_broadcast_writes_each_stretched_value():
    column, row = torch.tensor([[0.0], [10.0]]), torch.tensor([1.0, 2.0, 3.0])
    fig = draw_broadcast(column, row)
    texts = [[t.get_text() for t in ax.texts] for ax in fig.axes]
    assert texts[0] == ["0", "0", "0", "10", "10", "10"]
    assert texts[1] == ["1", "2", "3", "1", "2", "3"]
    assert texts[2] == ["1", "2", "3", "11", "12", "13"]
    assert [ax.get_title() for ax in fig.axes] == ["a: (2, 1)", "b: (3,)", "a + b: (2, 3)"]


def test_draw_broadcast_accepts_shapes_and_refuses_what_pytorch_refuses():
    fig = draw_broadcast((3, 1), (4,))
    assert len(fig.axes[2].patches) == 12
    with pytest.raises(RuntimeError):
        draw_broadcast((3, 4), (3,))
    with pytest.raises(ValueError, match="at most 2 dimensions"):
        draw_broadcast((2, 3, 4), (4,))


def test_an_offscreen_figure_becomes_png_without_touching_pyplot():
    open_before = plt.get_fignums()
    fig = offscreen_figure(figsize=(2, 1), dpi=50)
    fig.add_subplot().plot([0, 1], [1, 0])
    png = figure_png(fig)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")   # IHDR
    assert (width, height) == (100, 50)                                                      # inches × dpi
    assert plt.get_fignums() == open_before


def test_draw_broadcast_explains_in_the_edition_language(spanish):
    with spanish():
        with pytest.raises(ValueError, match="como mucho 2 dimensiones"):
            draw_broadcast((2, 2, 2), (2,))
    # labels passed by the caller are drawn as given, in either language
    with spanish():
        fig = draw_broadcast((2, 1), (3,), labels=("x", "y", "x + y"))
    assert [ax.get_title() for ax in fig.axes] == ["x: (2, 1)", "y: (3,)", "x + y: (2, 3)"]
