"""Lesson 06 (GPU and mixed precision): the checks its grade cells call, their harnesses, its hints.

- ``time_per_call`` runs against a simulated clock (``time.perf_counter``, however it was imported,
  and its kin ``perf_counter_ns`` and ``timeit.default_timer``), a spied ``torch.cuda.synchronize``
  and simulated CUDA events, so that when it waits for a CUDA device is checked on any machine. Two
  ways of timing CUDA are accepted by design: synchronize around clock readings, or events recorded
  around the call and read once the host waited for them (``torch.cuda.Event(enable_timing=True)``,
  ``elapsed_time`` in ms); the simulated events follow CUDA's documented behaviour, and no test on a
  CPU proves more than that. ``course.timing``'s helpers are switched off meanwhile, because writing
  that loop is the exercise.
- ``fp16_fate`` and ``tensor_bytes`` are checked on cases worked out by hand and on random inputs
  through properties (the fp16 band a value was drawn from, the rounding bands at both ends of
  fp16's range included; how bytes grow with the shape).
- ``pick_amp_dtype`` asks a simulated machine (``torch.cuda``'s answers about it swapped under any
  name): GPUs with native bf16, GPUs that only emulate it (where ``torch.cuda.is_bf16_supported()``
  still says True by default), and one of each, where ``"cuda:1"`` is not the current GPU; the dtype
  is checked, and that a given answer is used without asking.
- ``amp_train_step`` runs on a model with probes, a loss that notes the gradient of the loss it
  returns, and a real ``GradScaler`` that notes the calls it gets and the gradients its optimizer
  step sees.

When a class is graded, the judge decides every grade cell too (``JUDGED``, at the end): the same
harnesses run as outcomes on its inputs and give plain data (the median a timing answer returned
and its events on the simulated clock, the dtypes picked on simulated GPUs, the fates of permuted
grids, for ``amp_train_step`` per grade cell only the data of its own behaviour).
"""

import contextlib
import math
import threading
import time
import timeit
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F

from course import amp, timing
from course.settings import say
from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = ["HINTS", "MORE_HINTS", "SHORTCUTS", "check_amp_train_step_autocast",
           "check_amp_train_step_clipping", "check_amp_train_step_scaler", "check_amp_train_step_update",
           "check_autocast", "check_bytes", "check_clipped_step", "check_concepts", "check_fate_of",
           "check_fenced_by_syncs", "check_fp16_fate_shape", "check_fp16_fate_values", "check_median_of",
           "check_never_syncs", "check_pick", "check_pick_amp_dtype", "check_pick_raises",
           "check_scaled_step", "check_skipped", "check_skipped_step", "check_skipped_steps",
           "check_tensor_bytes", "check_time_per_call_median", "check_time_per_call_synchronizes",
           "check_update", "grade_concepts", "run_amp_steps", "scales_of_a_run", "show_questions"]

# ------------------------------------------------------------------------------------------- hints
HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# ------------------------------------------------------------------------------ helpers switched off
# The course's helpers that do an exercise's work, switched off while its answer runs, by every
# check that runs it: exercise 1 writes its own timing loop, exercise 2 its own arithmetic, exercise 4
# its own choice of dtype.
_TIMING_HELPERS = [(timing, name) for name in
                   ("synchronize", "stopwatch", "time_calls", "time_per_call", "benchmark_median")]
SHORTCUTS = {
    **dict.fromkeys(["check_time_per_call_median", "check_median_of", "check_time_per_call_synchronizes",
                     "check_fenced_by_syncs", "check_never_syncs"], _TIMING_HELPERS),
    **dict.fromkeys(["check_tensor_bytes", "check_bytes"], [(amp, "tensor_nbytes")]),
    **dict.fromkeys(["check_pick_amp_dtype", "check_pick"], [(amp, "autocast_supported")]),
}


# ------------------------------------------------------------------------------------ time_per_call
# What a timing answer may call, each swapped for a simulated stand-in while it runs, under any name
# the student gave it (checks.stand_ins: `from time import perf_counter` too): the clock, the waits
# for a CUDA device, and CUDA events, the other right way to time on CUDA.
_CLOCKS = [(time, "perf_counter"), (time, "perf_counter_ns"), (timeit, "default_timer")]
_HAS_ACCELERATOR_WAIT = hasattr(getattr(torch, "accelerator", None), "synchronize")
_WAITS = [(torch.cuda, "synchronize"),
          *([(torch.accelerator, "synchronize")] if _HAS_ACCELERATOR_WAIT else [])]
_EVENTS = [(torch.cuda, "Event"), *([(torch, "Event")] if hasattr(torch, "Event") else [])]


@dataclass
class _TimingRun:
    """One call of a student's ``time_per_call``: what it returned and what happened, in order.

    ``events`` holds ``"call"`` (``fn()``), ``"sync"`` (``torch.cuda.synchronize``), ``"clock"``
    (a reading of ``time.perf_counter``), and for CUDA events ``("record", k)`` (event ``k``
    recorded), ``("wait", k)`` (the host waited for event ``k``) and ``("elapsed", j, k)``
    (``events[j].elapsed_time(events[k])`` read).
    """

    label: str
    returned: object
    events: list


class _EventLog:
    """The simulated clock and the spies' notebook: what a timing answer did, in order."""

    def __init__(self, durations):
        self.durations, self.events, self.now, self.count = durations, [], 1000.0, 0
        self.thread = threading.get_ident()
        # what each swapped object is, read before any is swapped
        self.kinds = {id(getattr(owner, name)): kind
                      for kind, targets in (("clock", _CLOCKS), ("wait", _WAITS), ("event", _EVENTS))
                      for owner, name in targets}
        self.ns_clock = time.perf_counter_ns

    def call(self):
        self.now += self.durations[min(self.events.count("call"), len(self.durations) - 1)]
        self.events.append("call")

    def stand_in(self, original, label):
        """What replaces ``original`` (a clock, a wait or an event class) while the answer runs."""
        kind = self.kinds[id(original)]
        if kind == "event":
            return self.event_class()
        if kind == "wait":
            return lambda *args, **kwargs: self.events.append("sync")
        in_ns = original is self.ns_clock

        def read_clock():
            if threading.get_ident() != self.thread:       # the kernel's other threads keep real time
                return original()
            self.events.append("clock")
            return round(self.now * 1e9) if in_ns else self.now
        return read_clock

    def event_class(self):
        log = self

        class SimulatedEvent:
            """A CUDA event on the simulated clock: ``record``, ``synchronize``, ``query``, ``wait``,
            ``elapsed_time`` (milliseconds, as CUDA's)."""

            def __init__(self, *args, enable_timing=False, **kwargs):
                self.number, self.timing, self.at = log.count, enable_timing, None
                log.count += 1

            def record(self, *args, **kwargs):
                self.at = log.now
                log.events.append(("record", self.number))

            def synchronize(self):
                log.events.append(("wait", self.number))

            def query(self):
                log.events.append(("wait", self.number))
                return True

            def wait(self, *args, **kwargs):   # makes a stream wait, not the host
                pass

            def elapsed_time(self, end):
                if not (self.timing and getattr(end, "timing", False)):
                    raise RuntimeError(checks.say(checks.both(
                        "elapsed_time necesita dos eventos creados con enable_timing=True",
                        "elapsed_time needs two events created with enable_timing=True")))
                if self.at is None or end.at is None:
                    raise RuntimeError(checks.say(checks.both(
                        "elapsed_time de un evento que no se ha grabado (record)",
                        "elapsed_time of an event that was never recorded")))
                log.events.append(("elapsed", self.number, end.number))
                return (end.at - self.at) * 1000.0
        return SimulatedEvent


def _watch_time_per_call(check: str, time_per_call, device, *, durations, warmup: int, hint) -> _TimingRun:
    """Call ``time_per_call(fn, device, repeats, warmup)`` on a simulated clock with spied waits and
    events, and the helpers of ``check`` off.

    ``fn`` advances the clock by ``durations[k]`` on its k-th call, instantly; ``torch.cuda``'s
    synchronize and events only take notes, so a CUDA device can be checked on any machine.
    """
    log = _EventLog(durations)
    repeats = len(durations) - warmup
    label = f"time_per_call(fn, {device!r}, repeats={repeats}, warmup={warmup})"
    with checks.stand_ins(_CLOCKS + _WAITS + _EVENTS, log.stand_in, time_per_call):
        returned = checks.run_answer(time_per_call, log.call, device, repeats=repeats, warmup=warmup,
                                     name=label, hint=hint, shortcuts=SHORTCUTS[check])
    return _TimingRun(label, returned, log.events)


def _check_calls_of_fn(run: _TimingRun, expected: int, hint) -> None:
    checks.check_equal(run.events.count("call"), expected, hint=hint,
                       name=checks.both(f"{run.label}: llamadas a fn", f"{run.label}: calls of fn"))


@checks.keeps_random_state
def check_median_of(time_per_call, *, warmup: int, timed, expected: float) -> None:
    """The median of the timed calls, warm-up excluded: warm-up calls take 60 s each here."""
    _median_of("check_median_of", time_per_call, warmup=warmup, timed=timed, expected=expected)


def _median_of(check: str, time_per_call, *, warmup: int, timed, expected: float) -> None:
    hint = HINTS["time_per_call"]
    run = _watch_time_per_call(check, time_per_call, "cpu", durations=[60.0] * warmup + list(timed),
                               warmup=warmup, hint=hint)
    _check_calls_of_fn(run, warmup + len(timed), hint)
    checks.check_type(run.returned, float, name=run.label, hint=hint)
    shown = ", ".join(f"{t:g}" for t in timed)
    checks.check_close(run.returned, expected, rtol=1e-9, atol=1e-9, hint=hint,
                       name=checks.both(f"{run.label} con llamadas medidas de {shown} s "
                                        f"(cada llamada de calentamiento tarda 60 s)",
                                        f"{run.label} with timed calls of {shown} s "
                                        f"(each warm-up call takes 60 s)"))


@checks.keeps_random_state
def check_time_per_call_median(time_per_call) -> None:
    """Visible: an odd count with one slow call somewhere, and an even count (worked out by hand)."""
    generator = checks.fresh_generator()
    usual = round(0.001 + 0.05 * float(torch.rand((), generator=generator)), 4)
    timed = [usual] * 5
    timed[int(torch.randint(0, 5, (), generator=generator))] = 0.5      # one slow call
    check = "check_time_per_call_median"
    _median_of(check, time_per_call, warmup=int(torch.randint(1, 4, (), generator=generator)), timed=timed,
               expected=usual)
    _median_of(check, time_per_call, warmup=2, timed=[0.02, 0.3, 0.04, 0.01], expected=0.03)


@checks.keeps_random_state
def check_fenced_by_syncs(time_per_call, device, *, repeats: int, warmup: int) -> None:
    """On a CUDA device, every timed call is timed only once its work is done, in one of two ways:
    wait, read the clock, call, wait, read the clock; or record an event, call, record another, and
    read their elapsed time only after waiting for the second. Times come back in seconds."""
    _fenced_by_syncs("check_fenced_by_syncs", time_per_call, device, repeats=repeats, warmup=warmup)


def _timed_by_clock(events, i) -> bool:
    return events[i - 2:i] == ["sync", "clock"] and events[i + 1:i + 3] == ["sync", "clock"]


def _timed_by_events(events, i) -> bool:
    """The call at ``i`` sits between two event records, and their elapsed time is read after the
    host waited for the second one (a device-wide wait, or a wait for an event recorded since)."""
    before, after = events[i - 1] if i else None, events[i + 1] if i + 1 < len(events) else None
    if not (isinstance(before, tuple) and isinstance(after, tuple) and before[0] == after[0] == "record"):
        return False
    start, end = before[1], after[1]
    since, waited = {end}, False
    for event in events[i + 2:]:
        if event in (("record", start), ("record", end)):      # re-recorded before being read
            return False
        if event == ("elapsed", start, end):
            return waited
        if isinstance(event, tuple) and event[0] == "record":
            since.add(event[1])
        waited = waited or event == "sync" or (isinstance(event, tuple) and event[0] == "wait"
                                                and event[1] in since)
    return False


def _shown(events) -> str:
    return " ".join(event if isinstance(event, str) else f"{event[0]}({','.join(map(str, event[1:]))})"
                    for event in events)


def _fenced_by_syncs(check: str, time_per_call, device, *, repeats: int, warmup: int) -> None:
    hint = HINTS["time_per_call_sync"]
    timed = [round(0.01 * (1 + (3 * k) % 7), 4) for k in range(repeats)]
    run = _watch_time_per_call(check, time_per_call, device, durations=[60.0] * warmup + timed,
                               warmup=warmup, hint=hint)
    _check_calls_of_fn(run, warmup + repeats, hint)
    events = run.events
    calls = [i for i, event in enumerate(events) if event == "call"][warmup:]
    fenced = all(_timed_by_clock(events, i) or _timed_by_events(events, i) for i in calls)
    checks.check_true(fenced, hint=hint,
                      name=checks.both(f"{run.label}: orden de los sucesos", f"{run.label}: order of events"),
                      expected=checks.both(
                          "sync clock call sync clock en cada llamada medida (sync: torch.cuda.synchronize; "
                          "clock: time.perf_counter; call: fn()), o con eventos de CUDA: record(a) call "
                          "record(b), y elapsed(a,b) tras una espera (sync o wait(b))",
                          "sync clock call sync clock for every timed call (sync: torch.cuda.synchronize; "
                          "clock: time.perf_counter; call: fn()), or with CUDA events: record(a) call "
                          "record(b), and elapsed(a,b) after a wait (sync or wait(b))"),
                      got=_shown(events))
    seconds = checks.both(f"{run.label}: el tiempo devuelto, en segundos, con llamadas medidas de "
                          f"{', '.join(f'{t:g}' for t in timed)} s",
                          f"{run.label}: the time returned, in seconds, with timed calls of "
                          f"{', '.join(f'{t:g}' for t in timed)} s")
    checks.check_type(run.returned, float, name=seconds, hint=hint)
    checks.check_true(min(timed) - 1e-9 <= run.returned <= max(timed) + 1e-9, hint=hint, name=seconds,
                      expected=f"{min(timed):g} … {max(timed):g}", got=f"{run.returned:g}")


@checks.keeps_random_state
def check_never_syncs(time_per_call, device, *, repeats: int, warmup: int) -> None:
    """On any device but CUDA there is nothing to wait for, and no CUDA event to record."""
    _never_syncs("check_never_syncs", time_per_call, device, repeats=repeats, warmup=warmup)


def _never_syncs(check: str, time_per_call, device, *, repeats: int, warmup: int) -> None:
    hint = HINTS["time_per_call_sync"]
    run = _watch_time_per_call(check, time_per_call, device, durations=[0.01] * (warmup + repeats),
                               warmup=warmup, hint=hint)
    _check_calls_of_fn(run, warmup + repeats, hint)
    checks.check_equal(run.events.count("sync"), 0, hint=hint,
                       name=checks.both(f"{run.label}: llamadas a torch.cuda.synchronize",
                                        f"{run.label}: calls of torch.cuda.synchronize"))
    checks.check_equal(sum(isinstance(event, tuple) for event in run.events), 0, hint=hint,
                       name=checks.both(f"{run.label}: usos de eventos de CUDA",
                                        f"{run.label}: uses of CUDA events"))


@checks.keeps_random_state
def check_time_per_call_synchronizes(time_per_call) -> None:
    check = "check_time_per_call_synchronizes"
    _fenced_by_syncs(check, time_per_call, torch.device("cuda"), repeats=3, warmup=2)
    _never_syncs(check, time_per_call, "cpu", repeats=3, warmup=1)


# ------------------------------------------------------------------------------------- tensor_bytes
class _NoTensorMade(torch.overrides.TorchFunctionMode):
    """Refuses every torch call that makes a tensor, on any device (``meta`` included): the exercise
    is to count the bytes without one."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor):
            raise RuntimeError(say(checks.both(
                f"{getattr(func, '__name__', func)} creó un tensor: cuenta los bytes sin crear ninguno",
                f"{getattr(func, '__name__', func)} made a tensor: count the bytes without making one")))
        return result


def _bytes_of(check: str, tensor_bytes, shape, dtype) -> int:
    """``tensor_bytes(shape, dtype)``, run with the helpers of ``check`` off and no tensor made; an int."""
    hint = HINTS["tensor_bytes"]
    label = f"tensor_bytes({tuple(shape)}, {dtype})"
    with _NoTensorMade():
        got = checks.run_answer(tensor_bytes, shape, dtype, name=label, hint=hint, shortcuts=SHORTCUTS[check])
    checks.check_type(got, int, name=label, hint=hint)
    return got


def _bytes_are(check: str, tensor_bytes, shape, dtype, expected: int) -> None:
    checks.check_equal(_bytes_of(check, tensor_bytes, shape, dtype), expected, hint=HINTS["tensor_bytes"],
                       name=f"tensor_bytes({tuple(shape)}, {dtype})")


@checks.keeps_random_state
def check_bytes(tensor_bytes, shape, dtype, expected: int) -> None:
    _bytes_are("check_bytes", tensor_bytes, shape, dtype, expected)


@checks.keeps_random_state
def check_tensor_bytes(tensor_bytes) -> None:
    """Cases worked out by hand, then how the bytes of a random shape grow with it."""
    check = "check_tensor_bytes"
    for shape, dtype, expected in [((1024, 1024), torch.float32, 4 * 2**20),
                                   ((1024, 1024), torch.bfloat16, 2 * 2**20),
                                   ((3, 224, 224), torch.float16, 301056), ((), torch.float64, 8),
                                   ((65536, 65536, 4096), torch.float16, 2**45),    # 32 TiB: never allocated
                                   ((5, 3), torch.complex64, 120), ((10,), torch.bool, 10)]:
        _bytes_are(check, tensor_bytes, shape, dtype, expected)
    generator = checks.fresh_generator()
    shape = tuple(torch.randint(1, 300, (int(torch.randint(1, 4, (), generator=generator)),),
                                generator=generator).tolist())
    extra = int(torch.randint(2, 50, (), generator=generator))
    base = _bytes_of(check, tensor_bytes, shape, torch.float16)
    for grown, dtype, factor in [((*shape, extra), torch.float16, extra),
                                 ((extra, *shape), torch.float16, extra),
                                 (shape, torch.float32, 2), (shape, torch.float64, 4),
                                 (shape, torch.int8, 0.5)]:
        _bytes_are(check, tensor_bytes, grown, dtype, int(base * factor))


# ---------------------------------------------------------------------------------------- fp16_fate
_OK, _LOSES_BITS, _BECOMES_ZERO, _BECOMES_INF = 0, 1, 2, 3
# |value| ranges well inside each fate, read off torch.finfo(torch.float16) (see section 3):
# normal numbers from 6.1e-5 to 65504; subnormal down to 2^-24 ≈ 6e-8; zero below half of that.
_FATE_BANDS = {_OK: (1e-4, 6e4), _LOSES_BITS: (1e-7, 5e-5), _BECOMES_ZERO: (1e-12, 2.5e-8),
               _BECOMES_INF: (7e4, 1e30)}


def _values_with_known_fates(count: int, generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` float32 values drawn log-uniformly inside the fate bands, random signs, some zeros."""
    fates = torch.randint(0, 4, (count,), generator=generator)
    low = torch.tensor([math.log10(_FATE_BANDS[int(f)][0]) for f in fates], dtype=torch.float64)
    high = torch.tensor([math.log10(_FATE_BANDS[int(f)][1]) for f in fates], dtype=torch.float64)
    magnitudes = 10 ** (low + (high - low) * torch.rand(count, generator=generator, dtype=torch.float64))
    signs = torch.where(torch.rand(count, generator=generator) < 0.5, -1.0, 1.0).double()
    values = (signs * magnitudes).float()
    zeros = torch.rand(count, generator=generator) < 0.1
    values[zeros] = 0.0
    fates[zeros] = _OK
    return values, fates


@checks.keeps_random_state
def check_fate_of(fp16_fate, values, expected, *, name, hint=None) -> None:
    hint = hint or HINTS["fp16_fate"]
    got = checks.check_runs(fp16_fate, values.clone(), name=name, hint=hint)
    checks.check_close(got, expected, name=name, hint=hint)


def _values_near_the_top(generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Values just above fp16's largest, 65504, with random signs: below 65520, half-way to the next
    step (65536), they round down to 65504 and survive; from 65520 on they become inf."""
    below = 65504.5 + 15 * torch.rand(3, generator=generator, dtype=torch.float64)
    above = 65520 + 400 * torch.rand(3, generator=generator, dtype=torch.float64)
    signs = torch.where(torch.rand(6, generator=generator) < 0.5, -1.0, 1.0).double()
    return (signs * torch.cat([below, above])).float(), torch.tensor([_OK] * 3 + [_BECOMES_INF] * 3)


@checks.keeps_random_state
def check_fp16_fate_values(fp16_fate) -> None:
    """A row worked out by hand (4e-8 rounds up to fp16's smallest subnormal; 65519 rounds down to
    its largest, 65520 up to inf), random values near the top, then random values of every fate."""
    values = torch.tensor([0.0, 1.0, -3e4, 7e4, -1e5, 1e-3, 3e-5, -1e-5, 1e-7, 4e-8, -2e-8, 1e-12, 1e30,
                           65510.0, -65519.0, 65520.0])
    shown = ", ".join(f"{v:g}" for v in values.tolist())
    check_fate_of(fp16_fate, values, torch.tensor([0, 0, 0, 3, 3, 0, 1, 1, 1, 1, 2, 2, 3, 0, 0, 3]),
                  name=f"fp16_fate(torch.tensor([{shown}]))")
    generator = checks.fresh_generator()
    values, fates = _values_near_the_top(generator)
    check_fate_of(fp16_fate, values, fates,
                  name=checks.both(f"fp16_fate(valores al azar junto al mayor de fp16, 65504: "
                                   f"{values.tolist()})",
                                   f"fp16_fate(random values next to fp16's largest, 65504: "
                                   f"{values.tolist()})"))
    values, fates = _values_with_known_fates(40, generator)
    check_fate_of(fp16_fate, values, fates,
                  name=checks.both(f"fp16_fate(40 valores al azar: {values.tolist()})",
                                   f"fp16_fate(40 random values: {values.tolist()})"))


@checks.keeps_random_state
def check_fp16_fate_shape(fp16_fate) -> None:
    """An int64 answer with the input's shape: a 2×2 grid worked out by hand, a random 3×4×5 one."""
    hint = HINTS["fp16_fate_shape"]
    grid = torch.tensor([[1e-9, 2.0], [80000.0, -5e-6]])
    check_fate_of(fp16_fate, grid, torch.tensor([[2, 0], [3, 1]]), hint=hint,
                  name="fp16_fate(torch.tensor([[1e-9, 2.0], [80000.0, -5e-6]]))")
    values, fates = _values_with_known_fates(60, checks.fresh_generator())
    check_fate_of(fp16_fate, values.reshape(3, 4, 5), fates.reshape(3, 4, 5), hint=hint,
                  name=checks.both("fp16_fate(valores al azar de forma (3, 4, 5))",
                                   "fp16_fate(random values of shape (3, 4, 5))"))


# ----------------------------------------------------------------------------------- pick_amp_dtype
# A GPU as torch.cuda describes it, for an answer that asks: bf16 is native from compute capability
# 8.0 on (Ampere); before it, PyTorch 2.x emulates it, slowly, and is_bf16_supported() still says True
# unless asked with including_emulation=False.
_GPUS = {"A100": ("NVIDIA A100-SXM4-40GB", (8, 0)), "T4": ("Tesla T4", (7, 5)),
         "V100": ("Tesla V100-SXM2-16GB", (7, 0))}
_ABOUT_BF16 = ("is_bf16_supported", "get_device_capability", "get_device_properties", "get_device_name")
_CUDA_PROBES = [(torch.cuda, name) for name in
                (*_ABOUT_BF16, "is_available", "device_count", "current_device", "set_device", "device")]


class _SimulatedGpu:
    """Stand-ins for what an answer may ask ``torch.cuda`` about a machine whose GPUs are ``models``
    (keys of ``_GPUS``, by index; one model for every GPU of a two-GPU machine): questions about a
    GPU without an index are about the current one, which ``set_device`` and ``torch.cuda.device``
    change. ``asked`` notes the questions about bf16 (its support, the compute capability, the
    properties or the name)."""

    def __init__(self, models):
        models = (models, models) if models is None or isinstance(models, str) else tuple(models)
        self.gpus = [_GPUS.get(model, ("-", (0, 0))) for model in models]
        self.current, self.asked = 0, []
        self.answers = {
            "is_bf16_supported": lambda including_emulation=True: (
                self._gpu(None)[1] >= (8, 0) or bool(including_emulation)),
            "get_device_capability": lambda device=None: self._gpu(device)[1],
            "get_device_properties": lambda device=None: SimpleNamespace(
                name=self._gpu(device)[0], major=self._gpu(device)[1][0], minor=self._gpu(device)[1][1],
                total_memory=16 * 2**30, multi_processor_count=40),
            "get_device_name": lambda device=None: self._gpu(device)[0],
            "is_available": lambda: True,
            "device_count": lambda: len(self.gpus),
            "current_device": lambda: self.current,
            "set_device": lambda device: setattr(self, "current", self._index(device)),
            "device": self._selected,
        }
        self._kinds = {id(getattr(owner, name)): name for owner, name in _CUDA_PROBES}

    def _index(self, device) -> int:
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            index = self.current if device is None else torch.device(device).index
            index = self.current if index is None else index
        if not 0 <= index < len(self.gpus):
            raise RuntimeError(f"CUDA error: invalid device ordinal {index} (this machine has "
                               f"{len(self.gpus)} GPUs)")
        return index

    def _gpu(self, device) -> tuple:
        return self.gpus[self._index(device)]

    @contextlib.contextmanager
    def _selected(self, device):
        """``torch.cuda.device(device)``: the current GPU inside the block."""
        before, self.current = self.current, self._index(device)
        try:
            yield
        finally:
            self.current = before

    def stand_in(self, original, label):
        kind = self._kinds[id(original)]

        def answer(*args, **kwargs):
            if kind in _ABOUT_BF16:
                self.asked.append(label)
            return self.answers[kind](*args, **kwargs)
        return answer

    def describe(self) -> dict:
        """The machine, for a message: each GPU, its compute capability and its bf16."""
        gpus = [(index, name, f"{major}.{minor}", (major, minor) >= (8, 0))
                for index, (name, (major, minor)) in enumerate(self.gpus)]
        return checks.both(
            "en una máquina simulada con " + " y ".join(
                f"cuda:{index} = {name} (capacidad de cómputo {capability}: bf16 "
                f"{'nativo' if native else 'solo emulado'})" for index, name, capability, native in gpus),
            "on a simulated machine with " + " and ".join(
                f"cuda:{index} = {name} (compute capability {capability}: bf16 "
                f"{'native' if native else 'only emulated'})" for index, name, capability, native in gpus))


@checks.keeps_random_state
def check_pick(pick_amp_dtype, device, expected, *, bf16_supported=None, gpu=None) -> None:
    """``pick_amp_dtype(device, bf16_supported)`` on a simulated machine whose GPUs are ``gpu`` (a key
    of ``_GPUS``, or a tuple of them by index), whose answers are those ``torch.cuda`` gives on it.

    A ``bf16_supported`` that is given must be used without asking the GPU anything about bf16.
    """
    hint = HINTS["pick_amp_dtype"]
    simulated = _SimulatedGpu(gpu)
    label = f"pick_amp_dtype({device!r}, bf16_supported={bf16_supported!r})"
    if gpu is not None:
        label += f" {checks.say(simulated.describe())}"
    with checks.stand_ins(_CUDA_PROBES, simulated.stand_in, pick_amp_dtype):
        got = checks.run_answer(pick_amp_dtype, device, bf16_supported=bf16_supported, name=label, hint=hint,
                                shortcuts=SHORTCUTS["check_pick"])
    checks.check_equal(got, expected, name=label, hint=hint)
    if bf16_supported is not None:
        checks.check_equal(simulated.asked, [], hint=hint,
                           name=checks.both(f"{label}: preguntas a la GPU sobre bf16",
                                            f"{label}: questions to the GPU about bf16"))


@checks.keeps_random_state
def check_pick_raises(pick_amp_dtype, device) -> None:
    checks.check_raises(pick_amp_dtype, ValueError, device, name=f"pick_amp_dtype({device!r})",
                        hint=HINTS["pick_amp_dtype"])


@checks.keeps_random_state
def check_pick_amp_dtype(pick_amp_dtype) -> None:
    """CPU; CUDA with the answer given; CUDA asking a GPU with native bf16, then one that only emulates
    it (a T4: bf16 there is slower than fp16); the second GPU of a machine whose first is the T4."""
    check_pick(pick_amp_dtype, "cpu", torch.bfloat16)
    check_pick(pick_amp_dtype, torch.device("cpu"), torch.bfloat16)
    check_pick(pick_amp_dtype, "cuda", torch.float16, bf16_supported=False)
    check_pick(pick_amp_dtype, torch.device("cuda"), torch.bfloat16, bf16_supported=True)
    check_pick(pick_amp_dtype, "cuda", torch.bfloat16, gpu="A100")
    check_pick(pick_amp_dtype, torch.device("cuda"), torch.float16, gpu="T4")
    check_pick(pick_amp_dtype, "cuda:1", torch.bfloat16, gpu=("T4", "A100"))


# ----------------------------------------------------------------------------------- amp_train_step
_LEARNING_RATE = 0.1


class _Parcel:
    """A batch tensor that reaches the model only through ``.to(...)``, which notes the device."""

    def __init__(self, tensor: torch.Tensor, moves: list):
        self.tensor, self.moves = tensor, moves

    def to(self, *args, **kwargs):
        self.moves.append(kwargs.get("device", args[0] if args else None))
        return self.tensor.to(*args, **kwargs)


def _refuse_unmoved(value, what: str) -> None:
    if not isinstance(value, torch.Tensor):
        problem = checks.say(checks.both("no se movió al dispositivo", "was not moved to the device"))
        checks.fail(what, problem, "torch.Tensor", checks.describe(value), HINTS["amp_train_step_update"])


class _Gate(nn.Module):
    """The model's first layer: refuses inputs that did not go through ``.to(device)``."""

    def forward(self, x):
        _refuse_unmoved(x, "inputs")
        return x


class _Probe(nn.Module):
    """Passes its input on and notes whether autocast is on, with which dtype, and the input's dtype."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def forward(self, x):
        kind = x.device.type
        on = torch.is_autocast_enabled(kind)
        self.log.append(("forward", on, torch.get_autocast_dtype(kind) if on else None, x.dtype))
        return x


@dataclass
class _LossCall:
    """A call of the spied loss: autocast's state, the loss's value and its own gradients."""

    autocast: tuple
    value: float
    grads: list


def _spy_loss(log: list, base, params, factor: float = 1.0):
    """``base(outputs, targets) * factor``, noting autocast's state and the gradient of that loss."""
    def loss_fn(outputs, targets):
        _refuse_unmoved(targets, "targets")
        kind = outputs.device.type
        on = torch.is_autocast_enabled(kind)
        loss = base(outputs, targets) * factor
        with torch.autocast(kind, enabled=False):
            grads = torch.autograd.grad(loss, params, retain_graph=True)
        log.append(_LossCall((on, torch.get_autocast_dtype(kind) if on else None), loss.item(),
                             [g.detach().clone() for g in grads]))
        return loss
    return loss_fn


class _SpyScaler(torch.amp.GradScaler):
    """A real GradScaler on the CPU that notes the calls it gets, in order."""

    def __init__(self, log: list, **kwargs):
        super().__init__("cpu", **kwargs)
        self.log = log
        self._stepping = False

    def scale(self, outputs):
        self.log.append("scale")
        return super().scale(outputs)

    def unscale_(self, optimizer):
        if not self._stepping:                 # the step unscales by itself when nobody did
            self.log.append("unscale_")
        return super().unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.log.append("step")
        self._stepping = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self._stepping = False

    def update(self, new_scale=None):
        self.log.append("update")
        return super().update(new_scale)


@dataclass
class _AmpStep:
    """One call of a student's ``amp_train_step`` under the spies, and what it should have done."""

    where: str
    dtype: torch.dtype
    max_norm: float | None
    device: object
    log: list                         # forward probes, loss calls and scaler calls, in order
    returned: object
    moves: list                       # the devices the batch's tensors were moved to
    caught: list                      # warnings raised during the call
    before: list                      # the weights before the call, after it
    after: list
    scale_before: float
    scale_after: float
    optimizer_step: checks.StepRecord | None   # what the optimizer's step saw; None if it took none

    @property
    def loss_calls(self) -> list:
        return [entry for entry in self.log if isinstance(entry, _LossCall)]

    @property
    def scaler_calls(self) -> list:
        calls = [entry for entry in self.log if isinstance(entry, str)]
        # unscaling without clipping is harmless: only when clipping must it come before the step
        return calls if self.max_norm is not None else [c for c in calls if c != "unscale_"]


def _describe_scaler(scaler_kwargs) -> str:
    arguments = ", ".join(["'cpu'"] + [f"{k}={v!r}" for k, v in scaler_kwargs.items()])
    return f"GradScaler({arguments})"


@checks.keeps_random_state
def run_amp_steps(amp_train_step, *, seed: int, dtype, base=F.cross_entropy, widths=(6, 10, 3),
                  steps: int = 2, device="cpu", max_norm=None, overflow: bool = False,
                  scaler_kwargs=None, parcels: bool = False) -> list[_AmpStep]:
    """Call ``amp_train_step`` ``steps`` times on a spied model, SGD and scaler; one record per call.

    ``overflow`` makes the loss infinite, so every gradient overflows; ``parcels`` hands the batch
    over as :class:`_Parcel` objects, so that only moved tensors reach the model.
    """
    scaler_kwargs = {"enabled": False} if scaler_kwargs is None else scaler_kwargs
    generator = checks.seeded_generator(seed)
    log = []
    with checks.seeded(seed):
        model = nn.Sequential(_Gate(), nn.Linear(widths[0], widths[1]), _Probe(log), nn.ReLU(),
                              nn.Linear(widths[1], widths[2]))
    params = list(model.parameters())
    optimizer = checks.SpySGD(params, lr=_LEARNING_RATE)
    scaler = _SpyScaler(log, **scaler_kwargs)
    loss_fn = _spy_loss(log, base, params, factor=math.inf if overflow else 1.0)
    label = (f"amp_train_step(model, batch, loss_fn, optimizer, {_describe_scaler(scaler_kwargs)}, "
             f"{device!r}, {dtype}, max_norm={max_norm!r})")
    records = []
    for step in range(steps):
        inputs = torch.randn(12, widths[0], generator=generator)
        targets = (torch.randint(0, widths[2], (12,), generator=generator) if base is F.cross_entropy
                   else torch.randn(12, widths[2], generator=generator))
        moves = []
        batch = (_Parcel(inputs, moves), _Parcel(targets, moves)) if parcels else (inputs, targets)
        log.clear()
        steps_before, scale_before = len(optimizer.steps), scaler.get_scale()
        before = [p.detach().clone() for p in params]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            returned = checks.check_runs(amp_train_step, model, batch, loss_fn, optimizer, scaler, device,
                                         dtype, max_norm=max_norm, name=label, hint=HINTS["amp_train_step"])
        word = checks.say(checks.both("paso", "step"))
        records.append(_AmpStep(
            where=f"{label}, {word} {step + 1}", dtype=dtype, max_norm=max_norm, device=device,
            log=list(log), returned=returned, moves=moves, caught=[str(w.message) for w in caught],
            before=before, after=[p.detach().clone() for p in params], scale_before=scale_before,
            scale_after=scaler.get_scale(),
            optimizer_step=optimizer.steps[-1] if len(optimizer.steps) > steps_before else None))
    return records


def _one_loss_call(record: _AmpStep, hint) -> _LossCall:
    checks.check_equal(len(record.loss_calls), 1, hint=hint,
                       name=checks.both(f"{record.where}: llamadas a loss_fn",
                                        f"{record.where}: calls of loss_fn"))
    return record.loss_calls[0]


@checks.keeps_random_state
def check_autocast(record: _AmpStep) -> None:
    """The forward pass and the loss ran under autocast with ``dtype``, or without it for float32."""
    hint = HINTS["amp_train_step"]
    where = record.where
    on = record.dtype != torch.float32
    state = (on, record.dtype if on else None)
    forwards = [entry for entry in record.log if isinstance(entry, tuple)]
    checks.check_equal(len(forwards), 1, hint=hint,
                       name=checks.both(f"{where}: pasadas hacia delante", f"{where}: forward passes"))
    checks.check_equal(forwards[0][1:3], state, hint=hint,
                       name=checks.both(f"{where}: (autocast activo, su dtype) durante model(inputs)",
                                        f"{where}: (autocast enabled, its dtype) during model(inputs)"))
    checks.check_equal(forwards[0][3], record.dtype, hint=hint,
                       name=checks.both(f"{where}: dtype de la salida de la primera capa lineal",
                                        f"{where}: dtype of the first linear layer's output"))
    checks.check_equal(_one_loss_call(record, hint).autocast, state, hint=hint,
                       name=checks.both(f"{where}: (autocast activo, su dtype) durante loss_fn",
                                        f"{where}: (autocast enabled, its dtype) during loss_fn"))
    checks.check_equal(record.caught, [], hint=hint,
                       name=checks.both(f"{where}: avisos", f"{where}: warnings"))


def _check_moved(record: _AmpStep, hint) -> None:
    wanted = torch.device(record.device)
    checks.check_equal([None if d is None else torch.device(d) for d in record.moves], [wanted, wanted],
                       hint=hint, name=checks.both(f"{record.where}: a dónde se movieron inputs y targets",
                                                   f"{record.where}: where inputs and targets were moved"))


def _optimizer_step(record: _AmpStep, hint) -> checks.StepRecord:
    where = record.where
    checks.check_true(record.optimizer_step is not None, hint=hint,
                      expected=checks.both("un paso del optimizador", "one optimizer step"),
                      got=checks.both("ninguno", "none"),
                      name=checks.both(f"{where}: pasos del optimizador", f"{where}: optimizer steps"))
    for i, grad in enumerate(record.optimizer_step.grads):
        checks.check_true(grad is not None, expected=checks.both("un gradiente", "a gradient"), got="None",
                          hint=hint,
                          name=checks.both(f"{where}: .grad del parámetro {i} en el paso del optimizador",
                                           f"{where}: .grad of parameter {i} at the optimizer step"))
    return record.optimizer_step


def _check_step_used(record: _AmpStep, expected_grads, hint) -> None:
    """The optimizer step saw ``expected_grads`` (real size) and SGD moved the weights by them."""
    where = record.where
    step = _optimizer_step(record, hint)
    for i, (grad, want) in enumerate(zip(step.grads, expected_grads, strict=True)):
        checks.check_close(grad, want, rtol=1e-3, atol=1e-6, hint=hint,
                           name=checks.both(
                               f"{where}: gradiente del parámetro {i} en el paso del optimizador, frente al "
                               "de la pérdida de este lote",
                               f"{where}: gradient of parameter {i} at the optimizer step, vs that of this "
                               "batch's loss"))
        checks.check_close(record.after[i], step.before[i] - _LEARNING_RATE * grad, hint=hint,
                           name=checks.both(f"{where}: parámetro {i} tras el paso (SGD)",
                                            f"{where}: parameter {i} after the step (SGD)"))


def _check_returned_loss(record: _AmpStep, loss: _LossCall, hint) -> None:
    name = checks.both(f"{record.where}: pérdida devuelta (sin escalar)",
                       f"{record.where}: returned loss (unscaled)")
    checks.check_type(record.returned, float, name=name, hint=hint)
    checks.check_close(record.returned, loss.value, rtol=1e-5, atol=1e-7, name=name, hint=hint)


@checks.keeps_random_state
def check_update(record: _AmpStep) -> None:
    """Batch moved; the step used this batch's own gradients (zeroed before); a float comes back."""
    hint = HINTS["amp_train_step_update"]
    _check_moved(record, hint)
    loss = _one_loss_call(record, hint)
    _check_step_used(record, loss.grads, hint)
    _check_returned_loss(record, loss, hint)


def _scaler_calls_problem(calls: list, expected: list) -> dict | None:
    """What is wrong with the scaler's calls, in words that name none of the calls it lacks nor
    their order (the exercise is to work them out); None when they are right."""
    if calls == expected:
        return None
    extra = sorted(set(calls) - set(expected))
    if extra:
        return checks.both(f"una llamada que este paso no hace: {', '.join(extra)}",
                           f"a call this step does not make: {', '.join(extra)}")
    if len(calls) > len(expected):
        return checks.both("una llamada hecha más de una vez", "a call made more than once")
    if set(calls) != set(expected):
        return checks.both("falta una de las llamadas del paso", "one of the step's calls is missing")
    return checks.both("las llamadas de este paso, en otro orden", "this step's calls, in another order")


def _check_scaler_calls(record: _AmpStep) -> None:
    """The scaler got its calls in the order of section 6, unscaling only when clipping. A failure
    says what is wrong, never the expected sequence: a student could copy it."""
    __tracebackhide__ = True
    clipping = record.max_norm is not None
    hint = HINTS["amp_train_step_clipping" if clipping else "amp_train_step_scaler"]
    expected = ["scale", "unscale_", "step", "update"] if clipping else ["scale", "step", "update"]
    problem = _scaler_calls_problem(record.scaler_calls, expected)
    if problem:
        checks.fail(say(checks.both(f"{record.where}: llamadas al escalador, en orden",
                                    f"{record.where}: calls of the scaler, in order")),
                    say(problem),
                    say(checks.both("las del paso de la sección 6, en su orden",
                                    "those of section 6's step, in their order")),
                    checks.describe(record.scaler_calls), hint=hint)


@checks.keeps_random_state
def check_scaled_step(record: _AmpStep) -> None:
    """A good step: real-size gradients reach the optimizer, the scale stays, the loss comes back unscaled."""
    hint = HINTS["amp_train_step_scaler"]
    _check_scaler_calls(record)
    loss = _one_loss_call(record, hint)
    _check_step_used(record, loss.grads, hint)
    checks.check_close(record.scale_after, record.scale_before, hint=hint,
                       name=checks.both(f"{record.where}: escala tras un paso bueno",
                                        f"{record.where}: scale after a good step"))
    _check_returned_loss(record, loss, hint)


@checks.keeps_random_state
def check_skipped_step(record: _AmpStep) -> None:
    """Gradients that overflow: the weights do not move and the scale is halved."""
    hint = HINTS["amp_train_step_scaler"]
    where = record.where
    _check_scaler_calls(record)
    for i, (before, after) in enumerate(zip(record.before, record.after, strict=True)):
        checks.check_close(after, before, rtol=0.0, atol=0.0, hint=hint,
                           name=checks.both(
                               f"{where}: parámetro {i} (gradientes inf: el paso debía saltarse)",
                               f"{where}: parameter {i} (inf gradients: the step should be skipped)"))
    checks.check_close(record.scale_after, record.scale_before / 2, hint=hint,
                       name=checks.both(f"{where}: escala tras un paso saltado",
                                        f"{where}: scale after a skipped step"))


@checks.keeps_random_state
def check_clipped_step(record: _AmpStep) -> None:
    """The optimizer sees the gradients at their real size, clipped to ``max_norm`` as a whole."""
    hint = HINTS["amp_train_step_clipping"]
    _check_scaler_calls(record)
    own = _one_loss_call(record, hint).grads
    own_norm = torch.cat([g.flatten() for g in own]).norm().item()
    shrink = min(1.0, record.max_norm / (own_norm + 1e-6))
    seen = _optimizer_step(record, hint).grads
    checks.check_close(torch.cat([g.flatten() for g in seen]).norm().item(), own_norm * shrink, rtol=1e-3,
                       atol=1e-7, hint=hint,
                       name=checks.both(f"{record.where}: norma de los gradientes en el paso del optimizador",
                                        f"{record.where}: norm of the gradients at the optimizer step"))
    _check_step_used(record, [g * shrink for g in own], hint)


@checks.keeps_random_state
def check_amp_train_step_autocast(amp_train_step) -> None:
    for record in run_amp_steps(amp_train_step, seed=1601, dtype=torch.bfloat16, device=torch.device("cpu")):
        check_autocast(record)


@checks.keeps_random_state
def check_amp_train_step_update(amp_train_step) -> None:
    for record in run_amp_steps(amp_train_step, seed=1602, dtype=torch.bfloat16, device="cpu", parcels=True):
        check_update(record)


@checks.keeps_random_state
def check_amp_train_step_scaler(amp_train_step) -> None:
    for record in run_amp_steps(amp_train_step, seed=1603, dtype=torch.bfloat16, device=torch.device("cpu"),
                                scaler_kwargs={"init_scale": 2.0 ** 10}):
        check_scaled_step(record)
    (overflowed,) = run_amp_steps(amp_train_step, seed=1604, dtype=torch.bfloat16, steps=1, overflow=True,
                                  scaler_kwargs={"init_scale": 2.0 ** 10})
    check_skipped_step(overflowed)


@checks.keeps_random_state
def check_amp_train_step_clipping(amp_train_step) -> None:
    for record in run_amp_steps(amp_train_step, seed=1605, dtype=torch.bfloat16, device=torch.device("cpu"),
                                max_norm=0.05, scaler_kwargs={"init_scale": 2.0 ** 10}):
        check_clipped_step(record)


# ------------------------------------------------------------------------------------ skipped_steps
def scales_of_a_run(generator, steps: int) -> tuple[list, list]:
    """The scales a real CPU GradScaler reports when random steps get infinite gradients.

    Returns ``(scales, overflowed)``: the scale before the first step and after each one, and the
    indices of the steps whose gradients overflowed.
    """
    weight = nn.Parameter(torch.ones(3))
    sgd = torch.optim.SGD([weight], lr=0.01)
    init_scale = 2.0 ** int(torch.randint(4, 17, (), generator=generator))
    scaling = torch.amp.GradScaler("cpu", init_scale=init_scale,
                                   growth_interval=int(torch.randint(1, 4, (), generator=generator)))
    scales, overflowed = [scaling.get_scale()], []
    for step in range(steps):
        bad = bool(torch.rand((), generator=generator) < 0.35)
        sgd.zero_grad()
        scaling.scale((weight * (math.inf if bad else 1.0)).sum()).backward()
        scaling.step(sgd)
        scaling.update()
        scales.append(scaling.get_scale())
        if bad:
            overflowed.append(step)
    return scales, overflowed


@checks.keeps_random_state
def check_skipped(skipped_steps, scales, expected) -> None:
    hint = HINTS["skipped_steps"]
    label = f"skipped_steps({scales})"
    checks.check_equal(checks.check_runs(skipped_steps, list(scales), name=label, hint=hint), expected,
                       name=label, hint=hint)


@checks.keeps_random_state
def check_skipped_steps(skipped_steps) -> None:
    """A log worked out by hand, a disabled scaler's, one with no step, and a real scaler's run."""
    check_skipped(skipped_steps, [1024.0, 1024.0, 512.0, 512.0, 1024.0, 512.0, 256.0], [1, 4, 5])
    check_skipped(skipped_steps, [1.0, 1.0, 1.0, 1.0], [])
    check_skipped(skipped_steps, [65536.0], [])
    check_skipped(skipped_steps, *scales_of_a_run(checks.fresh_generator(), 12))


# -------------------------------------------------------------------- decided by the judge
# When a class is graded, these exercises' points also need the student's function to return what
# the reference returns on inputs the judge draws from the class's secret (graders/judge/calls.py).
def _shapes_and_dtypes(generator):
    dtypes = (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.float64, torch.int64,
              torch.complex64, torch.bool)
    return [(tuple(int(v) for v in torch.randint(1, 50, (rank,), generator=generator)), dtype)
            for rank, dtype in zip((1, 2, 3, 4, 2, 1, 2, 3), dtypes, strict=True)]


def _magnitudes(generator):
    """float32 values from 1e-10 to 1e6 in size, either sign, and zeros: every fate in fp16."""
    exponents = torch.empty(40).uniform_(-10, 6, generator=generator)
    signs = torch.randint(0, 2, (40,), generator=generator) * 2 - 1
    values = signs * torch.pow(10.0, exponents)
    values[torch.randint(0, 40, (3,), generator=generator)] = 0.0
    return [(values.float().reshape(5, 8),)]


def _scale_logs(generator):
    """Loss-scale logs as a GradScaler writes them: kept, halved after an overflow, doubled."""
    logs = []
    for length in (int(v) for v in torch.randint(2, 20, (3,), generator=generator)):
        scale, log = 65536.0, []
        for move in torch.randint(0, 4, (length,), generator=generator).tolist():
            log.append(scale)
            scale = scale / 2 if move == 0 else scale * 2 if move == 1 else scale
        logs.append((log,))
    return logs


# ----------------------------------------------------------------- judged outcomes: time_per_call
def _draw_int(generator, low: int, high: int) -> int:
    """An int in ``[low, high)`` drawn from ``generator``."""
    return int(torch.randint(low, high, (), generator=generator))


def _timed_calls(generator, count: int) -> list:
    """``count`` durations of timed calls, in seconds, from 1 ms to 0.2 s (4 decimals)."""
    return [round(t, 4) for t in (0.001 + 0.2 * torch.rand(count, generator=generator,
                                                         dtype=torch.float64)).tolist()]


def _a_float_or_its_type(value):
    """A float as itself (``time_per_call`` returns one), anything else as the name of its type."""
    return float(value) if isinstance(value, float) else f"not a float: {type(value).__name__}"


def time_per_call_median_outcome(time_per_call, timed: list, warmup: int) -> tuple:
    """``time_per_call(fn, "cpu", repeats=len(timed), warmup=warmup)`` on the simulated clock: the
    warm-up calls take 60 s each, the timed ones ``timed``; what it returned (a float, or its type's
    name) and how many times it called ``fn``."""
    run = _watch_time_per_call("check_median_of", time_per_call, "cpu",
                               durations=[60.0] * warmup + list(timed), warmup=warmup,
                               hint=HINTS["time_per_call"])
    return _a_float_or_its_type(run.returned), run.events.count("call")


def _timing_medians(generator):
    """Odd and even counts of timed calls, a slow one among them, after warm-ups of 60 s each."""
    drawn = []
    for count in (_draw_int(generator, 2, 4) * 2 + 1, _draw_int(generator, 2, 4) * 2,
                  _draw_int(generator, 3, 8)):
        timed = _timed_calls(generator, count)
        timed[_draw_int(generator, 0, count)] = round(0.5 + float(torch.rand((), generator=generator)), 4)
        drawn.append((timed, _draw_int(generator, 1, 4)))
    return drawn


def time_per_call_synchronizes_outcome(time_per_call, device, timed: list, warmup: int) -> dict:
    """``time_per_call(fn, device, ...)`` on the simulated clock with ``torch.cuda``'s waits and events
    spied: what it returned (a float, or its type's name) and what happened, in order (``"call"``,
    ``"sync"``, ``"clock"``, ``("record", k)``, ``("wait", k)``, ``("elapsed", j, k)``)."""
    run = _watch_time_per_call("check_fenced_by_syncs", time_per_call, device,
                               durations=[60.0] * warmup + list(timed), warmup=warmup,
                               hint=HINTS["time_per_call_sync"])
    return {"returned": _a_float_or_its_type(run.returned), "events": list(run.events)}


def time_per_call_synchronizes_accept(got, want, args) -> bool:
    """Right ways of timing differ in their events (clock and synchronize, or CUDA events): judged
    by the properties the kernel's check asks, as data. Every call made; on CUDA each timed call
    fenced by waits, elsewhere no wait and no event; a time in seconds within the timed calls'."""
    device, timed, warmup = args
    try:
        if not (type(got) is dict and set(got) == {"returned", "events"}):
            return False
        returned, events = got["returned"], got["events"]
        if not (type(events) is list and type(returned) is float
                and events.count("call") == warmup + len(timed)
                and min(timed) - 1e-9 <= returned <= max(timed) + 1e-9):
            return False
        if torch.device(device).type == "cuda":
            calls = [i for i, event in enumerate(events) if event == "call"][warmup:]
            return all(_timed_by_clock(events, i) or _timed_by_events(events, i) for i in calls)
        return "sync" not in events and not any(isinstance(event, tuple) for event in events)
    except Exception:       # anything the kernel sent that is not of the outcome's shape
        return False


def _timing_devices(generator):
    """A CUDA device never spelled "cuda" alone, another in any spelling, and one that is not CUDA."""
    spelled = ["cuda:0", "cuda:1", torch.device("cuda"), torch.device("cuda", 1)]
    other = ["cpu", torch.device("cpu"), "meta"]
    devices = [spelled[_draw_int(generator, 0, 4)], ["cuda", *spelled][_draw_int(generator, 0, 5)],
               other[_draw_int(generator, 0, 3)]]
    return [(device, [round(0.01 + 0.06 * t, 4) for t in torch.rand(_draw_int(generator, 2, 5),
                                                                   generator=generator).tolist()],
             _draw_int(generator, 0, 3)) for device in devices]


# ------------------------------------------------------------------ judged outcomes: fp16_fate, pick
def fp16_fate_shape_outcome(fp16_fate, values: torch.Tensor, dims: tuple):
    """``fp16_fate`` of ``values`` permuted by ``dims`` (not contiguous): its fates, shape and dtype
    as returned."""
    return fp16_fate(values.permute(dims))


def _fate_grids(generator):
    """Values of every fate in grids of 2 to 4 dimensions, handed over permuted."""
    drawn = []
    for rank in (2, 3, 4):
        shape = [_draw_int(generator, 2, 5) for _ in range(rank)]
        values, _ = _values_with_known_fates(math.prod(shape), generator)
        dims = tuple(torch.randperm(rank, generator=generator).tolist())
        if dims == tuple(range(rank)):
            dims = dims[::-1]
        drawn.append((values.reshape(shape), dims))
    return drawn


def pick_amp_dtype_outcome(pick_amp_dtype, cases: list) -> list:
    """For each ``(device, bf16_supported, gpu)``: ``pick_amp_dtype(device, bf16_supported=...)`` on a
    simulated machine of ``gpu`` (a key of ``_GPUS``, a list of them by index, or None),
    ``amp.autocast_supported`` off. Gives the dtype (or
    ``"raises <type>"``, or ``"returned <type>"``) and, when ``bf16_supported`` was given, whether the
    GPU was asked about bf16 all the same (else None)."""
    picked = []
    for device, told, gpu in cases:
        simulated = _SimulatedGpu(gpu)
        with checks.stand_ins(_CUDA_PROBES, simulated.stand_in, pick_amp_dtype), \
                checks.shortcuts_off(SHORTCUTS["check_pick"], pick_amp_dtype):
            try:
                got = pick_amp_dtype(device, bf16_supported=told)
                got = got if type(got) is torch.dtype else f"returned {type(got).__name__}"
            except Exception as error:
                got = f"raises {type(error).__name__}"
        picked.append((got, None if told is None else bool(simulated.asked)))
    return picked


def _devices_to_pick_for(generator):
    """Every kind of case, each device spelled a random way, shuffled into two calls: CPU, MPS, CUDA
    told True on a GPU that only emulates bf16 and told False on one with it native, CUDA asking a GPU
    with native bf16 and one without, each GPU of a machine with one of each, and a device type with
    no mixed precision."""
    def spelling(kind: str):
        index = _draw_int(generator, 0, 2)
        indexed = [f"cuda:{index}", torch.device("cuda", index)] * (kind == "cuda")
        ways = [kind, torch.device(kind), *indexed]
        return ways[_draw_int(generator, 0, len(ways))]

    old = ["T4", "V100"][_draw_int(generator, 0, 2)]
    mixed = [old, "A100"][::[1, -1][_draw_int(generator, 0, 2)]]
    cases = [(spelling("cpu"), None, None), (spelling("mps"), None, None),
             (spelling("cuda"), True, old), (spelling("cuda"), False, "A100"),
             (spelling("cuda"), None, "A100"), (spelling("cuda"), None, old),
             (["meta", "xla"][_draw_int(generator, 0, 2)], None, None),
             *[([f"cuda:{index}", torch.device("cuda", index)][_draw_int(generator, 0, 2)], None, mixed)
               for index in (0, 1)]]
    cases = [cases[i] for i in torch.randperm(len(cases), generator=generator).tolist()]
    return [(cases[:4],), (cases[4:],)]


# ------------------------------------------------------------------ judged outcomes: amp_train_step
# Each grade cell's outcome gives the data of its own behaviour only, so that a mistake costs the
# points of that behaviour as in the kernel's checks: the autocast state and dtypes (no weights);
# the step in float32 with a scaler switched off (moves, weights, loss returned); the scaler's calls,
# scale, weights and loss in float32 with a scaler on; the same under clipping, no loss. A float32
# step with a real GradScaler on the CPU sees every scaler call in its weights and scale, and no
# autocast mistake reaches it.
_LOSSES = {"cross_entropy": F.cross_entropy, "mse": F.mse_loss}


def _loss_or_its_type(value):
    """The loss returned, as a float64 tensor (so the tolerance applies), or its type's name."""
    return torch.tensor(float(value), dtype=torch.float64) if isinstance(value, float) else \
        f"not a float: {type(value).__name__}"


def _device_name(device) -> str:
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError):
        return f"not a device: {type(device).__name__}"


def amp_train_step_autocast_outcome(amp_train_step, seed: int, widths: tuple, dtype, loss: str,
                                    steps: int) -> list:
    """Per step (a scaler switched off): in each forward pass, (autocast on, its dtype, the dtype of
    the first linear layer's output); in each call of the loss, (autocast on, its dtype); the
    warnings raised."""
    records = run_amp_steps(amp_train_step, seed=seed, dtype=dtype, base=_LOSSES[loss], widths=tuple(widths),
                            steps=steps)
    return [{"forward": [entry[1:] for entry in record.log if isinstance(entry, tuple)],
             "loss": [call.autocast for call in record.loss_calls], "warnings": record.caught}
            for record in records]


def amp_train_step_update_outcome(amp_train_step, seed: int, widths: tuple, loss: str, steps: int) -> list:
    """Per step in float32, a scaler switched off, the batch's tensors reaching the model only through
    ``.to``: where they were moved, the loss returned, the weights after the step."""
    records = run_amp_steps(amp_train_step, seed=seed, dtype=torch.float32, base=_LOSSES[loss],
                            widths=tuple(widths), steps=steps, parcels=True)
    return [{"moved": [_device_name(device) for device in record.moves],
             "loss": _loss_or_its_type(record.returned), "weights": record.after} for record in records]


def amp_train_step_scaler_outcome(amp_train_step, seed: int, widths: tuple, loss: str, scaler: dict,
                                  steps: int, overflow: bool) -> list:
    """Per step in float32 with a GradScaler(``scaler``) on, its gradients overflowing or not: the
    scaler's calls in order (unscale_ left out: harmless without clipping), its scale, the loss
    returned and the weights after the step."""
    records = run_amp_steps(amp_train_step, seed=seed, dtype=torch.float32, base=_LOSSES[loss],
                            widths=tuple(widths), steps=steps, overflow=overflow, scaler_kwargs=dict(scaler))
    return [{"calls": record.scaler_calls, "scale": record.scale_after,
             "loss": _loss_or_its_type(record.returned), "weights": record.after} for record in records]


def amp_train_step_clipping_outcome(amp_train_step, seed: int, widths: tuple, loss: str, scaler: dict,
                                    max_norm: float, steps: int) -> list:
    """Per step in float32 with a GradScaler(``scaler``) on and ``max_norm``: the scaler's calls in
    order (unscale_ included), its scale and the weights after the step."""
    records = run_amp_steps(amp_train_step, seed=seed, dtype=torch.float32, base=_LOSSES[loss],
                            widths=tuple(widths), steps=steps, max_norm=max_norm, scaler_kwargs=dict(scaler))
    return [{"calls": record.scaler_calls, "scale": record.scale_after, "weights": record.after}
            for record in records]


def _amp_model(generator) -> tuple:
    """A seed for the model and its batches, the widths of its layers, the loss's name."""
    return (_draw_int(generator, 0, 2**31), tuple(_draw_int(generator, 3, 10) for _ in range(3)),
            ["cross_entropy", "mse"][_draw_int(generator, 0, 2)])


def _scaler_settings(generator, low: int = 4, high: int = 17) -> dict:
    """A GradScaler's settings: a scale of 2^low to 2^(high - 1), that grows after 1 to 3 good steps."""
    return {"init_scale": 2.0 ** _draw_int(generator, low, high),
            "growth_interval": _draw_int(generator, 1, 4)}


def _autocast_runs(generator):
    """A step or two under bf16, float32 (autocast off) and fp16, on models of random widths."""
    return [(*_amp_model(generator)[:2], dtype, loss, _draw_int(generator, 1, 3))
            for dtype, loss in ((torch.bfloat16, "cross_entropy"), (torch.float32, "mse"),
                                (torch.float16, ["cross_entropy", "mse"][_draw_int(generator, 0, 2)]))]


def _update_runs(generator):
    """Two to three steps on each of two models: a step that reuses the last one's gradients shows."""
    return [(*_amp_model(generator), _draw_int(generator, 2, 4)) for _ in range(2)]


def _scaler_runs(generator):
    """Good steps with a scale of 2^4 to 2^16 (an unscaled step shows), good steps with a scale of 1
    to 4 (gradients a step forgot to zero weigh in the next one), steps whose gradients overflow."""
    return [(*_amp_model(generator), _scaler_settings(generator, *exponents), steps, overflow)
            for exponents, steps, overflow in (((4, 17), _draw_int(generator, 2, 4), False),
                                               ((0, 3), 2, False),
                                               ((4, 17), _draw_int(generator, 1, 3), True))]


def _clipping_runs(generator):
    """A scale of 1 or 2 and a max_norm of 0.05 to 0.2 (these models' gradient norms are 0.2 to 1),
    where gradients a step forgot to zero weigh in the next step's clipping; a scale of 2^8 to 2^14
    and a max_norm of 0.003 to 0.013, where clipping the scaled gradients leaves them far too small."""
    return [(*_amp_model(generator), _scaler_settings(generator, *exponents),
             round(10 ** (low + 0.6 * float(torch.rand((), generator=generator))), 5), 2)
            for exponents, low in (((0, 2), -1.3), ((8, 15), -2.5))]


_TRAINED = {"rtol": 1e-4, "atol": 1e-6}    # weights after a few SGD steps: float noise, no more

JUDGED = [
    checks.JudgedCall("test_time_per_call_median", "time_per_call", "time_per_call", _timing_medians,
                      outcome=time_per_call_median_outcome),
    checks.JudgedCall("test_time_per_call_synchronizes", "time_per_call", "time_per_call", _timing_devices,
                      outcome=time_per_call_synchronizes_outcome, accept=time_per_call_synchronizes_accept),
    checks.JudgedCall("test_tensor_bytes", "tensor_bytes", "tensor_bytes", _shapes_and_dtypes),
    checks.JudgedCall("test_fp16_fate_values", "fp16_fate", "fp16_fate", _magnitudes),
    checks.JudgedCall("test_fp16_fate_shape", "fp16_fate", "fp16_fate", _fate_grids,
                      outcome=fp16_fate_shape_outcome),
    checks.JudgedCall("test_pick_amp_dtype", "pick_amp_dtype", "pick_amp_dtype", _devices_to_pick_for,
                      outcome=pick_amp_dtype_outcome),
    checks.JudgedCall("test_amp_train_step_autocast", "amp_train_step", "amp_train_step", _autocast_runs,
                      outcome=amp_train_step_autocast_outcome),
    checks.JudgedCall("test_amp_train_step_update", "amp_train_step", "amp_train_step", _update_runs,
                      _TRAINED, outcome=amp_train_step_update_outcome),
    checks.JudgedCall("test_amp_train_step_scaler", "amp_train_step", "amp_train_step", _scaler_runs,
                      _TRAINED, outcome=amp_train_step_scaler_outcome),
    checks.JudgedCall("test_amp_train_step_clipping", "amp_train_step", "amp_train_step", _clipping_runs,
                      _TRAINED, outcome=amp_train_step_clipping_outcome),
    checks.JudgedCall("test_skipped_steps", "skipped_steps", "skipped_steps", _scale_logs),
]
