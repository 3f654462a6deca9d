"""``course.diagnose.pictures``: a buggy and a fixed run drawn side by side, where they part marked."""

import math

import matplotlib
import pytest
import torch

from course.diagnose.pictures import BUGGY_COLOR, FIXED_COLOR, draw_buggy_vs_fixed, first_split

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


def lines_by_color(ax):
    """The two curves (the split's dot has the buggy run's colour too, but a single point)."""
    return {line.get_color(): line for line in ax.get_lines() if len(line.get_xdata()) > 2}


def test_first_split_is_the_first_step_that_differs_counted_from_one():
    assert first_split([1.0, 2.0, 3.0], [1.0, 2.0, 3.5]) == 3
    assert first_split([5.0, 1.0], [4.0, 1.0]) == 1
    assert first_split([1.0, 2.0], [1.0, 2.0]) is None
    assert first_split(torch.tensor([1.0, 2.0]), (1.0, 2.0 + 1e-9)) is None    # within tolerance
    assert first_split([1.0, 2.0], [1.0, 2.1], rtol=0.1) is None


def test_first_split_treats_two_nans_as_equal_and_a_nan_against_a_number_as_different():
    nan = float("nan")
    assert first_split([1.0, nan, nan], [1.0, nan, nan]) is None
    assert first_split([1.0, nan], [1.0, 4.0]) == 2
    assert first_split([math.inf, 1.0], [math.inf, 2.0]) == 2


def test_first_split_refuses_runs_of_different_length_or_empty_or_not_numbers():
    with pytest.raises(ValueError, match="one value per step"):
        first_split([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        first_split([], [])
    with pytest.raises(TypeError, match="sequence of numbers"):
        first_split(["a"], [1.0])


def test_draw_marks_the_step_where_the_runs_part_and_draws_both_runs(ax, english):
    buggy, fixed = [1.0, 3.0, 6.0, 10.0], [1.0, 2.0, 3.0, 4.0]
    split = draw_buggy_vs_fixed(ax, buggy, fixed, title="the gradient step() uses")
    assert split == 2
    lines = lines_by_color(ax)
    assert list(lines[BUGGY_COLOR].get_ydata()) == buggy
    assert list(lines[FIXED_COLOR].get_ydata()) == fixed
    assert list(lines[FIXED_COLOR].get_xdata()) == [1, 2, 3, 4]                 # steps from 1
    marker = [line for line in ax.get_lines() if list(line.get_xdata()) == [2, 2]]
    assert len(marker) == 1                                                      # the vertical line
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["fixed", "with the bug", "they part at step 2"]
    assert ax.get_title() == "the gradient step() uses"
    assert ax.get_xlabel() == "training step"


def test_draw_speaks_the_lessons_language_and_takes_bilingual_labels(ax, spanish):
    with spanish():
        draw_buggy_vs_fixed(ax, [1.0, 5.0], [1.0, 2.0], ylabel={"es": "pendiente", "en": "slope"})
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == ["corregido", "con el error", "se separan en el paso 2"]
        assert ax.get_xlabel() == "paso de entrenamiento"
        assert ax.get_ylabel() == "pendiente"


def test_draw_takes_a_split_from_another_panel_or_none(ax, english):
    assert draw_buggy_vs_fixed(ax, [1.0, 1.0, 5.0], [1.0, 1.0, 1.0], split=2, legend=False) == 2
    assert ax.get_legend() is None
    assert any(list(line.get_xdata()) == [2, 2] for line in ax.get_lines())
    fig, other = plt.subplots()
    try:
        assert draw_buggy_vs_fixed(other, [1.0, 5.0], [1.0, 1.0], split=None) is None
        assert not any(list(line.get_xdata()) == [2, 2] for line in other.get_lines())
        with pytest.raises(ValueError, match="split must be"):
            draw_buggy_vs_fixed(other, [1.0, 5.0], [1.0, 1.0], split=3)
    finally:
        plt.close(fig)


def test_identical_runs_say_so_and_a_reference_draws_a_horizontal_line(ax, english):
    assert draw_buggy_vs_fixed(ax, [2.0, 3.0], [2.0, 3.0], reference=3) is None
    assert [t.get_text() for t in ax.texts] == ["equal at every step"]
    assert any(list(line.get_ydata()) == [3.0, 3.0] for line in ax.get_lines())


def test_tensors_with_a_graph_are_drawn_without_keeping_it(ax, english):
    weight = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert draw_buggy_vs_fixed(ax, weight * 2, weight.detach()) == 1
    assert list(lines_by_color(ax)[BUGGY_COLOR].get_ydata()) == [2.0, 4.0, 6.0]
