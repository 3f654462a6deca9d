import matplotlib
import pytest
import torch

from course.plots import draw_broadcast

matplotlib.use("Agg")


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
