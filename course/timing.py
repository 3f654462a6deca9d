"""Timing device work correctly: the one place the lessons' helpers read a clock around GPU work.

Taught in lesson 06 (mixed_precision), section 2; also used by lesson 07 (scale).

CUDA (and MPS) kernels run asynchronously: a call returns as soon as its work is *queued*. A clock
read without waiting for the device measures how long queuing took, not the work. Every helper here
waits for the device before starting and before stopping the clock (:func:`synchronize`); on the
CPU there is nothing to wait for and they time the calls as they are.

- :func:`stopwatch`: time a ``with`` block;
- :func:`time_calls`: seconds of each of several calls (or, with ``sync=False``, the wrong way);
- :func:`time_per_call`: the median of :func:`time_calls`;
- :func:`benchmark_median`: the same question answered by ``torch.utils.benchmark``.

Lesson 06's first exercise asks students to write their own ``time_per_call(fn, device, ...)``: the
version here takes its device as a keyword argument only, lesson 06 imports none of these before
that exercise, and its checks switch them all off (``graders.lesson_checks.mixed_precision.SHORTCUTS``).
"""

import contextlib
import statistics
import time
from dataclasses import dataclass

import torch

__all__ = ["Stopwatch", "benchmark_median", "stopwatch", "synchronize", "time_calls", "time_per_call"]


def synchronize(device) -> None:
    """Wait until every kernel queued on ``device`` has finished (nothing to wait for on the CPU)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass
class Stopwatch:
    """What :func:`stopwatch` measured: the clock reading at the start, and the seconds elapsed."""

    start: float = 0.0
    seconds: float = 0.0


@contextlib.contextmanager
def stopwatch(device, *, sync: bool = True):
    """Time the ``with`` block: ``with stopwatch(device) as watch: ...`` then ``watch.seconds``.

    ``sync=True`` waits for ``device`` before starting and before stopping the clock; ``sync=False``
    stops it as soon as Python gets control back. The clock is ``time.perf_counter``.
    """
    watch = Stopwatch()
    if sync:
        synchronize(device)
    watch.start = time.perf_counter()
    yield watch
    if sync:
        synchronize(device)
    watch.seconds = time.perf_counter() - watch.start


def time_calls(fn, *, device, repeats: int, warmup: int = 1, sync: bool = True) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn()``, after ``warmup`` untimed calls.

    ``sync=True`` waits for the device before starting and before stopping the clock: the right way.
    ``sync=False`` reads the clock as soon as Python gets control back, which on CUDA measures how
    long it took to *queue* the work, not to do it: the wrong way, kept to show the difference.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        with stopwatch(device, sync=sync) as watch:
            fn()
        times.append(watch.seconds)
    if not sync:
        synchronize(device)  # leave nothing queued behind for whatever runs next
    return times


def time_per_call(fn, *, repeats: int = 5, warmup: int = 1, device="cpu") -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls (see :func:`time_calls`).

    The median, because one slow call (the machine busy with something else) does not move it.
    """
    return statistics.median(time_calls(fn, device=device, repeats=repeats, warmup=warmup))


def benchmark_median(fn, *, min_run_time: float = 0.2, label: str = "fn()") -> float:
    """Median seconds per call of ``fn()`` measured by ``torch.utils.benchmark.Timer``.

    The timer warms up, synchronises CUDA itself and repeats the call until ``min_run_time`` seconds
    have been spent, in blocks long enough for the clock's resolution not to matter. It runs with
    as many threads as PyTorch uses here (its own default is one).
    """
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, label=label, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median
