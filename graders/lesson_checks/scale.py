"""Lesson 07 (scale): the checks its grade cells call, the harnesses of their hidden tests, the hints.

Visible checks draw fresh inputs on every run and compare with what can be known without solving
the exercise: sizes worked out by hand from what each layer saves, the definition of the answer
(the number of segments returned fits the budget and no smaller one does), properties of a split
(equal shares, every example once, padding that repeats the start), what a spy saw.

Two exercises re-create something that exists already; while they are checked, that thing refuses
to run (``SHORTCUTS``), and the exercise text says so: ``course.memory``'s meter during
``activation_bytes``, ``DistributedSampler`` during ``shard_indices``.

``top_k_names`` (torchvision's weights API) is checked with a spy model that notes what it receives
and answers with planted logits, against ResNet-18's weights enum and a weights enum made up on the
spot (its own sizes, normalisation and categories), so nothing is downloaded. The package exercise
(``minitrain/training.py``) is checked by launching ``torchrun --standalone`` on the student's file
with the lesson's other files (``scale_package/``, as the notebook writes them) and reading the JSON
line each process prints; the visible checks share one launch with a configuration drawn once per
kernel, the hidden tests one launch of their own. A launch in which a process is killed by a signal
is launched once more (``course.distributed.torchrun``).

``examples_curve`` (large batches) runs on a recording model and a spy SGD that note the batches,
each step's gradients and learning rate; the check recomputes each batch's loss and gradient from
the weights before its step. ``profile_step`` is checked by reading the profile it returns (its
regions, the operators inside each, the shapes and memory it noted: nothing timed, since times
change from run to run); ``top_by_memory`` reads a profile the check makes itself.

When a class is graded, every grade cell is also decided by the judge (``JUDGED``, at the end): each
exercise runs on inputs drawn from the class's secret and what it did comes back as plain data, to
be compared with what the reference does. The package exercise runs there in-process: one thread
per rank in torch's threaded process group, where DDP broadcasts and all-reduces between threads
as it does between processes, in milliseconds instead of a torchrun launch.
"""

import ast
import copy
import functools
import itertools
import json
import math
import numbers
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data.distributed import DistributedSampler

from course import distributed, training
from course.memory import SavedTensorMeter, model_state_tensors
from course.settings import say
from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = [
    "HINTS", "MORE_HINTS", "REGIONS", "CurveCase", "PackageRun", "blocks", "curve_case", "package_run",
    "per_rank_gradients", "probe_weights", "profile_of_a_step", "saved_with_segments", "warmup_rates",
    "check_curve_on", "check_examples_curve", "check_examples_curve_warmup", "check_profile_on",
    "check_profile_step", "check_top_by_memory", "check_top_on", "check_warmup_on",
    "check_activation_bytes", "check_activation_bytes_leaves_buffers_out", "check_activation_bytes_on",
    "check_average_gradients", "check_average_gradients_leaves_inputs", "check_average_on", "check_concepts",
    "check_freeze_backbone", "check_freeze_backbone_unfreezes_the_head", "check_head_trains_again",
    "check_inputs_left_alone", "check_learns_on", "check_names_on", "check_only_the_head_trains",
    "check_optimizer_on", "check_package_learns", "check_package_ranks_agree", "check_package_shards",
    "check_prepared_on", "check_ranks_agree_on", "check_segments_for_budget", "check_shard_indices_in_order",
    "check_shard_indices_shuffled", "check_shards_on", "check_shards_on_run", "check_top_k_names_input",
    "check_top_k_names_output", "check_trainable_optimizer", "grade_concepts", "show_questions",
]

# Kineto, torch.profiler's engine, writes a start and a stop line to stderr on every profile (and an
# error line where there is no GPU); in a grade cell any stderr fails the cell. Level 6 silences it
# all; it is read when the first profile starts, which in the lesson comes after this import.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# ------------------------------------------------------------------------------ switched-off tools
# What re-does an exercise's work, switched off while the answer runs, by each check that runs it:
# course.memory's meter (and so saved_bytes, model_saved_bytes), and DistributedSampler.
_METER = [(SavedTensorMeter, "__enter__"), (SavedTensorMeter, "_pack")]
_SAMPLER = [(DistributedSampler, "__init__"), (DistributedSampler, "__iter__")]
SHORTCUTS = {
    "check_activation_bytes": _METER,
    "check_activation_bytes_leaves_buffers_out": _METER,
    "check_activation_bytes_on": _METER,
    "check_shard_indices_in_order": _SAMPLER,
    "check_shard_indices_shuffled": _SAMPLER,
    "check_shards_on": _SAMPLER,
}
METER_OFF = checks.both(
    "el medidor de course.memory está apagado mientras se comprueba activation_bytes ({name} no "
    "responde): la cuenta la haces tú, con torch.autograd.graph.saved_tensors_hooks",
    "course.memory's meter is switched off while activation_bytes is checked ({name} refused): do the "
    "counting yourself, with torch.autograd.graph.saved_tensors_hooks")
SAMPLER_OFF = checks.both(
    "DistributedSampler está apagado mientras se comprueba shard_indices ({name} no responde): el "
    "reparto lo escribes tú",
    "DistributedSampler is switched off while shard_indices is checked ({name} refused): write the "
    "split yourself")


# --------------------------------------------------------------------------------- random inputs
def _draw(generator: torch.Generator, low: int, high: int) -> int:
    """A random int in ``[low, high]``."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


# ---------------------------------------------------------------------- exercise 1: activation bytes
def _mlp(width_in: int, hidden: int, width_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, hidden), nn.ReLU(), nn.Linear(hidden, width_out))


def _activation_bytes_on(check: str, activation_bytes, model, x, expected: int, label: str, hint) -> None:
    """``activation_bytes(model, x)``, with the shortcuts of ``check`` off, returns ``expected``."""
    __tracebackhide__ = True
    name = f"activation_bytes({label})"
    got = checks.run_answer(activation_bytes, model, x, name=name, hint=hint, shortcuts=SHORTCUTS[check],
                            message=METER_OFF)
    checks.check_equal(got, expected, name=name, hint=hint)


@checks.keeps_random_state
def check_activation_bytes_on(activation_bytes, model, x, expected: int, label: str, hint=None) -> None:
    """``activation_bytes(model, x)``, with the course's meter off, returns ``expected``."""
    __tracebackhide__ = True
    _activation_bytes_on("check_activation_bytes_on", activation_bytes, model, x, expected, label,
                         hint or HINTS["activation_bytes"])


@checks.keeps_random_state
def check_activation_bytes(activation_bytes) -> None:
    """An MLP on a random batch: its input and the ReLU's output (saved twice) count, once each;
    the second layer's weight, saved too, does not. In float64 every byte count doubles."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    batch, width_in, hidden, width_out = (_draw(generator, 3, 40) for _ in range(4))
    with checks.seeded(generator.initial_seed()):
        model = _mlp(width_in, hidden, width_out)
    x = torch.randn(batch, width_in, generator=generator)
    layers = f"Linear({width_in}, {hidden}) → ReLU → Linear({hidden}, {width_out})"
    for dtype, size in [(torch.float32, 4), (torch.float64, 8)]:
        _activation_bytes_on("check_activation_bytes", activation_bytes, model.to(dtype), x.to(dtype),
                             batch * (width_in + hidden) * size, f"{layers}, x {tuple(x.shape)} {dtype}",
                             HINTS["activation_bytes"])


@checks.keeps_random_state
def check_activation_bytes_leaves_buffers_out(activation_bytes) -> None:
    """Linear → BatchNorm1d. Training mode saves the input, BatchNorm's input, and the batch's mean
    and inverse deviation (one number per feature each); eval mode saves the running statistics
    instead, which are buffers and do not count."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    batch, width_in, features = (_draw(generator, 3, 40) for _ in range(3))
    with checks.seeded(generator.initial_seed()):
        model = nn.Sequential(nn.Linear(width_in, features), nn.BatchNorm1d(features))
    x = torch.randn(batch, width_in, generator=generator)
    inputs = batch * (width_in + features) * 4
    for mode, expected in [("train", inputs + 2 * features * 4), ("eval", inputs)]:
        getattr(model, mode)()
        label = f"Linear({width_in}, {features}) → BatchNorm1d, model.{mode}(), x {tuple(x.shape)}"
        _activation_bytes_on("check_activation_bytes_leaves_buffers_out", activation_bytes, model, x,
                             expected, label, HINTS["activation_bytes_buffers"])


# ------------------------------------------------------------------- exercise 2: segments for budget
def blocks(depth: int, width: int) -> nn.Sequential:
    """The lesson's deep model: ``depth`` blocks Linear → LayerNorm → GELU."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                           for _ in range(depth)])


def saved_with_segments(model: nn.Sequential, x, segments: int) -> int:
    """Bytes kept for backward when ``model`` runs through ``checkpoint_sequential`` in ``segments``
    segments, the model's parameters and buffers left out."""
    with SavedTensorMeter(exclude=model_state_tensors(model)) as meter:
        output = checkpoint_sequential(model, segments, x, use_reentrant=False)
    del output  # alive until the meter closed, so that nothing was freed while it counted
    return meter.bytes


def _segments_for_budget_on(segments_for_budget, model, x, budget: int, label: str) -> None:
    """The definition: the count returned fits the budget and no smaller count does; ``None`` only
    when no count from 1 to ``len(model)`` fits."""
    __tracebackhide__ = True
    name, hint = f"segments_for_budget({label}, budget_bytes={budget})", HINTS["segments_for_budget"]
    got = checks.check_runs(segments_for_budget, model, x, budget, name=name, hint=hint)
    if got is not None:
        checks.check_type(got, int, name=name, hint=hint)
        checks.check_true(1 <= got <= len(model), name=name, hint=hint,
                          expected=f"1 ≤ k ≤ {len(model)}", got=f"k = {got}")
        used = saved_with_segments(model, x, got)
        checks.check_true(used <= budget, name=name, hint=hint,
                          expected=checks.both(f"un k cuyos bytes guardados quepan en {budget}",
                                               f"a k whose saved bytes fit {budget}"),
                          got=checks.both(f"k = {got}, que guarda {used} bytes",
                                          f"k = {got}, which saves {used} bytes"))
    for smaller in range(1, len(model) + 1 if got is None else got):
        used = saved_with_segments(model, x, smaller)
        checks.check_true(used > budget, name=name, hint=hint,
                          expected=checks.both(
                              f"k ≤ {smaller} (k = {smaller} ya cabe: guarda {used} bytes)",
                              f"k ≤ {smaller} (k = {smaller} fits already: saves {used} bytes)"),
                          got=f"k = {got}")


@checks.keeps_random_state
def check_segments_for_budget(segments_for_budget) -> None:
    """A random deep model and three budgets: what one segment saves (the answer is 1), what a
    random count saves (the answer is that count or fewer), and nothing at all (no count fits)."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    depth, width, batch = _draw(generator, 5, 9), 16 * _draw(generator, 2, 5), _draw(generator, 8, 40)
    with checks.seeded(generator.initial_seed()):
        model = blocks(depth, width)
    x = torch.randn(batch, width, generator=generator)
    label = f"{depth} × (Linear({width}, {width}) → LayerNorm → GELU), x {tuple(x.shape)}"
    for segments in (1, _draw(generator, 2, depth)):
        _segments_for_budget_on(segments_for_budget, model, x, saved_with_segments(model, x, segments), label)
    _segments_for_budget_on(segments_for_budget, model, x, 0, label)


# -------------------------------------------------------------------- exercise 3: freeze the backbone
def _cnn_and_images(generator):
    channels = (_draw(generator, 2, 6), _draw(generator, 2, 6))
    classes = _draw(generator, 2, 9)
    with checks.seeded(generator.initial_seed()):
        model = training.make_cnn(channels=channels, num_classes=classes)
    images = torch.randn(3, 1, 28, 28, generator=generator)
    return model, images, f"make_cnn(channels={channels}, num_classes={classes})"


@checks.keeps_random_state
def check_only_the_head_trains(freeze_backbone, model, images, label, hint=None) -> None:
    """After ``freeze_backbone(model)``: it returned the head's number of elements, exactly the
    head's parameters ask for gradients, and a backward pass fills exactly their ``.grad``.
    ``label`` describes the model, in one language or in both (``checks.both``)."""
    __tracebackhide__ = True
    label = say(label)
    hint, name = hint or HINTS["freeze_backbone"], f"freeze_backbone({label})"
    got = checks.check_runs(freeze_backbone, model, name=name, hint=hint)
    head = {id(p) for p in model[-1].parameters()}
    wrong = [n for n, p in model.named_parameters() if p.requires_grad != (id(p) in head)]
    checks.check_equal(wrong, [], hint=hint, name=checks.both(
        f"parámetros con requires_grad equivocado ({label})",
        f"parameters with the wrong requires_grad ({label})"))
    checks.check_equal(got, sum(p.numel() for p in model[-1].parameters()), name=name, hint=hint)
    model(images).sum().backward()
    wrong = [n for n, p in model.named_parameters() if (p.grad is not None) != (id(p) in head)]
    checks.check_equal(wrong, [], hint=hint, name=checks.both(
        f"parámetros cuyo .grad sobra o falta tras backward() ({label})",
        f"parameters with a .grad they should not have, or without one, after backward() ({label})"))


def _freeze_head(model: nn.Sequential) -> nn.Sequential:
    """``model`` with its last layer frozen beforehand, as someone else might have left it."""
    for p in model[-1].parameters():
        p.requires_grad_(False)
    return model


@checks.keeps_random_state
def check_freeze_backbone(freeze_backbone) -> None:
    """A CNN of random sizes: everything but its last layer frozen."""
    __tracebackhide__ = True
    check_only_the_head_trains(freeze_backbone, *_cnn_and_images(checks.fresh_generator()))


@checks.keeps_random_state
def check_head_trains_again(freeze_backbone, model, images, label: str) -> None:
    """``model``'s head is frozen, then ``freeze_backbone`` must leave only the head trainable."""
    __tracebackhide__ = True
    frozen_before = checks.both(f"{label}, con la cabeza congelada antes", f"{label}, head frozen before")
    check_only_the_head_trains(freeze_backbone, _freeze_head(model), images, frozen_before,
                               hint=HINTS["freeze_backbone_head"])


@checks.keeps_random_state
def check_freeze_backbone_unfreezes_the_head(freeze_backbone) -> None:
    """A CNN whose head was frozen before the call: the head must train again."""
    __tracebackhide__ = True
    check_head_trains_again(freeze_backbone, *_cnn_and_images(checks.fresh_generator()))


# ------------------------------------------------------------------- exercise 4: trainable optimizer
@checks.keeps_random_state
def check_optimizer_on(trainable_optimizer, model, images, lr: float, label: str) -> None:
    """An AdamW at ``lr`` holding exactly the trainable parameters: a step with gradients of zeros
    on the frozen ones leaves them where they were."""
    __tracebackhide__ = True
    hint, name = HINTS["trainable_optimizer"], f"trainable_optimizer({label}, lr={lr:g})"
    built = checks.check_runs(trainable_optimizer, model, lr, name=name, hint=hint)
    checks.check_type(built, torch.optim.AdamW, name=name, hint=hint)
    held = {id(p) for group in built.param_groups for p in group["params"]}
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    frozen_held = sum(not p.requires_grad and id(p) in held for p in model.parameters())
    checks.check_true(held == trainable, name=name, hint=hint,
                      expected=checks.both(f"los {len(trainable)} parámetros entrenables, ningún congelado",
                                           f"the {len(trainable)} trainable parameters, no frozen one"),
                      got=checks.both(f"{len(held)} parámetros, {frozen_held} de ellos congelados",
                                      f"{len(held)} parameters, {frozen_held} of them frozen"))
    checks.check_close(built.param_groups[0]["lr"], lr, name=f"{name}.param_groups[0]['lr']", hint=hint)
    frozen = {key: p for key, p in model.named_parameters() if not p.requires_grad}
    before = {key: p.detach().clone() for key, p in frozen.items()}
    for p in frozen.values():
        p.grad = torch.zeros_like(p)          # what zero_grad(set_to_none=False) leaves behind
    model(images).sum().backward()
    built.step()
    moved = [key for key, p in frozen.items() if not torch.equal(p, before[key])]
    checks.check_equal(moved, [], hint=hint, name=checks.both(
        f"parámetros congelados que se movieron tras el step() del optimizador ({label})",
        f"frozen parameters that moved after the optimizer's step() ({label})"))


@checks.keeps_random_state
def check_trainable_optimizer(trainable_optimizer) -> None:
    """An MLP of random width with a frozen backbone, and a random learning rate."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    hidden, classes = _draw(generator, 4, 40), _draw(generator, 2, 9)
    with checks.seeded(generator.initial_seed()):
        model = training.make_mlp(hidden=hidden, num_classes=classes)
    for p in model[:-1].parameters():
        p.requires_grad_(False)
    lr = _draw(generator, 1, 9) * 10.0 ** -_draw(generator, 2, 4)
    images = torch.randn(3, 1, 28, 28, generator=generator)
    check_optimizer_on(trainable_optimizer, model, images, lr,
                       f"make_mlp(hidden={hidden}, num_classes={classes}) | model[:-1]: requires_grad=False")


# ------------------------------------------------------------------------ exercise 5: shard indices
# Worked out by hand from the rules: 10 examples over 3 processes pad to 12 with 0 and 1 again;
# 7 over 4 pad to 8 with 0 again; 2 over 5 pad to 5 going round the two examples twice more.
BY_HAND = {(10, 3): [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]],
           (7, 4): [[0, 4], [1, 5], [2, 6], [3, 0]],
           (2, 5): [[0], [1], [0], [1], [0]]}
# The lesson's printout of DistributedSampler: 10 examples, 3 processes, shuffled with seed 0.
SHUFFLED_10_OVER_3 = {0: [[4, 5, 0, 2], [1, 3, 8, 4], [7, 9, 6, 1]],
                      1: [[5, 2, 9, 4], [6, 0, 3, 5], [1, 8, 7, 6]]}


def _shards(check: str, shard_indices, n, replicas, *, hint, **options) -> list:
    """Every process's share, from ``shard_indices`` with the shortcuts of ``check`` off."""
    __tracebackhide__ = True
    shown = "".join(f", {key}={value}" for key, value in options.items())
    shares = []
    for rank in range(replicas):
        name = f"shard_indices({n}, {replicas}, {rank}{shown})"
        share = checks.run_answer(shard_indices, n, replicas, rank, name=name, hint=hint,
                                  shortcuts=SHORTCUTS[check], message=SAMPLER_OFF, **options)
        checks.check_type(share, list, name=name, hint=hint)
        shares.append(share)
    return shares


def _shards_on(check: str, shard_indices, n: int, replicas: int, expected: list, *, hint, **options) -> None:
    """Every process's share, from rank 0 to the last, is the one in ``expected``."""
    __tracebackhide__ = True
    shown = "".join(f", {key}={value}" for key, value in options.items())
    checks.check_equal(_shards(check, shard_indices, n, replicas, hint=hint, **options), expected, hint=hint,
                       name=f"[shard_indices({n}, {replicas}, rank{shown}) for rank in range({replicas})]")


@checks.keeps_random_state
def check_shards_on(shard_indices, n: int, replicas: int, expected: list, *, hint=None, **options) -> None:
    """Every process's share, from rank 0 to the last, is the one in ``expected``."""
    __tracebackhide__ = True
    _shards_on("check_shards_on", shard_indices, n, replicas, expected, hint=hint or HINTS["shard_indices"],
               **options)


def _split_properties(check: str, shard_indices, n: int, replicas: int, *, hint, **options) -> list:
    """Equal shares of ⌈n / replicas⌉; read across the processes (rank 0's first index, rank 1's
    first, …, then everyone's second…) they give every example exactly once, then the padding, which
    repeats the start. Returns that order."""
    __tracebackhide__ = True
    shares = _shards(check, shard_indices, n, replicas, hint=hint, **options)
    size = math.ceil(n / replicas)
    shown = "".join(f", {key}={value}" for key, value in options.items())
    label = f"shard_indices({n}, {replicas}, rank{shown})"
    checks.check_equal([len(share) for share in shares], [size] * replicas, hint=hint, name=checks.both(
        f"longitudes de {label} para rank = 0…{replicas - 1}",
        f"lengths of {label} for rank = 0…{replicas - 1}"))
    order = [share[i] for i in range(size) for share in shares]
    checks.check_equal(sorted(order[:n]), list(range(n)), hint=hint, name=checks.both(
        f"los {n} primeros índices leídos a través de los procesos, ordenados ({label})",
        f"the first {n} indices read across the processes, sorted ({label})"))
    checks.check_equal(order[n:], order[:len(order) - n], hint=hint, name=checks.both(
        f"el relleno tras los {n} ejemplos (debe repetir el principio) ({label})",
        f"the padding after the {n} examples (it must repeat the start) ({label})"))
    return order


@checks.keeps_random_state
def check_shard_indices_in_order(shard_indices) -> None:
    """Small cases worked out by hand, then the properties of a split of random size."""
    __tracebackhide__ = True
    hint = HINTS["shard_indices"]
    for (n, replicas), expected in BY_HAND.items():
        _shards_on("check_shard_indices_in_order", shard_indices, n, replicas, expected, hint=hint)
    generator = checks.fresh_generator()
    n, replicas = _draw(generator, 11, 60), _draw(generator, 2, 7)
    order = _split_properties("check_shard_indices_in_order", shard_indices, n, replicas, hint=hint)
    checks.check_equal(order[:n], list(range(n)), hint=hint, name=checks.both(
        f"el orden sin barajar, leído a través de los procesos (shard_indices({n}, {replicas}, rank))",
        f"the unshuffled order, read across the processes (shard_indices({n}, {replicas}, rank))"))


@checks.keeps_random_state
def check_shard_indices_shuffled(shard_indices) -> None:
    """The lesson's printout for 10 examples, then a random split: its properties, the same result
    for the same seed + epoch, another order in another epoch."""
    __tracebackhide__ = True
    hint = HINTS["shard_indices_shuffled"]
    for epoch, expected in SHUFFLED_10_OVER_3.items():
        _shards_on("check_shard_indices_shuffled", shard_indices, 10, 3, expected, hint=hint, shuffle=True,
                   seed=0, epoch=epoch)
    generator = checks.fresh_generator()
    n, replicas = _draw(generator, 20, 60), _draw(generator, 2, 7)
    seed, epoch = _draw(generator, 0, 99), _draw(generator, 1, 9)

    def split(seed, epoch):
        return _split_properties("check_shard_indices_shuffled", shard_indices, n, replicas, hint=hint,
                                 shuffle=True, seed=seed, epoch=epoch)

    name = f"shard_indices({n}, {replicas}, rank, shuffle=True, ...)"
    order, same, other = split(seed, epoch), split(seed + 1, epoch - 1), split(seed, epoch + 1)
    checks.check_true(order == same, name=name, hint=hint,
                      expected=checks.both(f"el mismo reparto con seed={seed}, epoch={epoch} que con "
                                           f"seed={seed + 1}, epoch={epoch - 1} (misma suma)",
                                           f"the same split with seed={seed}, epoch={epoch} as with "
                                           f"seed={seed + 1}, epoch={epoch - 1} (same sum)"),
                      got=checks.both("repartos distintos", "different splits"))
    checks.check_true(order != other, name=name, hint=hint,
                      expected=checks.both(f"otro orden en la época {epoch + 1} que en la {epoch}",
                                           f"another order in epoch {epoch + 1} than in epoch {epoch}"),
                      got=checks.both("el mismo orden", "the same order"))


# ---------------------------------------------------------------------- exercise 6: average gradients
def _gradients(model, x, y) -> dict:
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def per_rank_gradients(model, x, y, world: int) -> tuple[list, dict]:
    """Each of ``world`` processes' gradients on its share of the batch, and the whole batch's."""
    shares = [_gradients(model, x[rank::world], y[rank::world]) for rank in range(world)]
    return shares, _gradients(model, x, y)


@checks.keeps_random_state
def check_average_on(average_gradients, per_rank: list, expected: dict, label: str) -> None:
    """``average_gradients(per_rank)`` is a dict with ``expected``'s names and values."""
    __tracebackhide__ = True
    hint, name = HINTS["average_gradients"], f"average_gradients({label})"
    got = checks.check_runs(average_gradients, per_rank, name=name, hint=hint)
    checks.check_type(got, dict, name=name, hint=hint)
    checks.check_equal(sorted(got), sorted(expected), name=f"sorted({name})", hint=hint)
    for key, value in expected.items():
        checks.check_close(got[key], value, name=f"{name}[{key!r}]", hint=hint)


@checks.keeps_random_state
def check_average_gradients(average_gradients) -> None:
    """A case by hand, then the property that makes DDP work: the mean of equal shares' gradients is
    the whole batch's gradient."""
    __tracebackhide__ = True
    by_hand = [{"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0])},
               {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([4.0])}]
    check_average_on(average_gradients, by_hand, {"w": torch.tensor([2.0, 4.0]), "b": torch.tensor([2.0])},
                     "[{'w': [1., 2.], 'b': [0.]}, {'w': [3., 6.], 'b': [4.]}]")
    check_average_on(average_gradients, *_random_ranks())


def _random_ranks() -> tuple:
    """Per-rank gradients of a random MLP on a random batch split in equal shares, the whole batch's
    gradient, and a label: what ``check_average_on`` takes."""
    generator = checks.fresh_generator()
    world, hidden = _draw(generator, 2, 4), _draw(generator, 4, 30)
    batch = world * _draw(generator, 1, 4)
    with checks.seeded(generator.initial_seed()):
        model = _mlp(6, hidden, 3)
    x, y = torch.randn(batch, 6, generator=generator), torch.randint(0, 3, (batch,), generator=generator)
    return (*per_rank_gradients(model, x, y, world),
            f"world_size={world}, batch={batch}, MLP(6 → {hidden} → 3)")


@checks.keeps_random_state
def check_inputs_left_alone(average_gradients, per_rank: list, expected: dict, label: str) -> None:
    """``average_gradients`` returns a new dict holding ``expected`` and leaves every input tensor as
    it was."""
    __tracebackhide__ = True
    hint, name = HINTS["average_gradients_inputs"], f"average_gradients({label})"
    kept = [{key: value.clone() for key, value in grads.items()} for grads in per_rank]
    got = checks.check_runs(average_gradients, per_rank, name=name, hint=hint)
    changed = [f"per_rank[{rank}][{key!r}]"
               for rank, (grads, copy) in enumerate(zip(per_rank, kept, strict=True))
               for key in copy if not torch.equal(grads[key], copy[key])]
    checks.check_equal(changed, [], hint=hint, name=checks.both(
        f"gradientes de entrada modificados ({label})", f"input gradients modified ({label})"))
    checks.check_true(all(got is not grads for grads in per_rank), name=name, hint=hint,
                      expected=checks.both("un diccionario nuevo", "a new dictionary"),
                      got=checks.both("uno de los de entrada", "one of the input ones"))
    check_average_on(average_gradients, per_rank, expected, label)


@checks.keeps_random_state
def check_average_gradients_leaves_inputs(average_gradients) -> None:
    """The gradients of random processes: inputs untouched, the result new (and right)."""
    __tracebackhide__ = True
    check_inputs_left_alone(average_gradients, *_random_ranks())


# ------------------------------------------------------------ exercise 5: pretrained weights' top-k
def probe_weights(generator: torch.Generator):
    """A torchvision weights enum member made up on the spot: random crop and resize sizes,
    interpolation, normalisation and category names, so that only what the weights themselves say
    gives the right answer. Nothing to download: its ``url`` points nowhere."""
    from torchvision.models import Weights, WeightsEnum
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms._presets import ImageClassification

    crop = 8 * _draw(generator, 8, 12)
    resize = round(crop / (0.7 + 0.1 * torch.rand(1, generator=generator).item()))
    mean = tuple(round(0.2 + 0.6 * v, 3) for v in torch.rand(3, generator=generator).tolist())
    std = tuple(round(0.15 + 0.3 * v, 3) for v in torch.rand(3, generator=generator).tolist())
    interpolation = [InterpolationMode.BILINEAR, InterpolationMode.BICUBIC][_draw(generator, 0, 1)]
    classes = _draw(generator, 12, 40)
    categories = [f"{training.CLASSES[i % 10].lower().replace('/', '-')} #{i}" for i in
                  torch.randperm(classes, generator=generator).tolist()]
    preset = functools.partial(ImageClassification, crop_size=crop, resize_size=resize, mean=mean, std=std,
                               interpolation=interpolation)
    members = {"PROBE": Weights(url="https://example.invalid/probe.pth", transforms=preset,
                                meta={"categories": categories, "num_params": 0})}
    return WeightsEnum("Probe_Weights", members).PROBE


def _framed_images(generator: torch.Generator, count: int, low: int, high: int) -> tuple:
    """``count`` uint8 images (3 × H × W, H and W in ``[low, high]``) of one colour each, inside a
    thin frame of another colour; and the inner colours, as a (count, 3) tensor of 0-255 values.
    Resized so that the short side matches the weights' resize size and centre-cropped, the frame
    falls outside the crop; resized straight to the crop size, it stays."""
    height, width = _draw(generator, low, high), _draw(generator, low, high)
    inner = torch.randint(0, 256, (count, 3), generator=generator)
    outer = (inner + torch.randint(60, 196, (count, 3), generator=generator)) % 256
    images = outer[:, :, None, None].expand(count, 3, height, width).clone()
    edge = 1 if min(height, width) < 100 else 2
    images[:, :, edge:height - edge, edge:width - edge] = inner[:, :, None, None]
    return images.to(torch.uint8), inner


class _SpyClassifier(nn.Module):
    """A stand-in for a pretrained classifier: it notes what it was called with (the batch, its own
    mode, whether a graph was being recorded) and answers with logits planted by the check."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self.planted = logits
        self.calls = []

    def forward(self, batch):
        self.calls.append({"batch": batch.detach().clone() if isinstance(batch, torch.Tensor) else batch,
                           "training": self.training, "grad": torch.is_grad_enabled()})
        return self.planted.clone() + self.weight


def _planted_logits(generator: torch.Generator, count: int, classes: int, k: int) -> tuple:
    """Random logits for ``count`` images in which ``k`` chosen categories per image stand out in a
    chosen order; and those categories, most likely first."""
    logits = torch.randn(count, classes, generator=generator)
    chosen = [torch.randperm(classes, generator=generator)[:k].tolist() for _ in range(count)]
    for row, indices in enumerate(chosen):
        for place, index in enumerate(indices):
            logits[row, index] = 10.0 + k - place
    return logits, chosen


def _called_once(top_k_names, spy, weights, images, k, label, hint):
    __tracebackhide__ = True
    name = f"top_k_names(model, {label}, images {tuple(images.shape)} uint8, k={k})"
    spy.train()
    got = checks.check_runs(top_k_names, spy, weights, images.clone(), k, name=name, hint=hint)
    checks.check_true(len(spy.calls) == 1, name=name, hint=hint,
                      expected=checks.both("el modelo llamado una vez, con el lote entero",
                                           "the model called once, with the whole batch"),
                      got=checks.both(f"{len(spy.calls)} llamadas", f"{len(spy.calls)} calls"))
    return name, got, spy.calls[0]


@checks.keeps_random_state
def check_prepared_on(top_k_names, weights, images, expected: torch.Tensor, label: str, hint=None) -> None:
    """The model received ``expected`` (the batch prepared as ``weights`` expect), in eval mode and
    with no graph being recorded."""
    __tracebackhide__ = True
    hint = hint or HINTS["top_k_names"]
    classes = len(weights.meta["categories"])
    spy = _SpyClassifier(torch.randn(len(images), classes, generator=checks.fresh_generator()))
    name, _, call = _called_once(top_k_names, spy, weights, images, 1, label, hint)
    checks.check_equal(call["training"], False, hint=hint, name=checks.both(
        f"model.training durante la llamada ({name})",
        f"model.training during the call ({name})"))
    checks.check_equal(call["grad"], False, hint=hint, name=checks.both(
        f"torch.is_grad_enabled() durante la llamada ({name})",
        f"torch.is_grad_enabled() during the call ({name})"))
    checks.check_close(call["batch"], expected, hint=hint, atol=1e-4, rtol=1e-4, name=checks.both(
        f"el lote que recibió el modelo ({name})", f"the batch the model received ({name})"))


def _prepared_by_hand(weights, inner: torch.Tensor) -> torch.Tensor:
    """What a one-colour image becomes: every pixel (colour / 255 − mean) / std, crop × crop."""
    preset = weights.transforms()
    crop = preset.crop_size[0]
    mean, std = torch.tensor(preset.mean), torch.tensor(preset.std)
    values = (inner.to(torch.float32) / 255 - mean) / std
    return values[:, :, None, None].expand(len(inner), 3, crop, crop).contiguous()


@checks.keeps_random_state
def check_top_k_names_input(top_k_names) -> None:
    """ResNet-18's weights and a made-up weights enum: framed one-colour images, smaller than the
    crop, must reach the model as ``crop × crop`` batches of one value per channel (resized, the
    frame cropped away, scaled to [0, 1] and normalised with the weights' own mean and std), with
    the model in eval mode and no graph recorded."""
    __tracebackhide__ = True
    from torchvision.models import ResNet18_Weights

    generator = checks.fresh_generator()
    for weights, label in [(ResNet18_Weights.DEFAULT, "ResNet18_Weights.DEFAULT"),
                           (probe_weights(generator), None)]:
        crop = weights.transforms().crop_size[0]
        images, inner = _framed_images(generator, _draw(generator, 2, 3), crop // 2, crop * 4 // 5)
        label = label or _describe_probe(weights)
        check_prepared_on(top_k_names, weights, images, _prepared_by_hand(weights, inner), label)


def _describe_probe(weights) -> str:
    preset = weights.transforms()
    return (f"Probe_Weights.PROBE (resize {preset.resize_size[0]}, crop {preset.crop_size[0]}, "
            f"mean {list(preset.mean)}, std {list(preset.std)}, "
            f"{len(weights.meta['categories'])} categories)")


@checks.keeps_random_state
def check_names_on(top_k_names, weights, images, logits, k: int, expected: list, label: str,
                   hint=None) -> None:
    """With ``logits`` as the model's answer, ``top_k_names`` returns ``expected``: one list of ``k``
    category names per image, most likely first."""
    __tracebackhide__ = True
    hint = hint or HINTS["top_k_names_output"]
    name, got, _ = _called_once(top_k_names, _SpyClassifier(logits), weights, images, k, label, hint)
    checks.check_type(got, list, name=name, hint=hint)
    checks.check_equal([list(row) if isinstance(row, (list, tuple)) else row for row in got], expected,
                       name=name, hint=hint)


@checks.keeps_random_state
def check_top_k_names_output(top_k_names) -> None:
    """Planted logits: the names of the chosen categories, in the chosen order, for ResNet-18's
    weights (ImageNet's 1,000 categories) and for a made-up weights enum with its own names."""
    __tracebackhide__ = True
    from torchvision.models import ResNet18_Weights

    generator = checks.fresh_generator()
    for weights, label in [(ResNet18_Weights.DEFAULT, "ResNet18_Weights.DEFAULT"),
                           (probe_weights(generator), None)]:
        names = weights.meta["categories"]
        count, k = _draw(generator, 2, 4), _draw(generator, 2, 5)
        logits, chosen = _planted_logits(generator, count, len(names), k)
        crop = weights.transforms().crop_size[0]
        images, _ = _framed_images(generator, count, crop // 2, crop * 4 // 5)
        expected = [[names[i] for i in row] for row in chosen]
        check_names_on(top_k_names, weights, images, logits, k, expected, label or _describe_probe(weights))


# ----------------------------------------------------------------- exercise 8: the package under torchrun
# The files of the package the lesson writes, as the lesson writes them (a test compares them with
# the notebook's cells). A check runs the student's minitrain/training.py with these.
FILES = Path(__file__).with_name("scale_package")
TRAINING_FILE = "minitrain/training.py"
TORCHRUN_TIMEOUT_S = 60
_RUNS = {}      # (training.py's text, configuration) → PackageRun, so that grade cells share a launch
_SESSION = {}   # the configuration the visible checks draw once per kernel


@dataclass(frozen=True)
class PackageRun:
    """What ``train.py`` printed under torchrun: one dict per process, rank order; or why it failed.
    ``retried`` says why the launch was made twice (a process killed by a signal), if it was."""

    world_size: int
    examples: int
    epochs: int
    batch_size: int
    seed: int
    reports: tuple = ()
    failure: str = ""
    retried: str = ""

    @property
    def command(self) -> str:
        return (f"torchrun --standalone --nproc_per_node={self.world_size} train.py --examples "
                f"{self.examples} --epochs {self.epochs} --batch-size {self.batch_size} --seed {self.seed}")


def _launch(folder: Path, run: PackageRun, timeout_s: float) -> PackageRun:
    launch = distributed.torchrun(folder, run.world_size, "train.py", "--examples", run.examples, "--epochs",
                                  run.epochs, "--batch-size", run.batch_size, "--seed", run.seed,
                                  timeout_s=timeout_s)
    run = replace(run, retried=launch.retried)
    if launch.timed_out:
        return replace(run, failure=say(checks.both(
            f"no terminó en {timeout_s:.0f} s (¿procesos que dan distinto número de pasos "
            "y se esperan en el all-reduce?)",
            f"did not finish within {timeout_s:.0f} s (processes taking different numbers of "
            "steps, waiting for each other in the all-reduce?)")) + launch.errors())
    reports = []
    for line in launch.stdout.splitlines():
        try:
            reports.append(json.loads(line))
        except ValueError:
            continue
    reports = tuple(sorted((r for r in reports if isinstance(r, dict) and "rank" in r),
                           key=lambda r: r["rank"]))
    if launch.returncode != 0 or len(reports) != run.world_size:
        return replace(run, reports=reports, failure=say(checks.both(
            f"código de salida {launch.returncode}, {len(reports)} líneas JSON de {run.world_size}",
            f"exit code {launch.returncode}, {len(reports)} JSON lines of {run.world_size}"))
            + launch.errors())
    return replace(run, reports=reports)


def _cannot_be_imported(text: str, source: Path) -> str:
    """Why ``train.py`` could not import ``train`` from ``text``, seen without running it: the file
    does not parse, or no name ``train`` appears in it at all (no star import or module
    ``__getattr__`` either). ``""`` when it may work: only the launch can tell."""
    try:
        tree = ast.parse(text, filename=str(source))
    except SyntaxError as error:
        return f"SyntaxError: {error.msg} ({source}, line {error.lineno})"
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    if names & {"train", "*", "__getattr__"}:
        return ""
    return say(checks.both(f"{source} no define train, que train.py importa "
                           "(from minitrain.training import train)",
                           f"{source} does not define train, which train.py imports "
                           "(from minitrain.training import train)"))


def package_run(run_dir, *, world_size: int, examples: int, epochs: int, batch_size: int, seed: int,
                timeout_s: float = TORCHRUN_TIMEOUT_S) -> PackageRun:
    """Run ``run_dir``'s ``minitrain/training.py`` under ``torchrun --standalone`` with the lesson's
    other files (fresh copies in a temporary folder), once per text of that file and configuration.
    A file that cannot work (it does not parse, or defines no ``train``) fails without a launch."""
    run = PackageRun(world_size, examples, epochs, batch_size, seed)
    source = Path(run_dir) / TRAINING_FILE
    if not source.is_file():
        return replace(run, failure=say(checks.both(f"no existe {source}: ejecuta la celda que lo escribe",
                                                    f"{source} does not exist: run the cell that writes it")))
    text = source.read_text()
    unusable = _cannot_be_imported(text, source)
    if unusable:
        return replace(run, failure=unusable)
    key = (text, run)
    if key not in _RUNS:
        with tempfile.TemporaryDirectory(prefix="minitrain-check-") as folder:
            shutil.copytree(FILES, folder, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".*", "__pycache__"))
            (Path(folder) / TRAINING_FILE).write_text(text)
            _RUNS[key] = _launch(Path(folder), run, timeout_s)
    return _RUNS[key]


def _session_run(run_dir) -> PackageRun:
    """The visible checks' run: a configuration drawn afresh once per kernel, shared by the checks."""
    if not _SESSION:
        generator = checks.fresh_generator()
        batch = _draw(generator, 8, 12)
        _SESSION.update(world_size=2, batch_size=batch, examples=2 * _draw(generator, 60, 120), epochs=3,
                        seed=_draw(generator, 0, 99_999))
    return package_run(run_dir, **_SESSION)


def _ran(run: PackageRun, hint) -> list:
    """The run's reports, or a failure that says what the launch gave instead."""
    __tracebackhide__ = True
    if run.failure:
        checks.fail(run.command, say(checks.both("no terminó bien", "did not finish properly")),
                    say(checks.both(f"{run.world_size} líneas JSON, una por proceso, y código de salida 0",
                                    f"{run.world_size} JSON lines, one per process, and exit code 0")),
                    run.failure, hint)
    return list(run.reports)


@checks.keeps_random_state
def check_ranks_agree_on(run: PackageRun, hint=None) -> None:
    """Every process ends with the same weights (same fingerprint), and they are not the ones rank 0
    started from: training happened, and DDP kept the copies equal."""
    __tracebackhide__ = True
    hint = hint or HINTS["ddp_training"]
    reports = _ran(run, hint)
    ends = [r["end"] for r in reports]
    checks.check_equal(ends, [ends[0]] * run.world_size, hint=hint, name=checks.both(
        f"huellas de los pesos al terminar, rank 0…{run.world_size - 1} ({run.command})",
        f"fingerprints of the weights at the end, rank 0…{run.world_size - 1} ({run.command})"))
    checks.check_true(ends[0] != reports[0]["start"], name=run.command, hint=hint,
                      expected=checks.both("pesos finales distintos de los iniciales",
                                           "final weights different from the initial ones"),
                      got=checks.both("los mismos pesos que al empezar", "the same weights as at the start"))


@checks.keeps_random_state
def check_shards_on_run(run: PackageRun, hint=None) -> None:
    """In every epoch the processes read disjoint shares that together cover the data once, and the
    order changes from one epoch to the next."""
    __tracebackhide__ = True
    hint = hint or HINTS["ddp_training_shards"]
    reports = _ran(run, hint)
    share = math.ceil(run.examples / run.world_size)
    counts = [len(r["seen"]) for r in reports]
    checks.check_equal(counts, [share * run.epochs] * run.world_size, hint=hint, name=checks.both(
        f"ejemplos leídos por cada proceso, {run.epochs} épocas ({run.command})",
        f"examples read by each process over {run.epochs} epochs ({run.command})"))
    epochs = [[r["seen"][e * share:(e + 1) * share] for r in reports] for e in range(run.epochs)]
    for number, shares in enumerate(epochs):
        together = sorted(i for part in shares for i in part)
        checks.check_equal(together, list(range(run.examples)), hint=hint, name=checks.both(
            f"índices leídos por todos los procesos en la época {number}, ordenados ({run.command})",
            f"indices read by all the processes in epoch {number}, sorted ({run.command})"))
    checks.check_true(epochs[0][0] != epochs[1][0], name=run.command, hint=hint,
                      expected=checks.both("otro orden en la época 1 que en la 0 (rank 0)",
                                           "another order in epoch 1 than in epoch 0 (rank 0)"),
                      got=checks.both("el mismo orden", "the same order"))


@checks.keeps_random_state
def check_learns_on(run: PackageRun, hint=None) -> None:
    """Each process reports one loss per step, every batch of its share in every epoch, and its mean
    loss in the last epoch is well below that of the first."""
    __tracebackhide__ = True
    hint = hint or HINTS["ddp_training_learns"]
    reports = _ran(run, hint)
    steps = math.ceil(math.ceil(run.examples / run.world_size) / run.batch_size)
    checks.check_equal([len(r["losses"]) for r in reports], [steps * run.epochs] * run.world_size, hint=hint,
                       name=checks.both(f"pérdidas anotadas por cada proceso ({steps} pasos × {run.epochs} "
                                        f"épocas; "
                                        f"{run.command})",
                                        f"losses noted by each process ({steps} steps × {run.epochs} epochs; "
                                        f"{run.command})"))
    for report in reports:
        first = sum(report["losses"][:steps]) / steps
        last = sum(report["losses"][-steps:]) / steps
        checks.check_true(last < 0.8 * first, name=run.command, hint=hint,
                          expected=checks.both(
                              f"rank {report['rank']}: pérdida media de la última época < 0.8 × "
                              f"la de la primera ({first:.3f})",
                              f"rank {report['rank']}: mean loss of the last epoch < 0.8 × that "
                              f"of the first ({first:.3f})"),
                          got=f"{last:.3f}")


@checks.keeps_random_state
def check_package_ranks_agree(run_dir) -> None:
    """``run_dir``'s training under torchrun, 2 processes, fresh data size and seed: equal weights."""
    __tracebackhide__ = True
    check_ranks_agree_on(_session_run(run_dir))


@checks.keeps_random_state
def check_package_shards(run_dir) -> None:
    """The same run: disjoint shares that cover the data every epoch, in a new order each epoch."""
    __tracebackhide__ = True
    check_shards_on_run(_session_run(run_dir))


@checks.keeps_random_state
def check_package_learns(run_dir) -> None:
    """The same run: a loss per step, going down."""
    __tracebackhide__ = True
    check_learns_on(_session_run(run_dir))



# -------------------------------------------------------------- exercise 9: a curve by examples seen
class _RecordingModel(nn.Module):
    """A model that notes every batch it is called with (a copy), then runs ``inner``."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.batches = []

    def forward(self, x):
        self.batches.append(x.detach().clone())
        return self.inner(x)


class _RateSpySGD(checks.SpySGD):
    """SGD that notes, at each step, the learning rate of its first group."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.rates = []

    def step(self, closure=None):
        self.rates.append(self.param_groups[0]["lr"])
        return super().step(closure)


def _loss_and_gradients(model: nn.Module, parameters: list, x, y) -> tuple[float, list]:
    """Cross-entropy of ``model`` on ``(x, y)`` with its parameters set to ``parameters``, and its
    gradients, computed on a copy (the model itself is left alone)."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p, value in zip(twin.parameters(), parameters, strict=True):
            p.copy_(value)
    loss = nn.functional.cross_entropy(twin(x), y)
    return loss.item(), list(torch.autograd.grad(loss, list(twin.parameters())))


def _check_gradients(model: nn.Module, got: list, expected: list, where: dict, hint) -> None:
    """Each parameter's gradient in ``got`` matches ``expected``; ``where`` names the step (es, en)."""
    __tracebackhide__ = True
    for (parameter, _), got_grad, expected_grad in zip(model.named_parameters(), got, expected, strict=True):
        checks.check_close(got_grad, expected_grad, hint=hint, name=checks.both(
            f"gradiente de {parameter} {where['es']}", f"gradient of {parameter} {where['en']}"))


@dataclass(frozen=True)
class CurveCase:
    """What ``examples_curve`` is given: a model, the data, the batch size, the warm-up, the peak rate."""

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    batch_size: int
    warmup_steps: int
    lr: float

    @property
    def label(self) -> str:
        return (f"examples_curve(model, SGD(lr={self.lr:g}), x {tuple(self.x.shape)}, y, "
                f"batch_size={self.batch_size}, warmup_steps={self.warmup_steps})")

    @property
    def slices(self) -> list:
        """``(start, end)`` of each batch, in order."""
        n, size = len(self.x), self.batch_size
        return [(start, min(start + size, n)) for start in range(0, n, size)]


def curve_case(generator: torch.Generator, *, warmup: bool) -> CurveCase:
    """A random MLP on random data whose size is no multiple of the batch size; with ``warmup``, a
    warm-up shorter than the pass, else ``warmup_steps=1`` (the peak rate from the first step)."""
    batch = _draw(generator, 3, 12)
    n = batch * _draw(generator, 4, 9) + _draw(generator, 1, batch - 1)
    features, hidden, classes = _draw(generator, 3, 12), _draw(generator, 4, 24), _draw(generator, 2, 6)
    with checks.seeded(generator.initial_seed()):
        model = _mlp(features, hidden, classes)
    x = torch.randn(n, features, generator=generator)
    y = torch.randint(0, classes, (n,), generator=generator)
    warmup_steps = _draw(generator, 2, math.ceil(n / batch) - 1) if warmup else 1
    lr = _draw(generator, 1, 9) * 10.0 ** -_draw(generator, 1, 2)
    return CurveCase(model, x, y, batch, warmup_steps, lr)


def _run_curve(examples_curve, case: CurveCase, hint) -> tuple:
    """``examples_curve`` on ``case``, through a recording model and a spy SGD: what it returned,
    the recorder and the spy."""
    __tracebackhide__ = True
    recorder = _RecordingModel(case.model)
    optimizer = _RateSpySGD(recorder.parameters(), lr=case.lr)
    got = checks.check_runs(examples_curve, recorder, optimizer, case.x.clone(), case.y.clone(),
                            case.batch_size, case.warmup_steps, name=case.label, hint=hint)
    return got, recorder, optimizer


def _check_steps(optimizer, case: CurveCase, hint) -> None:
    __tracebackhide__ = True
    checks.check_equal(len(optimizer.steps), len(case.slices), hint=hint, name=checks.both(
        f"pasos del optimizador ({case.label})", f"optimizer steps ({case.label})"))


@checks.keeps_random_state
def check_curve_on(examples_curve, case: CurveCase, hint=None) -> None:
    """The batches in order, one step each with that batch's gradient (the one before the step),
    and the curve: one ``(examples seen, loss)`` pair per step, the loss of the batch before the step."""
    __tracebackhide__ = True
    hint, name = hint or HINTS["examples_curve"], case.label
    got, recorder, optimizer = _run_curve(examples_curve, case, hint)
    sizes = [end - start for start, end in case.slices]
    checks.check_equal([len(batch) for batch in recorder.batches], sizes, hint=hint, name=checks.both(
        f"tamaños de los lotes que recibió el modelo ({name})",
        f"sizes of the batches the model received ({name})"))
    turns = enumerate(zip(recorder.batches, case.slices, strict=True))
    out_of_turn = [i for i, (batch, (start, end)) in turns if not torch.equal(batch, case.x[start:end])]
    checks.check_equal(out_of_turn, [], hint=hint, name=checks.both(
        f"lotes que no eran el trozo de x que les tocaba ({name})",
        f"batches that were not the slice of x in their turn ({name})"))
    _check_steps(optimizer, case, hint)
    losses = []
    for number, (record, (start, end)) in enumerate(zip(optimizer.steps, case.slices, strict=True)):
        loss, gradients = _loss_and_gradients(case.model, record.before, case.x[start:end], case.y[start:end])
        losses.append(loss)
        _check_gradients(case.model, record.grads, gradients, hint=hint, where=checks.both(
            f"usado en el paso {number} ({name})", f"used at step {number} ({name})"))
    _check_curve(got, [end for _, end in case.slices], losses, name, hint)


def _check_curve(got, seen: list, losses: list, name: str, hint) -> None:
    """``got`` is a list of ``(examples seen, loss)`` pairs: ``seen`` exactly, ``losses`` within tolerance."""
    __tracebackhide__ = True
    checks.check_type(got, list, name=name, hint=hint)
    pairs = all(isinstance(pair, (tuple, list)) and len(pair) == 2 for pair in got)
    checks.check_true(pairs and len(got) == len(seen), name=name, hint=hint,
                      expected=checks.both(f"{len(seen)} pares (ejemplos vistos, pérdida), uno por paso",
                                           f"{len(seen)} pairs (examples seen, loss), one per step"),
                      got=checks.describe(got))
    checks.check_equal([pair[0] for pair in got], seen, hint=hint, name=checks.both(
        f"ejemplos vistos en cada punto de la curva ({name})",
        f"examples seen at each point of the curve ({name})"))
    got_losses = [pair[1] for pair in got]
    checks.check_true(all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in got_losses),
                      name=name, hint=hint, got=checks.describe(got_losses[0]),
                      expected=checks.both("pérdidas como números de Python (float)",
                                           "losses as Python numbers (float)"))
    checks.check_close(torch.tensor(got_losses, dtype=torch.float64),
                       torch.tensor(losses, dtype=torch.float64), hint=hint,
                       name=checks.both(f"pérdidas de la curva ({name})", f"losses of the curve ({name})"))


@checks.keeps_random_state
def check_examples_curve(examples_curve) -> None:
    """A random MLP on random data, without warm-up: batches, steps and the curve."""
    __tracebackhide__ = True
    check_curve_on(examples_curve, curve_case(checks.fresh_generator(), warmup=False))


def warmup_rates(lr: float, warmup_steps: int, steps: int) -> list:
    """The learning rate of each step: a straight line up to ``lr``, reached at step ``warmup_steps − 1``."""
    return [lr * min(1.0, (step + 1) / warmup_steps) for step in range(steps)]


@checks.keeps_random_state
def check_warmup_on(examples_curve, case: CurveCase, hint=None) -> None:
    """One optimizer step per batch, each at the rate of the warm-up."""
    __tracebackhide__ = True
    hint, steps = hint or HINTS["examples_curve_warmup"], len(case.slices)
    _, _, optimizer = _run_curve(examples_curve, case, hint)
    _check_steps(optimizer, case, hint)
    expected = warmup_rates(case.lr, case.warmup_steps, steps)
    checks.check_close(torch.tensor(optimizer.rates, dtype=torch.float64),
                       torch.tensor(expected, dtype=torch.float64), hint=hint, name=checks.both(
                           f"tasa de aprendizaje en cada paso, del 0 al {steps - 1} ({case.label})",
                           f"learning rate at each step, 0 to {steps - 1} ({case.label})"))


@checks.keeps_random_state
def check_examples_curve_warmup(examples_curve) -> None:
    """A random MLP, a random peak rate and a warm-up shorter than the pass."""
    __tracebackhide__ = True
    check_warmup_on(examples_curve, curve_case(checks.fresh_generator(), warmup=True))


# ------------------------------------------------------------- exercise 10: profiling a training step
REGIONS = ("forward", "backward", "optimizer step")


def _below(event) -> list:
    """Every event that ran inside ``event``, at any depth."""
    found = []
    for child in event.cpu_children:
        found += [child, *_below(child)]
    return found


def _mlp_case(generator: torch.Generator) -> tuple:
    """An MLP of random depth and widths, a random batch and its labels, and words that describe them."""
    widths = [_draw(generator, 4, 48) for _ in range(_draw(generator, 2, 4) + 1)]
    layers = []
    with checks.seeded(generator.initial_seed()):
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    batch = _draw(generator, 4, 64)
    x = torch.randn(batch, widths[0], generator=generator)
    y = torch.randint(0, widths[-1], (batch,), generator=generator)
    return model, x, y, " → ".join(f"Linear({a}, {b})" for a, b in itertools.pairwise(widths))


def _inside(regions: dict, model: nn.Module) -> tuple[dict, dict]:
    """What ran inside each region, and what should have: (aten::linear calls, the loss) in
    ``forward``, autograd's functions in ``backward``, the optimizer's step in ``optimizer step``."""
    names = {region: [e.name for e in _below(found[0])] for region, found in regions.items()}
    forward = names["forward"]
    seen = {"forward": (forward.count("aten::linear"), "aten::cross_entropy_loss" in forward),
            "backward": any("Backward" in e for e in names["backward"]),
            "optimizer step": any(e.startswith("Optimizer.step#") for e in names["optimizer step"])}
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    return seen, {"forward": (linears, True), "backward": True, "optimizer step": True}


@checks.keeps_random_state
def check_profile_on(profile_step, model, x, y, label: str, hint=None) -> None:
    """``profile_step`` returns a finished ``torch.profiler.profile`` of one training step: its three
    regions once each, the model's layers and the loss inside ``forward``, autograd's work inside
    ``backward``, the optimizer's step inside ``optimizer step``; one step taken with this batch's
    gradients; shapes and memory recorded."""
    __tracebackhide__ = True
    hint = hint or HINTS["profile_step"]
    name = f"profile_step({label}, x {tuple(x.shape)}, y, optimizer)"
    _, expected_grads = _loss_and_gradients(model, [p.detach().clone() for p in model.parameters()], x, y)
    optimizer = checks.SpySGD(model.parameters(), lr=0.1)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    reached = []      # the shape of what reaches the first linear layer: the input, or its flattened features
    handle = first.register_forward_pre_hook(lambda module, args: reached.append(list(args[0].shape)))
    try:
        got = checks.check_runs(profile_step, model, x, y, optimizer, name=name, hint=hint)
    finally:
        handle.remove()
    checks.check_type(got, torch.profiler.profile, name=name, hint=hint)
    events = checks.check_runs(got.events, name=f"{name}.events()", hint=hint)
    regions = {region: [e for e in events if e.name == region] for region in REGIONS}
    checks.check_equal({region: len(found) for region, found in regions.items()}, dict.fromkeys(REGIONS, 1),
                       hint=hint, name=checks.both(
                           f"regiones de record_function en el perfil: veces ({name})",
                           f"record_function regions in the profile: times ({name})"))
    checks.check_equal(*_inside(regions, model), hint=hint, name=checks.both(
        f"dentro de cada región: (llamadas a aten::linear, la pérdida) en forward, funciones "
        f"*Backward en backward, Optimizer.step en optimizer step ({name})",
        f"inside each region: (aten::linear calls, the loss) in forward, *Backward functions in "
        f"backward, Optimizer.step in optimizer step ({name})"))
    checks.check_equal(len(optimizer.steps), 1, hint=hint, name=checks.both(
        f"pasos del optimizador ({name})", f"optimizer steps ({name})"))
    _check_gradients(model, optimizer.steps[0].grads, expected_grads, hint=hint,
                     where=checks.both(f"en el paso ({name})", f"at the step ({name})"))
    shapes = next((e.input_shapes for e in events if e.name == "aten::linear"), None)
    noted = {"input_shapes": shapes[:2] if shapes else shapes,
             "memory": any(e.cpu_memory_usage != 0 for e in regions["forward"])}
    expected = {"input_shapes": [reached[0] if reached else None, list(first.weight.shape)], "memory": True}
    checks.check_equal(noted, expected,
                       hint=hint, name=checks.both(
                           f"lo que anotó el perfil: formas de las entradas de la primera "
                           f"aten::linear, memoria de la región forward ({name})",
                           f"what the profile noted: the first aten::linear's input shapes, "
                           f"memory of the forward region ({name})"))


@checks.keeps_random_state
def check_profile_step(profile_step) -> None:
    """An MLP of random depth and widths, a random batch."""
    __tracebackhide__ = True
    check_profile_on(profile_step, *_mlp_case(checks.fresh_generator()))


def profile_of_a_step(model, x, y):
    """A profile (CPU, memory) of one training step of ``model`` on ``(x, y)``, made by the check
    itself, for the exercise that reads a profile."""
    from torch.profiler import ProfilerActivity, profile

    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as made:
        nn.functional.cross_entropy(model(x), y).backward()
        sgd.step()
    return made


@checks.keeps_random_state
def check_top_on(top_by_memory, prof, k: int, label: str, hint=None) -> None:
    """``top_by_memory(prof, k)``: ``k`` pairs ``(operator, bytes)``, distinct operators, each with the
    self CPU memory the profile's averages give it, largest first, and none left out that allocated more."""
    __tracebackhide__ = True
    hint = hint or HINTS["top_by_memory"]
    name = f"top_by_memory(<{label}>, k={k})"
    table = {row.key: row.self_cpu_memory_usage for row in prof.key_averages()}
    got = checks.check_runs(top_by_memory, prof, k, name=name, hint=hint)
    checks.check_type(got, list, name=name, hint=hint)
    pairs = [tuple(pair) for pair in got if isinstance(pair, (tuple, list)) and len(pair) == 2]
    checks.check_true(len(pairs) == len(got) == k and len({n for n, _ in pairs}) == k, name=name, hint=hint,
                      expected=checks.both(f"{k} pares (operador, bytes), de operadores distintos",
                                           f"{k} pairs (operator, bytes), of distinct operators"),
                      got=checks.describe(got))
    checks.check_equal([table.get(operator) for operator, _ in pairs], [value for _, value in pairs],
                       hint=hint, name=checks.both(
                           f"memoria propia de cada operador según prof.key_averages() ({name})",
                           f"each operator's self CPU memory as prof.key_averages() gives it ({name})"))
    checks.check_equal([value for _, value in pairs], sorted(table.values(), reverse=True)[:k], hint=hint,
                       name=checks.both(f"los bytes devueltos, en orden ({name})",
                                        f"the bytes returned, in order ({name})"))


@checks.keeps_random_state
def check_top_by_memory(top_by_memory) -> None:
    """A training step of a random MLP, profiled by the check; a random ``k``."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    model, x, y, label = _mlp_case(generator)
    check_top_on(top_by_memory, profile_of_a_step(model, x, y), _draw(generator, 2, 5),
                 f"profile of a training step: {label}, x {tuple(x.shape)}")


# -------------------------------------------------------------------- decided by the judge
# When a class is graded, these exercises' points also need the student's function to give what the
# reference gives on inputs the judge draws from the class's secret (graders/judge/calls.py): its
# result, or with an outcome (a ``*_outcome`` function below, run in the student's kernel on the
# student's answer and in the judge on the reference's) what happened when it ran, as plain data.
# What the kernel-side checks see by switching a tool off (the course's meter, DistributedSampler)
# stays theirs; every judged cell also has its outcome here.
def _seed(generator: torch.Generator) -> int:
    return int(torch.randint(0, 2**31, (1,), generator=generator))


def _drawn(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normal(shape: tuple, seed: int, dtype=torch.float32) -> torch.Tensor:
    """Random inputs named by plain data (their shape, a seed): the judge sends the seed, not the values."""
    return torch.randn(shape, generator=_drawn(seed), dtype=dtype)


class _SliceThenGelu(nn.Module):
    """Linear, then GELU on the first ``kept`` columns: GELU saves a view of the whole output."""

    def __init__(self, width_in: int, width_out: int, kept: int):
        super().__init__()
        self.linear = nn.Linear(width_in, width_out)
        self.kept = kept

    def forward(self, x):
        return nn.functional.gelu(self.linear(x)[:, :self.kept])


_BUILDERS = {
    "mlp": _mlp,
    "blocks": blocks,
    "slice_gelu": _SliceThenGelu,
    "linear_bn": lambda width_in, features: nn.Sequential(nn.Linear(width_in, features),
                                                          nn.BatchNorm1d(features)),
    "cnn": lambda first, second, classes: training.make_cnn(channels=(first, second), num_classes=classes),
    "image_mlp": lambda hidden, classes: training.make_mlp(hidden=hidden, num_classes=classes),
}


def _built(kind: str, sizes: tuple, seed: int) -> nn.Module:
    """A model named by plain data: its kind (a key of ``_BUILDERS``), its sizes, its weights' seed."""
    with checks.seeded(seed):
        return _BUILDERS[kind](*sizes)


# exercise 1: activation bytes
def activation_bytes_outcome(activation_bytes, kind: str, sizes: tuple, seed: int, shape: tuple,
                             dtype: torch.dtype, mode: str, input_grad: bool) -> int:
    """What ``activation_bytes`` counts for a model of ``kind`` in ``mode`` and ``dtype``, on inputs
    of ``shape`` (asking for their gradient or not)."""
    model = getattr(_built(kind, sizes, seed).to(dtype), mode)()
    return activation_bytes(model, _normal(shape, seed, dtype).requires_grad_(input_grad))


def _activation_cases(generator):
    """An MLP whose ReLU output is saved twice, deep blocks in float64, a GELU that saves a view."""
    batch, width_in, hidden, width_out = (_draw(generator, 3, 40) for _ in range(4))
    depth, width, rows = _draw(generator, 2, 6), 4 * _draw(generator, 2, 8), _draw(generator, 3, 30)
    slice_in, slice_out = _draw(generator, 4, 20), _draw(generator, 10, 40)
    return [("mlp", (width_in, hidden, width_out), _seed(generator), (batch, width_in), torch.float32,
             "train", False),
            ("blocks", (depth, width), _seed(generator), (rows, width), torch.float64, "train", False),
            ("slice_gelu", (slice_in, slice_out, _draw(generator, 1, slice_out - 1)), _seed(generator),
             (rows, slice_in), torch.float32, "train", True)]


def _buffer_cases(generator):
    """Linear → BatchNorm1d in both modes, and a CNN with BatchNorm2d in both modes."""
    batch, width_in, features = (_draw(generator, 3, 40) for _ in range(3))
    cnn = (_draw(generator, 2, 6), _draw(generator, 2, 6), _draw(generator, 2, 9))
    seed, cnn_seed, images = _seed(generator), _seed(generator), _draw(generator, 2, 4)
    return [("linear_bn", (width_in, features), seed, (batch, width_in), torch.float32, mode, False)
            for mode in ("train", "eval")] + [
        ("cnn", cnn, cnn_seed, (images, 1, 28, 28), torch.float32, mode, False) for mode in ("train", "eval")]


# exercise 2: segments for a budget
def segments_for_budget_outcome(segments_for_budget, depth: int, width: int, batch: int, seed: int,
                                budget: int):
    """The number of segments ``segments_for_budget`` picks for ``blocks(depth, width)`` on a batch
    of ``batch`` and ``budget``."""
    model, x = _built("blocks", (depth, width), seed), _normal((batch, width), seed)
    return segments_for_budget(model, x, budget)


def _budgets(generator):
    """One deep model and four budgets: what one segment saves, what a random count saves, one in
    between, and one byte less than the fewest any count saves (no count fits)."""
    depth, width, batch = _draw(generator, 5, 9), 16 * _draw(generator, 2, 5), _draw(generator, 8, 40)
    seed = _seed(generator)
    model, x = _built("blocks", (depth, width), seed), _normal((batch, width), seed)
    curve = [saved_with_segments(model, x, k) for k in range(1, depth + 1)]
    low, high = min(curve), curve[0]
    budgets = [high, curve[_draw(generator, 2, depth) - 1], low + _draw(generator, 0, high - low), low - 1]
    return [(depth, width, batch, seed, budget) for budget in budgets]


# exercise 3: freeze the backbone
def freeze_backbone_outcome(freeze_backbone, kind: str, sizes: tuple, seed: int, head_frozen: bool) -> tuple:
    """What ``freeze_backbone`` returned, each parameter's ``requires_grad`` after, and which ones a
    backward pass gives a ``.grad``."""
    model = _built(kind, sizes, seed)
    if head_frozen:
        _freeze_head(model)
    count = freeze_backbone(model)
    flags = [p.requires_grad for p in model.parameters()]
    output = model(_normal((2, 1, 28, 28), seed))
    if output.requires_grad:
        output.sum().backward()
    return count, flags, [p.grad is not None for p in model.parameters()]


def _backbones(generator, head_frozen: bool):
    cnn = (_draw(generator, 2, 6), _draw(generator, 2, 6), _draw(generator, 2, 9))
    mlp = (_draw(generator, 4, 40), _draw(generator, 2, 9))
    return [("cnn", cnn, _seed(generator), head_frozen), ("image_mlp", mlp, _seed(generator), head_frozen)]


# exercise 4: an optimizer for what is trainable
def trainable_optimizer_outcome(trainable_optimizer, kind: str, sizes: tuple, seed: int, frozen: int,
                                lr: float) -> tuple:
    """For a model whose first ``frozen`` layers are frozen: the optimizer's class, each group's
    rate, which parameters it holds (their places in ``model.parameters()``) and how many entries;
    then, after one step with gradients of zeros on the frozen ones, whether each frozen one kept
    its value, and the trainable ones' values."""
    model = _built(kind, sizes, seed)
    for p in model[:frozen].parameters():
        p.requires_grad_(False)
    built = trainable_optimizer(model, lr)
    params = list(model.parameters())
    entries = [p for group in built.param_groups for p in group["params"]]
    held = [i for i, p in enumerate(params) if any(p is entry for entry in entries)]
    frozen_params = [p for p in params if not p.requires_grad]
    before = [p.detach().clone() for p in frozen_params]
    for p in frozen_params:
        p.grad = torch.zeros_like(p)          # what zero_grad(set_to_none=False) leaves behind
    model(_normal((2, 1, 28, 28), seed)).sum().backward()
    built.step()
    kind = f"{type(built).__module__}.{type(built).__qualname__}"
    return (kind, [group["lr"] for group in built.param_groups], held, len(entries),
            [torch.equal(p, kept) for p, kept in zip(frozen_params, before, strict=True)],
            [p.detach().clone() for p in params if p.requires_grad])


def _frozen_models(generator):
    """An MLP for images with everything but its head frozen, a CNN with its first block frozen."""
    rates = [_draw(generator, 1, 9) * 10.0 ** -_draw(generator, 2, 4) for _ in range(2)]
    mlp = (_draw(generator, 4, 12), _draw(generator, 2, 9))
    cnn = tuple(_draw(generator, 2, 5) for _ in range(3))
    return [("image_mlp", mlp, _seed(generator), 3, rates[0]), ("cnn", cnn, _seed(generator), 4, rates[1])]


# exercise 5: predicting with torchvision's weights
def _weights_of(probe_seed):
    """ResNet-18's weights (``None``), or a made-up weights enum drawn from ``probe_seed``."""
    if probe_seed is None:
        from torchvision.models import ResNet18_Weights

        return ResNet18_Weights.DEFAULT
    return probe_weights(_drawn(probe_seed))


def _top_k_call(top_k_names, probe_seed, count: int, height: int, width: int, k: int, seed: int):
    weights = _weights_of(probe_seed)
    generator = _drawn(seed)
    images = torch.randint(0, 256, (count, 3, height, width), generator=generator).to(torch.uint8)
    spy = _SpyClassifier(torch.randn(count, len(weights.meta["categories"]), generator=generator))
    spy.train()
    return top_k_names(spy, weights, images, k), spy


def top_k_names_input_outcome(top_k_names, probe_seed, count: int, height: int, width: int, k: int,
                              seed: int) -> dict:
    """How the spy model was called: how many times, in which mode, recording a graph or not, and
    the batch it received (its shape and dtype, each image's channel means, one pixel in 13 each way)."""
    _, spy = _top_k_call(top_k_names, probe_seed, count, height, width, k, seed)
    calls = [{"training": call["training"], "grad": call["grad"],
              "shape": list(call["batch"].shape), "dtype": call["batch"].dtype,
              "means": call["batch"].double().mean(dim=(-2, -1)).clone(),
              "pixels": call["batch"][..., ::13, ::13].clone()} for call in spy.calls]
    return {"calls": calls}


def top_k_names_output_outcome(top_k_names, probe_seed, count: int, height: int, width: int, k: int,
                               seed: int):
    """The names ``top_k_names`` returned for the spy's random logits."""
    names, _ = _top_k_call(top_k_names, probe_seed, count, height, width, k, seed)
    return names


def _weights_cases(generator, ks: tuple):
    cases = []
    for probe_seed, k in zip((None, _seed(generator)), ks, strict=True):
        crop = 224 if probe_seed is None else probe_weights(_drawn(probe_seed)).transforms().crop_size[0]
        cases.append((probe_seed, _draw(generator, 2, 3), _draw(generator, crop // 2, crop + 40),
                      _draw(generator, crop // 2, crop + 40), k, _seed(generator)))
    return cases


def _named_weights_cases(generator):
    """ResNet-18's weights with 2-7 names per image, a made-up weights enum with 1-5."""
    return _weights_cases(generator, ks=(_draw(generator, 2, 7), _draw(generator, 1, 5)))


# exercise 6: average gradients
def average_gradients_inputs_outcome(average_gradients, per_rank: list) -> tuple:
    """What ``average_gradients`` returned, the inputs after the call, and whether it returned one of
    the input dicts."""
    got = average_gradients(per_rank)
    return got, per_rank, any(got is grads for grads in per_rank)


# exercise 8: the package (RUN_DIR holds it; its minitrain/training.py is the answer)
def _module_from(path: Path, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _package_files():
    """The lesson's data and model modules, as the lesson writes them."""
    return (_module_from(FILES / "minitrain" / "data.py", "_judged_minitrain_data"),
            _module_from(FILES / "minitrain" / "model.py", "_judged_minitrain_model"))


class _OneExample(torch.utils.data.Dataset):
    """``examples`` copies of one example: every batch has the same loss and gradient, whatever the
    order or the split. Notes the indices it hands out, as the lesson's ``Blobs`` does."""

    def __init__(self, examples: int, seed: int):
        generator = _drawn(seed)
        self.x, self.y = torch.randn(8, generator=generator), torch.randint(0, 4, (), generator=generator)
        self.examples, self.seen = examples, []

    def __len__(self):
        return self.examples

    def __getitem__(self, index):
        self.seen.append(int(index))
        return self.x.clone(), self.y.clone()


DDP_SECONDS = 3.0
_ONE_WORLD = threading.Lock()   # the threaded group replaces torch.distributed's world: one at a time


def _threaded_ranks(train, datasets: list, models: list, **options) -> list:
    """``train(models[rank], datasets[rank], rank=rank, world_size=len(models), **options)`` for every
    rank at once, one thread per rank in a process group whose collectives run between the threads
    (torch's threaded process group, made for testing distributed code in one process): DDP broadcasts
    and all-reduces across the ranks as between processes, in milliseconds. What each rank returned."""
    import time

    from torch import distributed as dist
    from torch.testing._internal.distributed import multi_threaded_pg as threaded

    world_size, store, returned = len(models), dist.HashStore(), [None] * len(models)
    torch._dynamo  # noqa: B018  (DDP imports it when first built: here, not in a rank's thread)

    def rank_work(rank):
        try:
            dist.init_process_group("threaded", rank=rank, world_size=world_size, store=store)
            try:
                returned[rank] = train(models[rank], datasets[rank], rank=rank, world_size=world_size,
                                       **options)
            finally:
                dist.destroy_process_group()
        except BaseException as error:  # noqa: BLE001 (a rank that fails wakes the others, then is reported)
            returned[rank] = error
            threaded.ProcessLocalGroup.exception_handle(error)

    with _ONE_WORLD:
        multithreading = torch._C._is_multithreading_enabled()
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        threaded._install_threaded_pg()
        try:
            ranks = [threading.Thread(target=rank_work, args=(rank,), daemon=True)
                     for rank in range(world_size)]
            for thread in ranks:
                thread.start()
            deadline = time.monotonic() + DDP_SECONDS
            for thread in ranks:
                thread.join(max(0.0, deadline - time.monotonic()))
            if any(thread.is_alive() for thread in ranks):
                threaded.ProcessLocalGroup.exception_handle(TimeoutError())     # wakes the ranks that wait
                for thread in ranks:
                    thread.join(0.5)
                raise TimeoutError(f"the ranks did not finish within {DDP_SECONDS:g} s")
        finally:
            threaded.ProcessLocalGroup.reset()
            threaded._uninstall_threaded_pg()
            torch._C._distributed_c10d._set_thread_isolation_mode(False)
            torch._C._set_multithreading_enabled(multithreading)
    for result in returned:
        if isinstance(result, BaseException):
            raise result
    return returned


@checks.keeps_random_state  # train draws from, and make_model reseeds (CUDA too), the kernel's torch
def _ddp_run(run_dir, world_size: int, examples: int, epochs: int, batch_size: int, lr: float, seed: int,
             data: str) -> tuple:
    """``run_dir``'s ``train`` in ``world_size`` ranks, as ``train.py`` calls it under torchrun (each
    rank's model from ``seed + rank``, its own copy of the data: the lesson's ``Blobs``, or
    ``_OneExample``): what each rank returned, read and ended with."""
    train = _module_from(Path(run_dir) / TRAINING_FILE, "_judged_minitrain_training").train
    data_module, model_module = _package_files()
    make_data = {"blobs": data_module.Blobs, "one": _OneExample}[data]
    datasets = [make_data(examples, seed=seed) for _ in range(world_size)]
    models = [model_module.make_model(seed=seed + rank) for rank in range(world_size)]
    returned = _threaded_ranks(train, datasets, models, epochs=epochs, batch_size=batch_size, lr=lr,
                               seed=seed)
    return returned, [dataset.seen for dataset in datasets], models


def ddp_training_ranks_agree_outcome(run_dir, world_size: int, examples: int, epochs: int, batch_size: int,
                                     lr: float, seed: int) -> list:
    """Every rank's weights at the end. Run as one step of equal shares, whatever the split the
    averaged gradient is the whole data's: only DDP's work (rank 0's start everywhere, gradients
    averaged) decides the weights, not the order, the sampler's seed or the loop around the step."""
    _, _, models = _ddp_run(run_dir, world_size, examples, epochs, batch_size, lr, seed, "blobs")
    return [[p.detach().clone() for p in model.parameters()] for model in models]


def ddp_training_shards_outcome(run_dir, world_size: int, examples: int, epochs: int, batch_size: int,
                                lr: float, seed: int) -> list:
    """The indices every rank read, in order, over every epoch."""
    return _ddp_run(run_dir, world_size, examples, epochs, batch_size, lr, seed, "one")[1]


def ddp_training_learns_outcome(run_dir, world_size: int, examples: int, epochs: int, batch_size: int,
                                lr: float, seed: int) -> torch.Tensor:
    """Rank 0's losses, one per step, on copies of one example: the order and the split play no part
    and neither does DDP (rank 0 starts from its own weights and every rank's gradient is the same)."""
    returned = _ddp_run(run_dir, world_size, examples, epochs, batch_size, lr, seed, "one")[0]
    return torch.tensor([float(loss) for loss in returned[0]], dtype=torch.float64)


def _ddp_configurations(generator, *, one_step: bool):
    """Two runs, of 2 and 3 ranks, with a fresh seed and rate. With ``one_step``, one epoch of equal
    shares (the examples a multiple of the ranks) read in one batch: a single step; else 2-3 epochs
    of shares padded to equal size, read in batches that leave a remainder."""
    runs = []
    for world_size in (2, 3):
        share = _draw(generator, 5, 12)
        if one_step:
            examples, epochs, batch_size = world_size * share, 1, share + _draw(generator, 0, 4)
        else:
            examples = world_size * share - _draw(generator, 0, world_size - 1)
            epochs, batch_size = _draw(generator, 2, 3), _draw(generator, 2, 4)
        runs.append((world_size, examples, epochs, batch_size, _draw(generator, 5, 30) / 100,
                     _draw(generator, 0, 99_999)))
    return runs


@functools.cache
def _reference_package() -> Path:
    """A folder holding the reference's ``minitrain/training.py``: the solutions' cell without its
    ``%%writefile`` line. Only the judge calls it (its accept, below), where the course's solutions
    are; a student's kernel, which runs the outcomes, has no solutions/ and never calls it."""
    import nbformat

    solutions = Path(__file__).resolve().parents[2] / "solutions" / "07_scale.ipynb"
    source = next(cell.source for cell in nbformat.read(solutions, 4).cells
                  if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "ddp_training")
    kept = tempfile.TemporaryDirectory(prefix="minitrain-reference-")
    _KEPT.append(kept)          # removed when the process ends
    folder = Path(kept.name)
    (folder / "minitrain").mkdir()
    (folder / TRAINING_FILE).write_text(source.partition("\n")[2] if source.startswith("%%") else source)
    return folder


_KEPT = []


@functools.cache
def _reference_outcome(outcome, args: tuple):
    return outcome(_reference_package(), *args)


def _as_the_reference(outcome, tolerance: dict):
    """``accept`` for the exercise the notebook leaves in a file (``RUN_DIR``'s package, which the
    judge's reference namespace cannot hold): the reference's outcome on the same inputs, run in the
    judge's process on the solutions' file, and what came back must be it."""
    def accept(got, want, args) -> bool:
        return checks.matches(got, _reference_outcome(outcome, tuple(args)), tolerance)

    return accept


# exercise 9: a curve by examples seen
class _FixedRateSGD(torch.optim.SGD):
    """SGD that steps at the rate it was built with, whatever its groups say when it steps: a curve
    judged without the warm-up (judged on its own)."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.fixed = lr

    def step(self, closure=None):
        said = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            group["lr"] = self.fixed
        try:
            return super().step(closure)
        finally:
            for group, rate in zip(self.param_groups, said, strict=True):
                group["lr"] = rate


class _RatesSGD(torch.optim.SGD):
    """SGD that notes its first group's rate at every step."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.rates = []

    def step(self, closure=None):
        self.rates.append(float(self.param_groups[0]["lr"]))
        return super().step(closure)


def _curve_run(examples_curve, optimizer_class, sizes: tuple, seed: int, examples: int, batch_size: int,
               warmup_steps: int, lr: float):
    """``examples_curve`` on an MLP of ``sizes`` (in, hidden, classes) and random data, with an
    optimizer of ``optimizer_class``: the curve, the model and the optimizer."""
    model = _built("mlp", sizes, seed)
    optimizer = optimizer_class(model.parameters(), lr=lr)
    x = _normal((examples, sizes[0]), seed)
    y = torch.randint(0, sizes[-1], (examples,), generator=_drawn(seed + 1))
    return examples_curve(model, optimizer, x, y, batch_size, warmup_steps), model, optimizer


def examples_curve_outcome(examples_curve, *case) -> dict:
    """The curve (examples seen, losses) and the weights after it, with an SGD that ignores rate
    changes: what is judged here is the batches, the steps and the curve, not the warm-up."""
    curve, model, _ = _curve_run(examples_curve, _FixedRateSGD, *case)
    return {"seen": [int(seen) for seen, _ in curve],
            "losses": torch.tensor([float(loss) for _, loss in curve], dtype=torch.float64),
            "weights": [p.detach().clone() for p in model.parameters()]}


def examples_curve_warmup_outcome(examples_curve, *case) -> torch.Tensor:
    """The rate of every optimizer step."""
    _, _, optimizer = _curve_run(examples_curve, _RatesSGD, *case)
    return torch.tensor(optimizer.rates, dtype=torch.float64)


def _curves(generator, warmups):
    """A random MLP and data whose size is no multiple of the batch size, for each of ``warmups``:
    none (``warmup_steps=1``), one shorter than the pass, one longer."""
    cases = []
    for warmup in warmups:
        batch = _draw(generator, 3, 12)
        n = batch * _draw(generator, 4, 9) + _draw(generator, 1, batch - 1)
        sizes = (_draw(generator, 3, 12), _draw(generator, 4, 24), _draw(generator, 2, 6))
        steps = math.ceil(n / batch)
        warmup_steps = {"none": 1, "short": _draw(generator, 2, steps - 1),
                        "long": steps + _draw(generator, 1, 5)}[warmup]
        cases.append((sizes, _seed(generator), n, batch, warmup_steps,
                      _draw(generator, 1, 9) * 10.0 ** -_draw(generator, 1, 2)))
    return cases


# exercise 10: profiling a training step
def _profiled_mlp(widths: tuple, seed: int) -> nn.Sequential:
    layers = []
    with checks.seeded(seed):
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _profiled_case(widths: tuple, batch: int, seed: int) -> tuple:
    """An MLP of ``widths``, a batch and its labels, named by plain data."""
    labels = torch.randint(0, widths[-1], (batch,), generator=_drawn(seed + 1))
    return _profiled_mlp(widths, seed), _normal((batch, widths[0]), seed), labels


def profile_step_outcome(profile_step, widths: tuple, batch: int, seed: int) -> dict:
    """What the returned profile holds (a finished ``torch.profiler.profile``; how many times each
    region; inside each, what the check looks for; the first ``aten::linear``'s input shapes; memory
    noted in ``forward``), the shape that reached the first layer, the optimizer's steps and the
    weights after."""
    model, x, y = _profiled_case(widths, batch, seed)
    optimizer = _RatesSGD(model.parameters(), lr=0.1)
    reached = []
    handle = model[0].register_forward_pre_hook(lambda module, args: reached.append(list(args[0].shape)))
    try:
        prof = profile_step(model, x, y, optimizer)
    finally:
        handle.remove()
    if not isinstance(prof, torch.profiler.profile):
        return {"profile": f"{type(prof).__module__}.{type(prof).__qualname__}"}
    events = prof.events()
    regions = {region: [e for e in events if e.name == region] for region in REGIONS}
    counts = {region: len(found) for region, found in regions.items()}
    shapes = next((e.input_shapes for e in events if e.name == "aten::linear"), None)
    inside = _inside(regions, model)[0] if set(counts.values()) == {1} else {}
    return {"profile": "torch.profiler.profile", "regions": counts,
            "inside": {region: list(seen) if isinstance(seen, tuple) else seen
                       for region, seen in inside.items()},
            "input_shapes": [list(shape) for shape in shapes[:2]] if shapes else None,
            "memory": any(e.cpu_memory_usage != 0 for e in regions["forward"]), "reached": reached,
            "steps": len(optimizer.rates), "weights": [p.detach().clone() for p in model.parameters()]}


def _step_cases(generator):
    """Two MLPs of random depth and widths, each with a random batch."""
    cases = []
    for _ in range(2):
        widths = tuple(_draw(generator, 4, 24) for _ in range(_draw(generator, 2, 4) + 1))
        cases.append((widths, _draw(generator, 4, 32), _seed(generator)))
    return cases


def top_by_memory_outcome(top_by_memory, widths: tuple, batch: int, seed: int, k: int) -> dict:
    """What ``top_by_memory`` returned for a profile of one training step made here, and that
    profile's self CPU memory per operator (``prof.key_averages()``)."""
    prof = profile_of_a_step(*_profiled_case(widths, batch, seed))
    return {"top": top_by_memory(prof, k),
            "table": {row.key: row.self_cpu_memory_usage for row in prof.key_averages()}}


def _top_accepted(got, want, args) -> bool:
    """``k`` pairs of distinct operators, each with the bytes the judge's own profile of the same step
    gives it, largest first, none left out that allocated more (operators that tie may come in any
    order): judged against the reference run's table, which the same step makes the same."""
    table, k = want["table"], args[-1]
    if not (isinstance(got, dict) and isinstance(got.get("top"), list) and len(got["top"]) == k):
        return False
    pairs = [tuple(pair) for pair in got["top"] if isinstance(pair, tuple | list) and len(pair) == 2]
    if len(pairs) != k or len({name for name, _ in pairs}) != k:
        return False
    values = [value for _, value in pairs]
    return all(isinstance(name, str) and name in table and isinstance(value, int | float)
               and not isinstance(value, bool) and value == table[name]
               for name, value in pairs) and values == sorted(table.values(), reverse=True)[:k]


def _profiled_steps(generator):
    return [(*case, _draw(generator, 2, 6)) for case in _step_cases(generator)]


def _splits(generator, shuffle: bool):
    """Every rank's call of ``shard_indices`` for a few splits of random size."""
    calls = []
    for _ in range(2):
        n, replicas = _draw(generator, 5, 40), _draw(generator, 2, 6)
        options = (True, _draw(generator, 0, 99), _draw(generator, 0, 9)) if shuffle else ()
        calls += [(n, replicas, rank, *options) for rank in range(replicas)]
    return calls


def _gradients_per_rank(generator):
    ranks, rows, columns = _draw(generator, 2, 5), _draw(generator, 1, 4), _draw(generator, 1, 4)
    return [([{"weight": torch.randn(rows, columns, generator=generator),
               "bias": torch.randn(rows, generator=generator)} for _ in range(ranks)],)]


TRAINED = {"rtol": 1e-5, "atol": 1e-6}      # a few steps of float32 training, threads summing in any order
JUDGED = [
    checks.JudgedCall("test_activation_bytes", "activation_bytes", "activation_bytes", _activation_cases,
                      outcome=activation_bytes_outcome),
    checks.JudgedCall("test_activation_bytes_buffers", "activation_bytes", "activation_bytes", _buffer_cases,
                      outcome=activation_bytes_outcome),
    checks.JudgedCall("test_segments_for_budget", "segments_for_budget", "segments_for_budget", _budgets,
                      outcome=segments_for_budget_outcome),
    checks.JudgedCall("test_freeze_backbone", "freeze_backbone", "freeze_backbone",
                      functools.partial(_backbones, head_frozen=False), outcome=freeze_backbone_outcome),
    checks.JudgedCall("test_freeze_backbone_head", "freeze_backbone", "freeze_backbone",
                      functools.partial(_backbones, head_frozen=True), outcome=freeze_backbone_outcome),
    checks.JudgedCall("test_trainable_optimizer", "trainable_optimizer", "trainable_optimizer",
                      _frozen_models, TRAINED, outcome=trainable_optimizer_outcome),
    checks.JudgedCall("test_top_k_names_input", "top_k_names", "top_k_names",
                      functools.partial(_weights_cases, ks=(1, 1)), {"rtol": 1e-4, "atol": 1e-4},
                      outcome=top_k_names_input_outcome),
    checks.JudgedCall("test_top_k_names_output", "top_k_names", "top_k_names",
                      _named_weights_cases, outcome=top_k_names_output_outcome),
    checks.JudgedCall("test_shard_indices_in_order", "shard_indices", "shard_indices",
                      functools.partial(_splits, shuffle=False)),
    checks.JudgedCall("test_shard_indices_shuffled", "shard_indices", "shard_indices",
                      functools.partial(_splits, shuffle=True)),
    checks.JudgedCall("test_average_gradients", "average_gradients", "average_gradients",
                      _gradients_per_rank),
    checks.JudgedCall("test_average_gradients_inputs", "average_gradients", "average_gradients",
                      _gradients_per_rank, outcome=average_gradients_inputs_outcome),
    checks.JudgedCall("test_ddp_training_ranks_agree", "RUN_DIR", (),
                      functools.partial(_ddp_configurations, one_step=True),
                      outcome=ddp_training_ranks_agree_outcome,
                      accept=_as_the_reference(ddp_training_ranks_agree_outcome, TRAINED)),
    checks.JudgedCall("test_ddp_training_shards", "RUN_DIR", (),
                      functools.partial(_ddp_configurations, one_step=False),
                      outcome=ddp_training_shards_outcome,
                      accept=_as_the_reference(ddp_training_shards_outcome, {})),
    checks.JudgedCall("test_ddp_training_learns", "RUN_DIR", (),
                      functools.partial(_ddp_configurations, one_step=False),
                      outcome=ddp_training_learns_outcome,
                      accept=_as_the_reference(ddp_training_learns_outcome, TRAINED)),
    checks.JudgedCall("test_examples_curve", "examples_curve", "examples_curve",
                      functools.partial(_curves, warmups=("none", "short")), TRAINED,
                      outcome=examples_curve_outcome),
    checks.JudgedCall("test_examples_curve_warmup", "examples_curve", "examples_curve",
                      functools.partial(_curves, warmups=("short", "long", "none")),
                      outcome=examples_curve_warmup_outcome),
    checks.JudgedCall("test_profile_step", "profile_step", "profile_step", _step_cases, TRAINED,
                      outcome=profile_step_outcome),
    checks.JudgedCall("test_top_by_memory", "top_by_memory", "top_by_memory", _profiled_steps,
                      outcome=top_by_memory_outcome, accept=_top_accepted),
]
