"""Lesson 01 solved three honest ways, copies of one of them, and answers that only pass what is shown.

Each style is written as a different student would: other functions, other shapes of code, other
names. All earn full marks. ``renamed`` copies a style the way a student hides a copy: other
names, a comment, one statement split in two. ``HARD_CODED`` answers are fitted to what the
visible check of ``pairwise_distances`` draws (at least two points on each side): they drop every
size-1 dimension, so they pass it and fail the hidden tests, where one side has a single point.
"""

import re

from lesson_files import read_edition, read_solution

from graders.release.editions import fill_solutions, solution_sources

LESSON = "01_tensors"

# Every student answers the concept questions as the reference does (it answers any draw).
ANSWERS = solution_sources(read_solution(LESSON))["concept_check"]

STYLES = {
    "terse": {
        "to_unit_float": "def to_unit_float(images):\n    return images.float() / 255",
        "flatten_per_image": "def flatten_per_image(batch):\n    return batch.reshape(len(batch), -1)",
        "pairwise_distances": "def pairwise_distances(a, b):\n    return (a[:, None] - b).norm(dim=-1)",
        "linear_forward": "def linear_forward(x, weight, bias):\n    return x @ weight.t() + bias",
        "normalize_rows": "def normalize_rows(counts):\n    s = counts.sum(1, keepdim=True)\n"
                          "    return torch.where(s > 0, counts / s.clamp(min=1e-12),\n"
                          "                       torch.zeros_like(counts))",
        "from_numpy_pair": "def from_numpy_pair(array):\n"
                           "    return torch.from_numpy(array), torch.from_numpy(array.copy())",
        "prepare_batch": "def prepare_batch(x, y, device):\n"
                         "    return x.float().to(device), y.long().to(device)",
        "concept_check": ANSWERS,
    },
    "step_by_step": {
        "to_unit_float": "def to_unit_float(images):\n    scale = 1.0 / 255.0\n"
                         "    out = images.to(dtype=torch.float32)\n    return out * scale",
        "flatten_per_image": "def flatten_per_image(batch):\n    n = batch.shape[0]\n    rest = 1\n"
                             "    for size in batch.shape[1:]:\n        rest *= size\n"
                             "    return batch.reshape(n, rest)",
        "pairwise_distances": "def pairwise_distances(a, b):\n    diff = a.unsqueeze(1) - b.unsqueeze(0)\n"
                              "    return torch.sqrt((diff * diff).sum(-1))",
        "linear_forward": "def linear_forward(x, weight, bias):\n"
                          "    return torch.matmul(x, weight.transpose(0, 1)) + bias",
        "normalize_rows": "def normalize_rows(counts):\n    totals = counts.sum(dim=-1, keepdim=True)\n"
                          "    totals[totals == 0] = 1\n    return counts / totals",
        "from_numpy_pair": "def from_numpy_pair(array):\n    shared = torch.as_tensor(array)\n"
                           "    copied = torch.tensor(array.copy())\n    return shared, copied",
        "prepare_batch": "def prepare_batch(x, y, device):\n"
                         "    images = x.to(device=device, dtype=torch.float32)\n"
                         "    labels = y.to(device=device, dtype=torch.int64)\n    return images, labels",
        "concept_check": ANSWERS,
    },
    "library_calls": {
        "to_unit_float": "def to_unit_float(images):\n    return torch.div(images.double(), 255).float()",
        "flatten_per_image": "def flatten_per_image(batch):\n"
                             "    return torch.reshape(batch, (batch.shape[0], -1))",
        "pairwise_distances": "def pairwise_distances(a, b):\n"
                              "    squared = ((a ** 2).sum(1)[:, None] + (b ** 2).sum(1)[None, :]\n"
                              "               - 2 * a @ b.T)\n"
                              "    return squared.clamp_min(0).sqrt()",
        "linear_forward": "def linear_forward(x, weight, bias):\n"
                          "    return torch.tensordot(x, weight, dims=([-1], [1])) + bias",
        "normalize_rows": "def normalize_rows(counts):\n"
                          "    return torch.nan_to_num(counts / counts.sum(dim=1, keepdim=True))",
        "from_numpy_pair": "def from_numpy_pair(array):\n"
                           "    return (torch.from_numpy(array), torch.from_numpy(array).clone())",
        "prepare_batch": "def prepare_batch(x, y, device):\n"
                         "    return x.to(torch.float32).to(device), y.to(torch.int64).to(device)",
        "concept_check": ANSWERS,
    },
}

# Right whenever both sides have two points or more, as in the visible check; a single point on one
# side loses its dimension, and the hidden tests' shapes (1, M) and (N, 1) fail.
HARD_CODED = [
    "def pairwise_distances(a, b):\n    return (a[:, None] - b[None]).pow(2).sum(-1).sqrt().squeeze()",
    "def pairwise_distances(a, b):\n    gaps = a.unsqueeze(1) - b.unsqueeze(0)\n"
    "    return torch.sqrt((gaps ** 2).sum(dim=2)).squeeze()",
]
WRONG_DTYPE = "def to_unit_float(images):\n    return images"

_NEW_NAMES = {"scale": "factor", "out": "result", "n": "count", "rest": "width", "size": "dim",
              "diff": "delta", "totals": "sums", "shared": "view", "copied": "duplicate",
              "images": "imgs", "labels": "targets"}


def renamed(style: dict) -> dict:
    """A copy of ``style`` disguised: other names, a comment, one return split in two. The concept
    answers are data, formulas in the questions' own symbols: they keep their names."""
    disguised = {}
    for grade_id, code in style.items():
        for old, new in _NEW_NAMES.items() if grade_id != "concept_check" else ():
            code = re.sub(rf"\b{old}\b", new, code)
        disguised[grade_id] = "# my own work\n" + code.replace(
            "    return counts / sums", "    result = counts / sums\n    return result")
    return disguised


def notebook(solutions: dict, language: str = "en"):
    """The edition in ``language`` with these solution cells (the others keep the stub)."""
    return fill_solutions(read_edition(LESSON, language), solutions)
