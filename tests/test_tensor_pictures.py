"""Lesson 01's pictures: the panels, values and texts a student is told to look at."""

import matplotlib
import pytest
import torch

import course
from course.tensor_pictures import draw_reduction, draw_strides

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytestmark = pytest.mark.usefixtures("english")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(ax) -> list[str]:
    """The texts written in an axis, in drawing order (arrows are texts without words: left out)."""
    return [text.get_text() for text in ax.texts if text.get_text()]


def _strides_figure():
    x = torch.arange(12).view(3, 4)
    return draw_strides(x, {"x.view(2, 6)": x.view(2, 6), "x.t()": x.t(),
                            "x.t().contiguous()": x.t().contiguous()})


def test_draw_strides_titles_give_shape_stride_contiguity_and_sharing():
    fig = _strides_figure()
    titles = [ax.get_title() for ax in fig.axes]
    # the storage rows first: x's, then the one copy's (only a copy has storage of its own)
    assert titles[:2] == ["storage of x: 12 values in a row (below, each one's position)",
                          "new storage of x.t().contiguous(): its values, row after row"]
    assert titles[2:] == [
        "x\nshape (3, 4) · stride (4, 1)\nis_contiguous() = True\nits storage is the row above",
        "x.view(2, 6)\nshape (2, 6) · stride (6, 1)\nis_contiguous() = True\nshares x's storage",
        "x.t()\nshape (4, 3) · stride (1, 4)\nis_contiguous() = False\nshares x's storage",
        "x.t().contiguous()\nshape (4, 3) · stride (3, 1)\nis_contiguous() = True\n"
        "a copy: storage of its own (at the bottom)",
    ]


def test_draw_strides_writes_storage_in_memory_order_and_the_copy_reordered():
    fig = _strides_figure()
    storage, copy_storage, *grids = fig.axes
    # a storage row writes each value, then its position under it
    assert _texts(storage)[0::2] == [str(v) for v in range(12)]
    assert _texts(storage)[1::2] == [str(p) for p in range(12)]
    transposed = grids[2]
    assert _texts(transposed)[:12] == [str(v) for v in torch.arange(12).view(3, 4).t().flatten().tolist()]
    assert _texts(transposed)[12:] == ["next column: +4 in storage", "next row: +1 in storage"]
    assert _texts(copy_storage)[0::2] == ["0", "4", "8", "1", "5", "9", "2", "6", "10", "3", "7", "11"]


def test_draw_strides_colours_each_value_by_the_row_it_comes_from():
    fig = _strides_figure()
    storage = next(ax for ax in fig.axes if ax.get_title().startswith("storage"))
    transposed = next(ax for ax in fig.axes if ax.get_title().startswith("x.t()\n"))
    colours = [patch.get_facecolor() for patch in storage.patches]
    assert colours[0] == colours[3] != colours[4] == colours[7] != colours[8]
    # x.t()'s first row holds x's first column: one value of each of x's rows
    first_row = [patch.get_facecolor() for patch in transposed.patches[:3]]
    assert first_row == [colours[0], colours[4], colours[8]]


def test_draw_strides_speaks_spanish():
    course.set_language("es")
    fig = _strides_figure()
    titles = "\n".join(ax.get_title() for ax in fig.axes)
    for words in ("memoria de x", "forma (4, 3) · stride (1, 4)", "comparte la memoria de x",
                  "copia: memoria propia", "memoria nueva de x.t().contiguous()"):
        assert words in titles, titles
    assert "columna siguiente: +4 en memoria" in "\n".join(text for ax in fig.axes for text in _texts(ax))


def test_draw_strides_refuses_what_it_cannot_draw():
    x = torch.arange(12).view(3, 4)
    with pytest.raises(ValueError, match="contiguous 2-D base"):
        draw_strides(x.t(), {})
    with pytest.raises(ValueError, match="2-D tensors"):
        draw_strides(x, {"x.view(12)": x.view(12)})


def test_draw_reduction_collapses_rows_then_columns():
    m = torch.arange(12.0).reshape(3, 4)
    fig = draw_reduction(m)
    assert len(fig.axes) == 2
    assert [ax.get_title() for ax in fig.axes] == [
        "m.sum(dim=0)\nthe rows add up into one row\nresult: shape (4,)\nkeepdim=True: (1, 4)",
        "m.sum(dim=1)\nthe columns add up into one column\nresult: shape (3,)\nkeepdim=True: (3, 1)",
    ]
    down, across = fig.axes
    values = [f"{v:g}" for v in range(12)]
    assert _texts(down) == values + ["12", "15", "18", "21"]
    assert _texts(across) == values + ["6", "22", "38"]
    # each sum has the colour of the column (left) or row (right) it adds up
    colours = [patch.get_facecolor() for patch in down.patches]
    assert colours[12:] == colours[:4]
    colours = [patch.get_facecolor() for patch in across.patches]
    assert colours[12:] == [colours[0], colours[4], colours[8]]


def test_draw_reduction_speaks_spanish_and_refuses_other_ranks():
    course.set_language("es")
    fig = draw_reduction(torch.ones(2, 3))
    assert fig.axes[0].get_title().splitlines()[1:3] == ["las filas se suman en una fila",
                                                        "resultado: forma (3,)"]
    with pytest.raises(ValueError, match="2 dimensiones"):
        draw_reduction(torch.ones(2, 3, 4))
