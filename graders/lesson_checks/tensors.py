"""Lesson 01 · Tensors: the visible checks of its exercises, and their hints.

Each check draws fresh random inputs, so that no hard-coded answer passes it, and judges the
result by properties a student can verify by hand (shapes, sums, a 3-4-5 triangle, shared
memory), never against a reference implementation.
"""

import math

import torch
import torch.functional
import torch.nn.functional

from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = ["HINTS", "MORE_HINTS", "SHORTCUTS", "check_concepts", "check_flatten_per_image",
           "check_from_numpy_pair", "check_linear_forward", "check_normalize_rows",
           "check_pairwise_distances", "check_prepare_batch", "check_to_unit_float", "grade_concepts",
           "show_questions"]

HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# Library functions that would answer an exercise in one call, switched off while its answer runs,
# by the check that runs it.
SHORTCUTS = {
    "check_pairwise_distances": [(torch, "cdist"), (torch.functional, "cdist"), (torch, "pairwise_distance"),
                                 (torch.nn.functional, "pairwise_distance")],
    "check_linear_forward": [(torch.nn.functional, "linear")],
    "check_normalize_rows": [(torch.nn.functional, "normalize")],
    "check_flatten_per_image": [(torch, "flatten"), (torch.Tensor, "flatten"), (torch.nn.Flatten, "forward")],
}


def _sizes(generator, count: int, low: int, high: int) -> list[int]:
    return torch.randint(low, high + 1, (count,), generator=generator).tolist()


# -------------------------------------------------------------------- decided by the judge
# When a class is graded, these exercises' points also need the student's function to return what
# the reference returns on inputs the judge draws from the class's secret (graders/judge/calls.py).
def _images(generator):
    return [(torch.randint(0, 256, (*_sizes(generator, 2, 1, 4), *_sizes(generator, 2, 2, 9)),
                           generator=generator, dtype=torch.uint8),) for _ in range(2)]


def _batches(generator):
    return [(torch.randn(*_sizes(generator, rank, 1, 5), generator=generator),) for rank in (2, 3, 5)]


def _point_sets(generator):
    return [(torch.randn(n, d, generator=generator, dtype=torch.float64),
             torch.randn(m, d, generator=generator, dtype=torch.float64))
            for n, m, d in (_sizes(generator, 3, 1, 9) for _ in range(3))]


def _layers(generator):
    cases = []
    for lead in ([_sizes(generator, 1, 1, 8)[0]], _sizes(generator, 2, 1, 4)):
        n_in, n_out = _sizes(generator, 2, 1, 7)
        weight = torch.randn(n_out, n_in, generator=generator)
        cases.append((torch.randn(*lead, n_in, generator=generator), weight,
                      torch.randn(n_out, generator=generator)))
    return cases


def _count_tables(generator):
    cases = []
    for dtype in (torch.float32, torch.float64):
        counts = torch.rand(*_sizes(generator, 2, 2, 8), generator=generator, dtype=dtype) * 10
        counts[_sizes(generator, 1, 0, counts.shape[0] - 1)[0]] = 0
        cases.append((counts,))
    return cases


def _raw_batches(generator):
    return [(torch.randn(*_sizes(generator, 2, 1, 6), generator=generator, dtype=torch.float64) * 9,
             torch.randint(0, 10, tuple(_sizes(generator, 1, 1, 6)), generator=generator, dtype=torch.uint8),
             torch.device("cpu"))]


def _arrays(generator):
    return [(torch.randn(*_sizes(generator, 2, 1, 5), generator=generator).to(dtype),)
            for dtype in (torch.float64, torch.int32, torch.float32)]


def from_numpy_pair_outcome(from_numpy_pair, values: torch.Tensor) -> tuple:
    """The pair's values for an array of ``values``, and again after the array is changed: the first
    tensor must follow it, the second not."""
    array = values.numpy().copy()
    shared, independent = from_numpy_pair(array)
    before = (torch.as_tensor(shared).clone(), torch.as_tensor(independent).clone())
    array += 7
    return before, (torch.as_tensor(shared).clone(), torch.as_tensor(independent).clone())


JUDGED = [
    checks.JudgedCall("test_from_numpy_pair", "from_numpy_pair", "from_numpy_pair", _arrays,
                      outcome=from_numpy_pair_outcome),
    checks.JudgedCall("test_to_unit_float", "to_unit_float", "to_unit_float", _images),
    checks.JudgedCall("test_flatten_per_image", "flatten_per_image", "flatten_per_image", _batches),
    checks.JudgedCall("test_pairwise_distances", "pairwise_distances", "pairwise_distances", _point_sets),
    checks.JudgedCall("test_linear_forward", "linear_forward", "linear_forward", _layers),
    checks.JudgedCall("test_normalize_rows", "normalize_rows", "normalize_rows", _count_tables),
    checks.JudgedCall("test_prepare_batch", "prepare_batch", "prepare_batch", _raw_batches),
]


@checks.keeps_random_state
def check_to_unit_float(to_unit_float) -> None:
    """0 → 0.0 and 255 → 1.0 in float32, every value scaled alike, the input untouched."""
    hint = HINTS["to_unit_float"]
    generator = checks.fresh_generator()
    shape = tuple(_sizes(generator, 3, 2, 6))
    images = torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
    images.view(-1)[:2] = torch.tensor([0, 255], dtype=torch.uint8)
    before = images.clone()
    name = f"to_unit_float(images uint8 {shape})"
    got = checks.check_runs(to_unit_float, images, name=name, hint=hint)
    checks.check_shape(got, shape, name=name, hint=hint)
    checks.check_dtype(got, torch.float32, name=name, hint=hint)
    checks.check_close(got.view(-1)[:2], torch.tensor([0.0, 1.0]), name=f"{name}: 0 and 255", hint=hint)
    # scaling back by 255 must give the pixels again: a property, not a second answer
    checks.check_close((got.double() * 255).round(), before.double(), name=f"{name} × 255", hint=hint)
    checks.check_unchanged(before, images, name=name, hint=hint)


def _row_major_position(flat_index: int, shape) -> tuple:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), shape))


@checks.keeps_random_state
def check_flatten_per_image(flatten_per_image) -> None:
    """(N, ...) → (N, rest) in row-major order; a view of a contiguous input; permuted inputs work."""
    hint = HINTS["flatten_per_image"]
    generator = checks.fresh_generator()
    n, *image_shape = _sizes(generator, 4, 2, 5)
    rest = math.prod(image_shape)
    batch = torch.arange(n * rest).view(n, *image_shape)
    name = f"flatten_per_image(batch {tuple(batch.shape)})"
    got = _run("check_flatten_per_image", flatten_per_image, batch, name=name)
    checks.check_close(got, torch.arange(n * rest).view(n, rest), name=name, hint=hint)
    checks.check_shares_memory(got, batch, True, name=name, hint=hint)

    permuted = batch.permute(0, 3, 1, 2)
    name = f"flatten_per_image(batch.permute(0, 3, 1, 2) {tuple(permuted.shape)})"
    got = _run("check_flatten_per_image", flatten_per_image, permuted, name=name)
    checks.check_shape(got, (n, rest), name=name, hint=hint)
    for column in torch.randint(0, rest, (5,), generator=generator).tolist():
        image = int(torch.randint(0, n, (), generator=generator))
        expected = permuted[(image, *_row_major_position(column, permuted.shape[1:]))]
        checks.check_equal(int(got[image, column]), int(expected), name=f"{name}[{image}, {column}]",
                           hint=hint)


def _run(check: str, answer, *args, name: str):
    """``answer(*args)`` with the shortcuts of ``check`` off; an exception is reported as a failure."""
    __tracebackhide__ = True
    return checks.run_answer(answer, *args, name=name, hint=HINTS[check.removeprefix("check_")],
                             shortcuts=SHORTCUTS[check])


@checks.keeps_random_state
def check_pairwise_distances(pairwise_distances) -> None:
    """Shape (N, M); 3-4-5 triangles; zero to itself and symmetric; the same after a translation."""
    hint = HINTS["pairwise_distances"]
    generator = checks.fresh_generator()
    n, m, d = _sizes(generator, 3, 2, 6)
    a = torch.randn(n, d, generator=generator, dtype=torch.float64)
    b = torch.randn(m, d, generator=generator, dtype=torch.float64)
    name = f"pairwise_distances(a {(n, d)}, b {(m, d)})"
    got = _run("check_pairwise_distances", pairwise_distances, a, b, name=name)
    checks.check_shape(got, (n, m), name=name, hint=hint)

    # b[j] = a[0] + 3k·e₀ + 4k·e₁ lies at distance 5k from a[0]
    scales = torch.rand(m, generator=generator, dtype=torch.float64) * 3 + 0.5
    triangles = a[0].repeat(m, 1)
    triangles[:, 0] += 3 * scales
    triangles[:, 1] += 4 * scales
    label = f"pairwise_distances(a, 3-4-5 triangles from a[0])[0] (a {(n, d)})"
    got_triangles = _run("check_pairwise_distances", pairwise_distances, a, triangles, name=label)
    checks.check_shape(got_triangles, (n, m), name=label, hint=hint)
    checks.check_close(got_triangles[0], 5 * scales, name=label, hint=hint)

    label = f"pairwise_distances(a, a) (a {(n, d)})"
    itself = _run("check_pairwise_distances", pairwise_distances, a, a, name=label)
    checks.check_shape(itself, (n, n), name=label, hint=hint)
    checks.check_close(itself.diagonal(), torch.zeros(n, dtype=torch.float64), name=f"{label}.diagonal()",
                       hint=hint, atol=1e-6, rtol=0)
    checks.check_close(itself, itself.T, name=f"{label}: symmetry", hint=hint)

    shift = torch.randn(d, generator=generator, dtype=torch.float64) * 10
    label = f"pairwise_distances(a + t, b + t) (t a translation {(d,)})"
    moved = _run("check_pairwise_distances", pairwise_distances, a + shift, b + shift, name=label)
    checks.check_close(moved, got, name=label, hint=hint)


@checks.keeps_random_state
def check_linear_forward(linear_forward) -> None:
    """A weight whose rows pick one input feature each: output j is that feature plus bias j."""
    hint = HINTS["linear_forward"]
    generator = checks.fresh_generator()
    batch, n_in, n_out = _sizes(generator, 3, 2, 6)
    n_out = n_out + 1 if n_out == n_in else n_out  # a square weight would hide a missing transpose
    x = torch.randn(batch, 3, n_in, generator=generator)
    picked = torch.randint(0, n_in, (n_out,), generator=generator)
    weight = torch.nn.functional.one_hot(picked, n_in).float()
    bias = torch.randn(n_out, generator=generator)
    name = f"linear_forward(x {tuple(x.shape)}, weight {tuple(weight.shape)}, bias {(n_out,)})"
    got = _run("check_linear_forward", linear_forward, x, weight, bias, name=name)
    checks.check_shape(got, (batch, 3, n_out), name=name, hint=hint)
    # row j of the weight is one-hot at picked[j]: output j is that input feature, plus bias j
    checks.check_close(got, x[..., picked] + bias, name=f"{name}, one-hot rows {picked.tolist()}",
                       hint=hint)


@checks.keeps_random_state
def check_normalize_rows(normalize_rows) -> None:
    """Rows sum to 1 and stay proportional to the counts; a zero row stays zeros; dtype kept."""
    hint = HINTS["normalize_rows"]
    generator = checks.fresh_generator()
    for dtype in (torch.float32, torch.float64):
        n, k = _sizes(generator, 2, 3, 7)
        counts = torch.rand(n, k, generator=generator, dtype=dtype) * 10
        zero_row = int(torch.randint(0, n, (), generator=generator))
        counts[zero_row] = 0
        before = counts.clone()
        name = f"normalize_rows(counts {(n, k)} {dtype}, row {zero_row} all zeros)"
        got = _run("check_normalize_rows", normalize_rows, counts, name=name)
        checks.check_shape(got, (n, k), name=name, hint=hint)
        checks.check_dtype(got, dtype, name=name, hint=hint)
        expected_sums = torch.ones(n, dtype=dtype)
        expected_sums[zero_row] = 0
        checks.check_close(got.sum(dim=1), expected_sums, name=f"{name}.sum(dim=1)", hint=hint)
        # proportional: each row times its original total gives the counts back
        checks.check_close(got * before.sum(dim=1, keepdim=True), before, name=f"{name} × row totals",
                           hint=hint)
        checks.check_unchanged(before, counts, name=name, hint=hint)


def _random_array(generator, dtype):
    shape = tuple(_sizes(generator, 2, 1, 4))
    return torch.randint(-50, 50, shape, generator=generator, dtype=dtype).numpy()


@checks.keeps_random_state
def check_from_numpy_pair(from_numpy_pair) -> None:
    """Two tensors with the array's values and dtype: the first sees changes to it, the second not."""
    hint = HINTS["from_numpy_pair"]
    generator = checks.fresh_generator()
    for dtype in (torch.float64, torch.int32):
        array = _random_array(generator, dtype)
        name = f"from_numpy_pair(array {array.dtype} {array.shape})"
        result = checks.check_runs(from_numpy_pair, array, name=name, hint=hint)
        checks.check_type(result, tuple, name=name, hint=hint)
        checks.check_equal(len(result), 2, name=f"len({name})", hint=hint)
        shared, independent = result
        values = torch.tensor(array.tolist(), dtype=dtype)
        checks.check_close(shared, values, name=f"{name}[0]", hint=hint)
        checks.check_close(independent, values, name=f"{name}[1]", hint=hint)
        array.flat[0] += 99
        _sees_change(shared, array, True, f"{name}[0]")
        _sees_change(independent, array, False, f"{name}[1]")


def _sees_change(tensor, array, expected: bool, name: str) -> None:
    sees = bool(tensor.flatten()[0].item() == array.flat[0])
    words = {True: checks.both("ver los cambios del array", "to see changes to the array"),
             False: checks.both("una copia independiente", "an independent copy")}
    checks.check_true(sees == expected, name=name, expected=words[expected], got=words[sees],
                      hint=HINTS["from_numpy_pair"])


@checks.keeps_random_state
def check_prepare_batch(prepare_batch, device) -> None:
    """x as float32 and y as int64, both on the device asked for (cpu, meta and ``device``)."""
    hint = HINTS["prepare_batch"]
    generator = checks.fresh_generator()
    x = torch.randint(0, 256, (3, 4), generator=generator, dtype=torch.uint8)
    y = torch.randint(0, 10, (3,), generator=generator, dtype=torch.int32)
    for target in [torch.device("cpu"), torch.device("meta"), torch.device(device)]:
        name = f"prepare_batch(x, y, {str(target)!r})"
        got = checks.check_runs(prepare_batch, x, y, target, name=name, hint=hint)
        checks.check_type(got, tuple, name=name, hint=hint)
        checks.check_equal(len(got), 2, name=f"len({name})", hint=hint)
        for position, (tensor, dtype) in enumerate(zip(got, (torch.float32, torch.int64), strict=True)):
            checks.check_device(tensor, target, name=f"{name}[{position}]", hint=hint)
            checks.check_dtype(tensor, dtype, name=f"{name}[{position}]", hint=hint)
            if target.type != "meta":
                original = (x, y)[position]
                checks.check_equal(tensor.cpu().tolist(), original.tolist(), name=f"{name}[{position}]",
                                   hint=hint)
