"""Lesson 01's visible checks: a correct answer passes, a typical mistake fails with expected/got/hint."""

import numpy as np
import pytest
import torch
from check_messages import failure

import course
from graders import checks
from graders.checks import CheckFailed
from graders.lesson_checks import tensors as lesson

pytestmark = pytest.mark.usefixtures("english")

# How test_harness calls each check with a given answer.
CHECK_CALLS = {
    "check_to_unit_float": lesson.check_to_unit_float,
    "check_flatten_per_image": lesson.check_flatten_per_image,
    "check_pairwise_distances": lesson.check_pairwise_distances,
    "check_linear_forward": lesson.check_linear_forward,
    "check_normalize_rows": lesson.check_normalize_rows,
    "check_from_numpy_pair": lesson.check_from_numpy_pair,
    "check_prepare_batch": lambda answer: lesson.check_prepare_batch(answer, "cpu"),
    "check_concepts": lesson.check_concepts,
}


def test_to_unit_float():
    lesson.check_to_unit_float(lambda images: images.double().div(255).float())
    failure(lesson.check_to_unit_float, lambda images: images.float(),
           says=["0 and 255"])
    failure(lesson.check_to_unit_float, lambda images: images.double() / 255, says=["dtype"])


def test_to_unit_float_sees_an_answer_that_changes_its_input():
    def in_place(images):
        scaled = images.float() / 255
        images.zero_()
        return scaled

    failure(lesson.check_to_unit_float, in_place,
            says=["expected: the input left unchanged", "the input modified"])


def test_flatten_per_image():
    lesson.check_flatten_per_image(lambda batch: batch.reshape(batch.shape[0], -1))
    failure(lesson.check_flatten_per_image, lambda batch: batch.contiguous().view(len(batch), -1).clone(),
           says=["does not share memory"])
    failure(lesson.check_flatten_per_image, lambda batch: batch.view(len(batch), -1), says=["raised"])
    failure(lesson.check_flatten_per_image, lambda batch: batch.reshape(-1, batch.shape[0]).T,
            says=["the values differ"])


def _broadcast_distances(a, b):
    return torch.linalg.vector_norm(a.unsqueeze(1) - b.unsqueeze(0), dim=-1)


def test_pairwise_distances():
    lesson.check_pairwise_distances(_broadcast_distances)
    failure(lesson.check_pairwise_distances, lambda a, b: (a[:, None] - b[None]).pow(2).sum(-1),
           says=["3-4-5"])
    failure(lesson.check_pairwise_distances, lambda a, b: (a[:, None] - b[None]).norm(),
            says=["the shape is not the expected one"])
    failure(lesson.check_pairwise_distances,
           lambda a, b: torch.tensor([[0.0, 10.0, 3.0], [5.0, 5.0, 4.0]]), says=["shape"])


@pytest.mark.parametrize("shortcut", [
    lambda a, b: torch.cdist(a, b),
    lambda a, b: torch.nn.functional.pairwise_distance(a[:, None], b[None]),
    lambda a, b: torch.nn.PairwiseDistance()(a[:, None], b[None]),
])
def test_pairwise_distances_refuses_the_library_shortcuts_and_says_why(shortcut):
    message = failure(lesson.check_pairwise_distances, shortcut, says=["ShortcutUsed"])
    assert "is not available in this exercise" in message
    a = torch.randn(3, 2)
    torch.testing.assert_close(torch.cdist(a, a), _broadcast_distances(a, a))  # back after the check


def test_shortcuts_off_only_inside():
    a = torch.randn(2, 3)
    distances = lesson.SHORTCUTS["check_pairwise_distances"]
    with checks.shortcuts_off(distances), pytest.raises(checks.ShortcutUsed):
        torch.cdist(a, a)
    course.set_language("es")
    with checks.shortcuts_off(lesson.SHORTCUTS["check_linear_forward"]), \
            pytest.raises(checks.ShortcutUsed, match="no está"):
        torch.nn.functional.linear(a, a)
    assert torch.nn.functional.linear(a, a).shape == (2, 2)


def test_linear_forward():
    lesson.check_linear_forward(lambda x, weight, bias: torch.einsum("...i,oi->...o", x, weight) + bias)
    failure(lesson.check_linear_forward, lambda x, weight, bias: x @ weight.T, says=["one-hot"])
    failure(lesson.check_linear_forward, lambda x, weight, bias: x @ weight + bias, says=["raised"])
    failure(lesson.check_linear_forward, lambda x, weight, bias: torch.nn.Linear(1, 1)(x),
           says=["raised"])
    failure(lesson.check_linear_forward, lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias),
           says=["ShortcutUsed"])


def test_normalize_rows():
    lesson.check_normalize_rows(
        lambda counts: torch.nan_to_num(counts / counts.sum(dim=1, keepdim=True)))
    failure(lesson.check_normalize_rows, lambda counts: counts / counts.sum(dim=1, keepdim=True),
           says=["sum(dim=1)"])
    failure(lesson.check_normalize_rows, lambda counts: (counts / counts.sum()).float(),
            says=[".sum(dim=1): the values differ"])
    failure(lesson.check_normalize_rows,
           lambda counts: torch.nn.functional.normalize(counts, p=1, dim=1), says=["ShortcutUsed"])


def test_from_numpy_pair():
    lesson.check_from_numpy_pair(lambda array: (torch.as_tensor(array), torch.tensor(array.copy())))
    failure(lesson.check_from_numpy_pair, lambda array: (torch.tensor(array), torch.tensor(array)),
            says=["expected: to see changes to the array"])
    failure(lesson.check_from_numpy_pair, lambda array: (torch.as_tensor(array), torch.as_tensor(array)),
            says=["expected: an independent copy"])
    failure(lesson.check_from_numpy_pair,
           lambda array: (torch.as_tensor(array).float(), torch.tensor(array)), says=["dtype"])
    failure(lesson.check_from_numpy_pair, lambda array: [torch.as_tensor(array), torch.tensor(array)],
           says=["tuple"])


def test_from_numpy_pair_changes_the_array_it_made_itself():
    seen = []
    lesson.check_from_numpy_pair(lambda array: seen.append(array) or (torch.as_tensor(array),
                                                                      torch.tensor(array)))
    assert [array.dtype for array in seen] == [np.float64, np.int32]


def test_prepare_batch():
    lesson.check_prepare_batch(lambda x, y, device: (x.float().to(device), y.long().to(device)), "cpu")
    failure(lesson.check_prepare_batch, lambda x, y, device: (x.float(), y.long()), "cpu",
           says=["meta"])
    failure(lesson.check_prepare_batch, lambda x, y, device: (x.to(device), y.to(device)), "cpu",
           says=["dtype"])
    failure(lesson.check_prepare_batch, lambda x, y, device: (x.to(device).float(), y.to(device)), "cpu",
           says=["int64"])


def test_each_run_draws_other_inputs():
    shapes = []
    for _ in range(6):
        lesson.check_pairwise_distances(lambda a, b: shapes.append(a.shape) or _broadcast_distances(a, b))
    assert len(set(shapes)) > 1


def test_messages_and_hints_follow_the_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_pairwise_distances(lambda a, b: torch.cdist(a, b))
    message = str(caught.value)
    for part in ("esperado:", "obtenido:", "pista:", "no está disponible", "sección 4"):
        assert part in message, message
