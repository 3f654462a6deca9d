"""The graph drawer and the tangent widget that lesson 02 uses (run with MPLBACKEND=Agg)."""

import math

import ipywidgets
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.text import Annotation

from course.graphs import draw_graph, graph_node_names, print_graph, walk_graph
from course.widgets import draw_tangent, tangent_at, tangent_explorer


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def quadratic(t):
    return t ** 2 + 3 * t


def _texts(fig):
    return [text.get_text() for ax in fig.axes for text in ax.texts]


# ---------------------------------------------------------------- graphs


def test_walk_finds_the_nodes_of_x_squared_plus_3x():
    x = torch.tensor(2.0, requires_grad=True)
    y = quadratic(x)
    assert graph_node_names(y) == ["AddBackward0", "PowBackward0", "MulBackward0", "AccumulateGrad"]


def test_a_leaf_used_twice_is_one_node_with_two_incoming_edges():
    x = torch.tensor(2.0, requires_grad=True)
    nodes = walk_graph(quadratic(x), names={"x": x})
    leaves = [node for node in nodes if node.kind == "leaf"]
    assert len(leaves) == 1 and "x" in leaves[0].label
    incoming = sum(node.children.count(leaves[0].key) for node in nodes)
    assert incoming == 2
    # every edge points down the picture: output on top, leaves at the bottom
    for node in nodes:
        for child in node.children:
            assert nodes[child].depth > node.depth


def test_constants_have_no_node():
    x = torch.tensor(1.0, requires_grad=True)
    constant = torch.tensor(4.0)
    names = graph_node_names(x * constant)
    assert names == ["MulBackward0", "AccumulateGrad"]


def test_draw_graph_writes_a_box_per_node_and_an_arrow_per_edge():
    x = torch.tensor(2.0, requires_grad=True)
    y = quadratic(x)
    fig = draw_graph(y, names={"x": x, "y": y}, title="y")
    texts = _texts(fig)
    for expected in ["AddBackward0", "PowBackward0", "MulBackward0"]:
        assert expected in texts
    assert any(text.startswith("y\n") for text in texts)
    assert any(text.startswith("AccumulateGrad") and "x" in text for text in texts)
    arrows = [child for child in fig.axes[0].get_children()
              if isinstance(child, Annotation) and child.arrow_patch is not None]
    assert len(arrows) == 5  # y→Add, Add→Pow, Add→Mul, Pow→Acc, Mul→Acc
    fig.canvas.draw()  # arrows anchored to text boxes must render


def test_draw_graph_on_given_axes_and_for_a_network_loss():
    w = torch.randn(3, 2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    loss = torch.relu(torch.randn(4, 3) @ w + b).pow(2).mean()
    fig, ax = plt.subplots()
    assert draw_graph(loss, names={"w": w, "b": b}, ax=ax) is fig
    texts = _texts(fig)
    assert "MmBackward0" in texts and "ReluBackward0" in texts
    assert sum(text.startswith("AccumulateGrad") for text in texts) == 2
    fig.canvas.draw()


def test_a_graph_whose_length_depends_on_the_data():
    def halve(t):
        while t.abs() >= 1:
            t = t / 2
        return t

    short = graph_node_names(halve(torch.tensor(3.0, requires_grad=True)))
    long = graph_node_names(halve(torch.tensor(20.0, requires_grad=True)))
    assert short.count("DivBackward0") == 2 and long.count("DivBackward0") == 5


def test_a_leaf_alone_and_a_tensor_without_graph():
    x = torch.tensor(1.0, requires_grad=True)
    nodes = walk_graph(x, names={"x": x})
    assert len(nodes) == 1 and nodes[0].kind == "leaf"
    draw_graph(x).canvas.draw()
    with pytest.raises(ValueError, match="requires_grad"):
        walk_graph(torch.tensor(1.0) * 2)


def test_print_graph_shows_the_receipt(capsys):
    x = torch.tensor(2.0, requires_grad=True)
    print_graph(quadratic(x), names={"x": x})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("output")
    assert lines[1].strip() == "AddBackward0"
    assert sum("AccumulateGrad · x" in line for line in lines) == 2


# ---------------------------------------------------------------- widgets


@pytest.mark.parametrize("x0", [-4.0, -1.5, 0.0, 2.0, 3.3])
def test_tangent_slope_is_the_analytic_derivative(x0):
    value, slope = tangent_at(quadratic, x0)
    assert value == pytest.approx(x0 ** 2 + 3 * x0)
    assert slope == pytest.approx(2 * x0 + 3)


def test_tangent_at_two_is_seven_and_works_for_sin():
    assert tangent_at(quadratic, 2.0) == (pytest.approx(10.0), pytest.approx(7.0))
    assert tangent_at(torch.sin, 1.0)[1] == pytest.approx(math.cos(1.0))


def test_tangent_at_rejects_a_vector_function():
    with pytest.raises(ValueError, match="0-d"):
        tangent_at(lambda t: torch.stack([t, t]), 1.0)


def test_draw_tangent_annotates_each_slope():
    fig = draw_tangent(quadratic, [-3.0, 2.0], x_range=(-5, 3))
    texts = _texts(fig)
    assert "slope -3" in texts and "slope 7" in texts


def test_tangent_explorer_builds_and_follows_the_slider():
    box = tangent_explorer(quadratic, x_range=(-5, 3), x0=2.0)
    assert isinstance(box, ipywidgets.VBox)
    slider, readout, image = box.children
    assert isinstance(slider, ipywidgets.FloatSlider) and slider.value == 2.0
    assert "f'(x) = 7" in readout.value
    first = bytes(image.value)
    assert first.startswith(b"\x89PNG")
    slider.value = -1.0
    assert "f'(x) = 1" in readout.value  # 2 * (-1) + 3
    assert bytes(image.value) != first


def test_tangent_explorer_leaves_no_pyplot_figure_open():
    before = plt.get_fignums()
    tangent_explorer(torch.sin, x_range=(0, 6))
    assert plt.get_fignums() == before


def test_tangent_explorer_rejects_an_empty_range():
    with pytest.raises(ValueError, match="low < high"):
        tangent_explorer(quadratic, x_range=(2, 2))


# ---------------------------------------------------------------- two languages


def test_graph_pictures_and_receipt_speak_the_edition_language(spanish, capsys):
    x = torch.tensor(2.0, requires_grad=True)
    y = quadratic(x)
    with spanish():
        texts = _texts(draw_graph(y))
        print_graph(x * x)
        printed = capsys.readouterr().out.splitlines()
        with pytest.raises(ValueError, match="no tiene grafo"):
            walk_graph(torch.tensor(1.0) * 2)
    assert "salida\nforma ()" in texts and "AccumulateGrad\nhoja · forma ()" in texts
    assert printed[0] == "salida · forma ()"
    assert _texts(draw_graph(y))[0] == "output\nshape ()"


def test_tangent_pictures_speak_the_edition_language(spanish):
    with spanish():
        ax = draw_tangent(quadratic, 1.0, x_range=(-2, 2), label="x² + 3x").axes[0]
    assert ax.get_title() == "rectas tangentes, pendientes calculadas por autograd"
    assert _texts(ax.figure) == ["pendiente 5"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["x² + 3x"]     # the caller's label
    ax = draw_tangent(quadratic, 1.0, x_range=(-2, 2)).axes[0]
    assert ax.get_title() == "tangent lines, slopes from autograd" and _texts(ax.figure) == ["slope 5"]
