"""course.diagrams: the five-step training loop, drawn in the edition's language."""

import matplotlib
import pytest

from course import diagrams

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402

CODE = ["optimizer.zero_grad()", "logits = model(x)", "loss = loss_fn(logits, y)", "loss.backward()",
        "optimizer.step()"]


def _boxes(fig):
    return [t.get_text() for t in fig.axes[0].texts if t.get_bbox_patch() is not None]


def test_the_five_steps_are_drawn_in_order_with_an_arrow_from_each_to_the_next(english):
    fig = diagrams.draw_training_loop()
    boxes = _boxes(fig)
    assert [box.splitlines()[0] for box in boxes] == CODE
    assert [box.splitlines()[1][:2] for box in boxes] == ["1.", "2.", "3.", "4.", "5."]
    arrows = [t for t in fig.axes[0].texts if isinstance(t, Annotation)]
    assert len(arrows) == 5   # the fifth goes back to zero_grad: a loop
    assert "forward pass" in boxes[1] and "backward pass" in boxes[3]
    assert fig.axes[0].get_title() == "The training loop: five steps per batch"
    fig.canvas.draw()
    plt.close(fig)


def test_the_words_follow_the_editions_language_and_the_code_does_not(spanish):
    with spanish():
        fig = diagrams.draw_training_loop()
    boxes = _boxes(fig)
    assert [box.splitlines()[0] for box in boxes] == CODE
    assert "pasada hacia delante" in boxes[1] and "pasada hacia atrás" in boxes[3]
    assert fig.axes[0].get_title() == "El bucle de entrenamiento: cinco pasos por lote"
    plt.close(fig)


def test_a_step_can_be_highlighted_by_name_or_number():
    for chosen in ("backward", 3):
        fig = diagrams.draw_training_loop(highlight=chosen)
        widths = [t.get_bbox_patch().get_linewidth() for t in fig.axes[0].texts
                  if t.get_bbox_patch() is not None]
        assert widths.index(max(widths)) == 3 and widths.count(max(widths)) == 1
        plt.close(fig)
    for wrong in ("backprop", 5):
        with pytest.raises(ValueError, match="zero_grad"):
            diagrams.draw_training_loop(highlight=wrong)


def test_it_draws_on_a_given_axes():
    fig, (left, right) = plt.subplots(1, 2)
    assert diagrams.draw_training_loop(ax=right) is fig
    assert not left.texts
    assert len([t for t in right.texts if t.get_bbox_patch() is not None]) == 5
    plt.close(fig)
