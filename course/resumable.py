"""A training run that can be stopped and continued: its state in one object, and the loop that goes on.

Taught in lesson 04 (training_loop), section 13.

A :class:`Run` holds what a step of training reads or changes: a small MLP with dropout, its AdamW
optimizer, a learning-rate scheduler stepped once per batch, a ``GradScaler``, and where the run is:
the ``epoch``, the ``step`` within it, and the ``seed`` its data order comes from. :func:`train`
continues a run from where it is. The batch it takes next follows from ``(seed, epoch, step)`` alone:
each epoch visits the examples in the order :func:`epoch_order` gives, a permutation drawn from
``seed + epoch`` (what ``DistributedSampler.set_epoch`` does), so the step within the epoch says
which batches are left. Dropout draws its masks from torch's global generator: its state is part of
the run too, though no attribute holds it.

:func:`make_run` seeds that generator and builds a run; its keywords turn the parts off one at a
time (no dropout, a fixed order, a constant rate, a scale that never grows), which the lesson's
checks use to test one part of a checkpoint at a time. What a checkpoint must hold, and how it is
written and read back, is the lesson's exercise: nothing here saves or restores a run.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["Run", "epoch_order", "make_data", "make_run", "steps_taken", "train"]


@dataclass
class Run:
    """Everything a training run is, besides torch's global random state: the objects it trains with,
    its data order's ``seed``, and where it is (``epoch``, and ``step``: batches taken in that epoch).
    ``batch_size`` and ``shuffle`` are settings, the same for every run built alike."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    seed: int
    epoch: int = 0
    step: int = 0
    batch_size: int = 8
    shuffle: bool = True


def make_data(seed: int = 0, examples: int = 48, features: int = 8, classes: int = 4):
    """``(x, y)``: ``examples`` random points and labels that a small MLP can learn (a random linear
    rule), drawn from a generator of their own."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(examples, features, generator=generator)
    rule = torch.randn(features, classes, generator=generator)
    return x, (x @ rule).argmax(dim=1)


def make_run(seed: int, *, total_steps: int = 60, features: int = 8, hidden: int = 32, classes: int = 4,
             dropout: float = 0.2, lr: float = 0.02, schedule: bool = True, shuffle: bool = True,
             batch_size: int = 8, init_scale: float = 2.0**8, growth_interval: int = 4) -> Run:
    """A new run whose weights and dropout masks follow from ``seed``: it seeds torch's global
    generator, as a training script does at its start.

    ``schedule``: a one-cycle rate (warm-up then cosine, and AdamW's first beta moving the other way)
    over ``total_steps`` steps, else a constant ``lr``. The ``GradScaler`` multiplies the loss by its
    scale, starting at ``init_scale`` and doubling after ``growth_interval`` steps without an
    infinite gradient; with float16 under autocast that keeps small gradients from rounding to zero,
    and here, in float32, it changes no weight: it is state to carry over all the same.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(dropout),
                          nn.Linear(hidden, classes))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    if schedule:
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=total_steps)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return Run(model, optimizer, scheduler, scaler, seed=seed, batch_size=batch_size, shuffle=shuffle)


def epoch_order(seed: int, epoch: int, examples: int, shuffle: bool = True) -> torch.Tensor:
    """The order of the examples in epoch ``epoch``: a permutation drawn from a generator seeded with
    ``seed + epoch``, the same every time it is asked for; ``0, 1, 2, …`` when ``shuffle`` is off."""
    if not shuffle:
        return torch.arange(examples)
    return torch.randperm(examples, generator=torch.Generator().manual_seed(seed + epoch))


def batches_per_epoch(run: Run, examples: int) -> int:
    """How many batches an epoch of ``examples`` has (the last one may be smaller)."""
    return math.ceil(examples / run.batch_size)


def steps_taken(run: Run, examples: int) -> int:
    """The steps ``run`` has taken in all, from its ``epoch`` and ``step``."""
    return run.epoch * batches_per_epoch(run, examples) + run.step


def train_step(run: Run, x: torch.Tensor, y: torch.Tensor) -> float:
    """One step on the batch ``(x, y)``: the scaled loss's gradients, the optimizer's step through the
    scaler, the scaler's and then the scheduler's update. Returns the batch's loss."""
    run.optimizer.zero_grad()
    loss = nn.functional.cross_entropy(run.model(x), y)
    run.scaler.scale(loss).backward()
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.scheduler.step()
    return loss.item()


def train(run: Run, data, total_steps: int, stop_after: int | None = None) -> list[float]:
    """Continue ``run`` on ``data`` (``(x, y)``) until it has taken ``total_steps`` steps in all, or
    only ``stop_after`` in all when given (an interruption); returns the loss of each step taken now.

    Where it starts is the run's ``epoch`` and ``step``: the epoch's order comes from
    :func:`epoch_order` and the batches the epoch has taken are skipped. The step counts up after
    each batch, and at the end of an epoch the epoch counts up and the step goes back to 0."""
    x, y = data
    last = total_steps if stop_after is None else min(stop_after, total_steps)
    run.model.train()
    losses = []
    while steps_taken(run, len(x)) < last:
        batches = epoch_order(run.seed, run.epoch, len(x), run.shuffle).split(run.batch_size)
        index = batches[run.step]   # the next batch follows from (seed, epoch, step) alone
        losses.append(train_step(run, x[index], y[index]))
        run.step += 1
        if run.step == len(batches):
            run.epoch, run.step = run.epoch + 1, 0
    return losses
