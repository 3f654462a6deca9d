"""Lesson 06's visible checks and harnesses: a correct answer passes, a typical mistake fails with
expected/got/hint, the spies record what they should (seen through the checks and ``run_amp_steps``),
and course helpers that an exercise duplicates are switched off inside the checks and back on
afterwards."""

import math
import statistics
import time
from types import SimpleNamespace

import pytest
import torch
from check_messages import failure
from lesson_files import read_solution
from torch.cuda import is_bf16_supported as bf16_imported_early
from torch.nn import functional as F
from wrong_answers import defined

import course
from course import amp, memory, timing
from course.timing import time_calls
from graders.checks import CheckFailed
from graders.judge import calls, wire
from graders.judge.wire import Refused
from graders.lesson_checks import mixed_precision as lesson
from graders.lessons import solution_path

pytestmark = pytest.mark.usefixtures("english")


def _on_one_step(check, **run):
    """A check of one recorded step: the answer runs once under the spies, and ``check`` reads it."""
    return lambda answer: check(lesson.run_amp_steps(answer, seed=0, dtype=torch.float32, steps=1, **run)[0])


# How test_harness calls each check with a given answer.
CHECK_CALLS = {
    "check_time_per_call_median": lesson.check_time_per_call_median,
    "check_median_of": lambda answer: lesson.check_median_of(answer, warmup=0, timed=[0.1], expected=0.1),
    "check_time_per_call_synchronizes": lesson.check_time_per_call_synchronizes,
    "check_fenced_by_syncs": lambda answer: lesson.check_fenced_by_syncs(answer, "cuda:0", repeats=1,
                                                                         warmup=0),
    "check_never_syncs": lambda answer: lesson.check_never_syncs(answer, "cpu", repeats=1, warmup=0),
    "check_tensor_bytes": lesson.check_tensor_bytes,
    "check_bytes": lambda answer: lesson.check_bytes(answer, (2, 3), torch.float16, 12),
    "check_fp16_fate_values": lesson.check_fp16_fate_values,
    "check_fp16_fate_shape": lesson.check_fp16_fate_shape,
    "check_fate_of": lambda answer: lesson.check_fate_of(answer, torch.tensor([1.0]), torch.tensor([0]),
                                                         name="fp16_fate(torch.tensor([1.0]))"),
    "check_pick_amp_dtype": lesson.check_pick_amp_dtype,
    "check_pick": lambda answer: lesson.check_pick(answer, "cpu", torch.bfloat16),
    "check_pick_raises": lambda answer: lesson.check_pick_raises(answer, "meta"),
    "check_amp_train_step_autocast": lesson.check_amp_train_step_autocast,
    "check_amp_train_step_update": lesson.check_amp_train_step_update,
    "check_amp_train_step_scaler": lesson.check_amp_train_step_scaler,
    "check_amp_train_step_clipping": lesson.check_amp_train_step_clipping,
    "check_autocast": _on_one_step(lesson.check_autocast),
    "check_update": _on_one_step(lesson.check_update),
    "check_scaled_step": _on_one_step(lesson.check_scaled_step),
    "check_skipped_step": _on_one_step(lesson.check_skipped_step, overflow=True),
    "check_clipped_step": _on_one_step(lesson.check_clipped_step, max_norm=1.0),
    "check_skipped_steps": lesson.check_skipped_steps,
    "check_skipped": lambda answer: lesson.check_skipped(answer, [2.0, 1.0], [0]),
    "check_concepts": lesson.check_concepts,
}


# ------------------------------------------------------------------------------------ time_per_call
def _timer(*, warmup_timed=False, sync_before=True, sync_after=True, sync_everywhere=False,
           middle=statistics.median):
    """A ``time_per_call`` written the right way, or with one of the usual mistakes."""
    def time_per_call(fn, device, repeats=10, warmup=2):
        on_cuda = torch.device(device).type == "cuda"

        def wait(wanted):
            if wanted and (on_cuda or sync_everywhere):
                torch.cuda.synchronize(device)

        times = []
        for _ in range(warmup):
            start = time.perf_counter()
            fn()
            if warmup_timed:
                times.append(time.perf_counter() - start)
        for _ in range(repeats):
            wait(sync_before)
            start = time.perf_counter()
            fn()
            wait(sync_after)
            times.append(time.perf_counter() - start)
        return middle(times)
    return time_per_call


def test_the_timing_harness_records_calls_waits_and_clock_readings_in_order():
    lesson.check_median_of(_timer(), warmup=1, timed=[0.25, 0.5], expected=0.375)   # on the simulated clock
    lesson.check_fenced_by_syncs(_timer(), "cuda:0", repeats=2, warmup=1)
    failure(lesson.check_fenced_by_syncs, _timer(sync_before=False), "cuda:0", repeats=2, warmup=1,
            says=["order of events", "got: clock call clock call sync clock clock call sync clock\n"])
    assert time.perf_counter() > 0 and torch.cuda.synchronize.__module__ == "torch.cuda"


def test_time_per_call_median():
    lesson.check_time_per_call_median(_timer())
    failure(lesson.check_time_per_call_median, _timer(warmup_timed=True),
            says=["(each warm-up call takes 60 s): the values differ"])
    failure(lesson.check_time_per_call_median, _timer(middle=lambda times: sum(times) / len(times)),
            says=["with timed calls of", "the values differ"])
    failure(lesson.check_time_per_call_median, _timer(middle=lambda times: torch.tensor(times).median()),
            says=["the type is not the expected one", "expected: float", "got: tensor("])


def test_time_per_call_synchronizes():
    lesson.check_time_per_call_synchronizes(_timer())
    for mistake in (dict(sync_before=False), dict(sync_after=False),
                    dict(sync_before=False, sync_after=False)):
        failure(lesson.check_time_per_call_synchronizes, _timer(**mistake),
                says=["order of events: is not right",
                      "expected: sync clock call sync clock for every timed call"])
    failure(lesson.check_time_per_call_synchronizes, _timer(sync_everywhere=True),
            says=["'cpu', repeats=3, warmup=1): calls of torch.cuda.synchronize", "expected: 0 (int)"])


def test_the_hidden_timing_checks_pass_the_right_answer_on_other_devices(answer=None):
    answer = answer or _timer()
    lesson.check_median_of(answer, warmup=0, timed=[0.3, 0.1, 0.2, 0.9], expected=0.25)
    lesson.check_fenced_by_syncs(answer, torch.device("cuda", 1), repeats=2, warmup=0)
    lesson.check_never_syncs(answer, "meta", repeats=2, warmup=2)


def test_course_timing_is_switched_off_inside_the_check_and_back_on_after():
    def through_the_helper(fn, device, repeats=10, warmup=2):
        return statistics.median(time_calls(fn, device=device, repeats=repeats, warmup=warmup))

    def through_the_module(fn, device, repeats=10, warmup=2):
        return timing.time_per_call(fn, device=device, repeats=repeats, warmup=warmup)

    def through_another_course_module(fn, device, repeats=10, warmup=2):
        memory.synchronize(device)
        return 0.0

    failure(lesson.check_time_per_call_median, through_the_helper,
            says=["ShortcutUsed: time_calls is not available in this exercise"])
    failure(lesson.check_time_per_call_median, through_the_module,
            says=["ShortcutUsed: course.timing.time_per_call is not available in this exercise"])
    failure(lesson.check_time_per_call_synchronizes, through_another_course_module,
            says=["ShortcutUsed: synchronize is not available in this exercise"])
    assert time_calls is timing.time_calls                        # this module's name is back
    assert memory.synchronize is timing.synchronize               # and the course's own aliases
    assert timing.time_calls(lambda: None, device="cpu", repeats=2, warmup=0)[0] >= 0.0


# Right answers written other ways: the clock however it was imported, and CUDA events on CUDA.
_ANSWER = """
def time_per_call(fn, device, repeats=10, warmup=2):
    on_cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if on_cuda:
            SYNC(device)
        start = CLOCK()
        fn()
        if on_cuda:
            SYNC(device)
        times.append((CLOCK() - start) SCALE)
    return statistics.median(times)
"""

# How the clock and the wait may be reached: (the imports, the clock, the wait, the scale to seconds).
RIGHT_TIMERS = {
    "time.perf_counter": ("import time", "time.perf_counter", "torch.cuda.synchronize", ""),
    "from time import perf_counter": ("from time import perf_counter", "perf_counter",
                                      "torch.cuda.synchronize", ""),
    "import time as t": ("import time as t", "t.perf_counter", "torch.cuda.synchronize", ""),
    "from time import perf_counter as tick": ("from time import perf_counter as tick", "tick",
                                              "torch.cuda.synchronize", ""),
    "perf_counter_ns": ("from time import perf_counter_ns", "perf_counter_ns", "torch.cuda.synchronize",
                        "/ 1e9"),
    "timeit.default_timer": ("import timeit", "timeit.default_timer", "torch.cuda.synchronize", ""),
    "from torch.cuda import synchronize": ("import time\nfrom torch.cuda import synchronize",
                                           "time.perf_counter", "synchronize", ""),
}


def _notebook_answer(source: str, imports: str = ""):
    """``time_per_call`` defined in a namespace of its own, as a notebook cell would define it."""
    namespace = {"torch": torch, "statistics": statistics}
    exec(compile(imports + "\n" + source, "<notebook>", "exec"), namespace)
    return namespace["time_per_call"]


def _clock_answer(imports, clock, sync, scale):
    return _notebook_answer(_ANSWER.replace("CLOCK", clock).replace("SYNC", sync).replace("SCALE", scale),
                            imports)


@pytest.mark.parametrize("form", sorted(RIGHT_TIMERS))
def test_every_way_to_reach_the_clock_earns_full_marks_visible_and_hidden(form):
    answer = _clock_answer(*RIGHT_TIMERS[form])
    lesson.check_time_per_call_median(answer)
    lesson.check_time_per_call_synchronizes(answer)
    test_the_hidden_timing_checks_pass_the_right_answer_on_other_devices(answer)
    lesson.check_median_of(answer, warmup=3, timed=[0.4, 0.1, 0.2, 0.9, 0.3], expected=0.3)
    lesson.check_fenced_by_syncs(answer, "cuda:0", repeats=4, warmup=1)
    assert time.perf_counter() > 0 and torch.cuda.synchronize.__module__ == "torch.cuda"


def test_a_clock_imported_by_name_is_given_back_after_the_check():
    answer = _clock_answer(*RIGHT_TIMERS["from time import perf_counter"])
    lesson.check_time_per_call_median(answer)
    assert answer.__globals__["perf_counter"] is time.perf_counter


def test_wrong_answers_fail_whatever_clock_they_read():
    wrong_median = _clock_answer(*RIGHT_TIMERS["from time import perf_counter"]).__globals__
    mean = staticmethod(lambda times: sum(times) / len(times))
    wrong_median["statistics"] = type("Mean", (), {"median": mean})
    failure(lesson.check_time_per_call_median, wrong_median["time_per_call"],
            says=["with timed calls of", "the values differ"])
    never_waits = _clock_answer("from time import perf_counter", "perf_counter", "(lambda device: None)", "")
    failure(lesson.check_time_per_call_synchronizes, never_waits,
            says=["order of events: is not right", "got: call call clock call clock clock"])
    milliseconds = _clock_answer("from time import perf_counter_ns", "perf_counter_ns",
                                 "torch.cuda.synchronize", "/ 1e6")
    failure(lesson.check_time_per_call_median, milliseconds, says=["the values differ"])
    failure(lesson.check_time_per_call_synchronizes, milliseconds,
            says=["the time returned, in seconds", "expected: 0.01 … 0.07"])


# CUDA events: accepted by design on CUDA devices. The check simulates torch.cuda.Event on the
# simulated clock (as it spies torch.cuda.synchronize), so these tests prove what the check accepts
# and refuses; they cannot prove, on a CPU, that the same code runs on a GPU.
_EVENTS_ANSWER = """
import time
from types import SimpleNamespace


def time_per_call(fn, device, repeats=10, warmup=2):
    on_cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn()
    if not on_cuda:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    BODY
"""

EVENT_BODIES = {
    "a pair per call, one synchronize at the end": """
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(repeats)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) / 1000 for start, end in pairs)""",
    "one pair reused, waiting for the end event": """
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)""",
    "torch.Event": """
    times = []
    for _ in range(repeats):
        start, end = torch.Event(device, enable_timing=True), torch.Event(device, enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)""",
}


@pytest.mark.parametrize("form", sorted(EVENT_BODIES))
def test_cuda_events_on_cuda_are_accepted_by_design(form):
    answer = _notebook_answer(_EVENTS_ANSWER.replace("    BODY", EVENT_BODIES[form]))
    lesson.check_time_per_call_median(answer)
    lesson.check_time_per_call_synchronizes(answer)
    test_the_hidden_timing_checks_pass_the_right_answer_on_other_devices(answer)
    lesson.check_fenced_by_syncs(answer, "cuda:0", repeats=4, warmup=1)
    assert torch.cuda.Event.__name__ == "Event" and torch.cuda.Event.__module__ == "torch.cuda.streams"


def test_cuda_events_used_wrongly_fail():
    read_before_waiting = EVENT_BODIES["one pair reused, waiting for the end event"].replace(
        "        end.synchronize()\n", "")
    failure(lesson.check_time_per_call_synchronizes,
            _notebook_answer(_EVENTS_ANSWER.replace("    BODY", read_before_waiting)),
            says=["order of events: is not right", "or with CUDA events",
                  "got: call call record(0) call record(1) elapsed(0,1) record(0)"])
    in_milliseconds = EVENT_BODIES["one pair reused, waiting for the end event"].replace(" / 1e3", "")
    failure(lesson.check_time_per_call_synchronizes,
            _notebook_answer(_EVENTS_ANSWER.replace("    BODY", in_milliseconds)),
            says=["the time returned, in seconds", "got: 40"])
    no_timing = EVENT_BODIES["one pair reused, waiting for the end event"].replace("enable_timing=True", "")
    failure(lesson.check_time_per_call_synchronizes,
            _notebook_answer(_EVENTS_ANSWER.replace("    BODY", no_timing)),
            says=["raised an exception", "elapsed_time needs two events created with enable_timing=True"])
    everywhere = _notebook_answer(_EVENTS_ANSWER.replace("    if not on_cuda:", "    if False:").replace(
        "    BODY", EVENT_BODIES["one pair reused, waiting for the end event"]))
    failure(lesson.check_time_per_call_synchronizes, everywhere,
            says=["'cpu', repeats=3, warmup=1): uses of CUDA events", "expected: 0 (int)"])


# ------------------------------------------------------------------------------------- tensor_bytes
def test_tensor_bytes():
    lesson.check_tensor_bytes(lambda shape, dtype: math.prod(shape) * dtype.itemsize)
    failure(lesson.check_tensor_bytes, lambda shape, dtype: len(shape) * dtype.itemsize,
            says=["tensor_bytes((1024, 1024), torch.float32): is not right", "expected: 4194304", "got: 8"])
    failure(lesson.check_tensor_bytes, lambda shape, dtype: math.prod(shape) * 4,
            says=["tensor_bytes((1024, 1024), torch.bfloat16): is not right", "expected: 2097152"])
    failure(lesson.check_tensor_bytes, lambda shape, dtype: math.prod(shape) * dtype.itemsize / 1,
            says=["the type is not the expected one", "expected: int", "got: 4194304.0 (float)"])

    def from_the_bits(shape, dtype):   # another way: each element's bits as finfo/iinfo tell them
        if dtype == torch.bool:
            return torch.Size(shape).numel()
        if dtype.is_complex:   # two floats
            return 2 * torch.Size(shape).numel() * torch.finfo(dtype).bits // 8
        info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
        return torch.Size(shape).numel() * info.bits // 8

    lesson.check_tensor_bytes(from_the_bits)
    wrong = defined(LESSON, "tensor_bytes", torch=torch, math=math)["tensor_bytes"]
    failure(lesson.check_tensor_bytes, wrong,
            says=["tensor_bytes((5, 3), torch.complex64): is not right", "expected: 120", "got: 60"])


def test_tensor_bytes_check_refuses_the_course_helper():
    def through_the_helper(shape, dtype):
        return amp.tensor_nbytes(torch.empty(shape, dtype=dtype, device="meta"))

    failure(lesson.check_tensor_bytes, through_the_helper, says=["empty made a tensor"])
    assert amp.tensor_nbytes(torch.zeros(2, dtype=torch.float16)) == 4


# ---------------------------------------------------------------------------------------- fp16_fate
def _fate(values):
    """A right answer, by a route of its own: fp16's limits compared with the stored values."""
    stored = values.half().float()
    info = torch.finfo(torch.float16)
    fate = torch.zeros(values.shape, dtype=torch.int64)
    fate = torch.where((stored.abs() < info.smallest_normal) & (stored != 0), 1, fate)
    fate = torch.where((stored == 0) & (values != 0), 2, fate)
    return torch.where(stored.abs() == math.inf, 3, fate)


def _fate_by_thresholds(values):
    """The usual mistake: thresholds on the original values, ignoring round-to-nearest."""
    small = values.abs()
    fate = torch.zeros(values.shape, dtype=torch.int64)
    fate[(small > 0) & (small < 2.0 ** -14)] = 1
    fate[(small > 0) & (small < 2.0 ** -24)] = 2
    fate[small > 65504] = 3
    return fate


def test_random_values_of_every_fate_are_classified_alike_by_a_right_answer():
    seen = []
    for _ in range(10):
        lesson.check_fp16_fate_values(lambda values: seen.append(values) or _fate(values))
    random_draws = seen[1::2]                     # each run: the row worked out by hand, then 40 at random
    assert all(values.dtype == torch.float32 for values in random_draws)
    assert set(torch.cat([_fate(values) for values in random_draws]).tolist()) == {0, 1, 2, 3}


def test_fp16_fate_values():
    lesson.check_fp16_fate_values(_fate)
    failure(lesson.check_fp16_fate_values, _fate_by_thresholds,
            says=["4e-08", "the values differ", "Mismatched elements: 3 / 16"])
    failure(lesson.check_fp16_fate_values, lambda values: _fate(values).clamp(max=2),
            says=["the values differ", "Mismatched elements: 4 / 16"])


def _fate_by_the_limits(values):
    """A right answer reasoned out with torch.finfo alone, never converting: the rounding bands at
    both ends of fp16's range taken into account (half a step past each limit)."""
    info, size = torch.finfo(torch.float16), values.abs()
    fate = torch.zeros(values.shape, dtype=torch.int64)
    fate[(size > 2.0 ** -25) & (size < info.smallest_normal - 2.0 ** -25)] = 1
    fate[(size > 0) & (size <= 2.0 ** -25)] = 2
    fate[size >= info.max + 16] = 3     # the step above 65504 is 32: from 65520 on, inf
    return fate


def _fate_by_the_largest_value(values):
    """The mistake the top band catches: overflow read as `above 65504`, before rounding."""
    fate = _fate(values)
    fate[values.abs() > torch.finfo(torch.float16).max] = 3
    return fate


def test_the_top_rounding_band_is_checked_visibly_and_a_right_answer_reasoned_from_finfo_passes():
    for _ in range(5):
        lesson.check_fp16_fate_values(_fate_by_the_limits)
        lesson.check_fp16_fate_shape(_fate_by_the_limits)
    failure(lesson.check_fp16_fate_values, _fate_by_the_largest_value,
            says=["65510, -65519, 65520", "the values differ", "Mismatched elements: 2 / 16"])
    values, fates = lesson._values_near_the_top(torch.Generator().manual_seed(3))
    assert fates.tolist() == [0, 0, 0, 3, 3, 3] and torch.equal(_fate(values), fates)
    assert (values.abs() > 65504).all()


def test_fp16_fate_shape():
    lesson.check_fp16_fate_shape(_fate)
    failure(lesson.check_fp16_fate_shape, lambda values: _fate(values).flatten(),
            says=["the shape is not the expected one", "expected: (2, 2)", "got: (4,)"])
    failure(lesson.check_fp16_fate_shape, lambda values: _fate(values).int(),
            says=["the dtype is not the expected one", "expected: torch.int64", "got: torch.int32"])


# ----------------------------------------------------------------------------------- pick_amp_dtype
def _picker(ask):
    """A ``pick_amp_dtype`` whose CUDA branch asks the GPU with ``ask(device)`` when it is not told."""
    def pick(device, bf16_supported=None):
        kind = torch.device(device).type
        if kind == "cuda":
            supported = ask(device) if bf16_supported is None else bf16_supported
            return torch.bfloat16 if supported else torch.float16
        if kind in ("cpu", "mps"):
            return {"cpu": torch.bfloat16, "mps": torch.float16}[kind]
        raise ValueError(kind)
    return pick


_pick = _picker(lambda device: torch.cuda.get_device_capability(device) >= (8, 0))
# Right on a machine of one GPU model: asks about the current GPU, whichever ``device`` names.
_current_only = _picker(lambda device: torch.cuda.is_bf16_supported(including_emulation=False))


def test_pick_amp_dtype():
    lesson.check_pick_amp_dtype(_pick)
    lesson.check_pick(_pick, "mps", torch.float16)
    lesson.check_pick(_pick, "cuda:1", torch.float16, gpu="V100")
    lesson.check_pick_raises(_pick, "meta")

    def always_asks(device, bf16_supported=None):
        return _pick(device, None)

    def never_asks(device, bf16_supported=None):
        return _pick(device, bool(bf16_supported))

    failure(lesson.check_pick_amp_dtype, always_asks,
            says=["pick_amp_dtype('cuda', bf16_supported=False): questions to the GPU about bf16",
                  "expected: []", "got: ['torch.cuda.get_device_capability']"])
    failure(lesson.check_pick_amp_dtype, never_asks,
            says=["on a simulated machine with cuda:0 = NVIDIA A100-SXM4-40GB (compute capability 8.0: "
                  "bf16 native)", "expected: torch.bfloat16", "got: torch.float16"])
    failure(lesson.check_pick_amp_dtype, lambda device, bf16_supported=None: torch.float16,
            says=["pick_amp_dtype('cpu', bf16_supported=None)", "expected: torch.bfloat16"])
    failure(lesson.check_pick_raises, lambda device, bf16_supported=None: torch.float32, "meta",
            says=["should have raised an exception and raised none", "expected: ValueError"])


def test_pick_amp_dtype_on_a_gpu_that_only_emulates_bf16_gets_fp16():
    """PyTorch 2.x's default answer counts emulated bf16: an answer trusting it picks bf16 on a T4."""
    emulation_counts = _picker(lambda device: torch.cuda.is_bf16_supported())
    failure(lesson.check_pick_amp_dtype, emulation_counts,
            says=["on a simulated machine with cuda:0 = Tesla T4 (compute capability 7.5: bf16 only "
                  "emulated)",
                  "expected: torch.float16", "got: torch.bfloat16"])
    by_properties = _picker(lambda device: torch.cuda.get_device_properties(device).major >= 8)
    lesson.check_pick_amp_dtype(by_properties)
    lesson.check_pick(by_properties, "cuda:0", torch.float16, gpu="T4")
    lesson.check_pick(by_properties, "cuda:0", torch.bfloat16, gpu="A100")


def test_pick_amp_dtype_asks_about_the_gpu_the_device_names():
    """On a machine whose GPU 0 is a T4 and GPU 1 an A100, ``"cuda:1"`` is the A100: an answer that
    asks about the current GPU picks fp16 there."""
    failure(lesson.check_pick_amp_dtype, _current_only,
            says=["pick_amp_dtype('cuda:1', bf16_supported=None) on a simulated machine with cuda:0 = "
                  "Tesla T4", "expected: torch.bfloat16", "got: torch.float16"])
    first_gpu = _picker(lambda device: torch.cuda.get_device_properties(0).major >= 8)
    failure(lesson.check_pick_amp_dtype, first_gpu, says=["expected: torch.bfloat16", "got: torch.float16"])

    def selects_it(device):
        with torch.cuda.device(device):
            return torch.cuda.is_bf16_supported(including_emulation=False)

    for answer in (_picker(selects_it), _pick):
        lesson.check_pick_amp_dtype(answer)
        lesson.check_pick(answer, "cuda:0", torch.float16, gpu=("T4", "A100"))
        lesson.check_pick(answer, torch.device("cuda", 1), torch.float16, gpu=("A100", "V100"))


def test_pick_amp_dtype_asks_nothing_when_told_and_puts_torch_cuda_back():
    originals = {name: getattr(torch.cuda, name) for name in ("is_bf16_supported", "is_available",
                                                                "device_count", "get_device_capability")}

    def asks_anyway(device, bf16_supported=None):
        bf16_imported_early()
        return _pick(device, bf16_supported)

    failure(lesson.check_pick_amp_dtype, asks_anyway,
            says=["questions to the GPU about bf16", "expected: []", "got: ['bf16_imported_early']"])
    assert all(getattr(torch.cuda, name) is function for name, function in originals.items())
    assert bf16_imported_early is torch.cuda.is_bf16_supported


def test_pick_amp_dtype_cannot_lean_on_the_course_helper():
    def through_the_course(device, bf16_supported=None):
        kind = torch.device(device).type
        if kind != "cuda":
            return _pick(device, bf16_supported)
        return torch.bfloat16 if amp.autocast_supported("cuda", torch.bfloat16) else torch.float16

    failure(lesson.check_pick_amp_dtype, through_the_course,
            says=["ShortcutUsed", "course.amp.autocast_supported"])
    assert amp.autocast_supported.__module__ == "course.amp"


# ----------------------------------------------------------------------------------- amp_train_step
def _stepper(*, autocast=True, loss_inside=True, zero=True, move=True, scaled=True, through_scaler=True,
             clip="after", returns="value"):
    """An ``amp_train_step`` written the right way, or with one of the usual mistakes."""
    def amp_train_step(model, batch, loss_fn, optimizer, scaler, device, dtype, max_norm=None):
        kind = torch.device(device).type
        inputs, targets = (t.to(device) for t in batch) if move else batch
        if zero:
            optimizer.zero_grad()
        with torch.autocast(kind, dtype=dtype, enabled=autocast and dtype != torch.float32):
            outputs = model(inputs)
            loss = loss_fn(outputs, targets) if loss_inside else None
        loss = loss if loss_inside else loss_fn(outputs, targets)
        (scaler.scale(loss) if scaled else loss).backward()
        if max_norm is not None and clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if max_norm is not None and clip != "none":
            scaler.unscale_(optimizer)
        if max_norm is not None and clip == "after":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if through_scaler:
            scaler.step(optimizer)
        else:
            optimizer.step()
        scaler.update()
        if returns == "scaled":
            return loss.item() * scaler.get_scale()
        return loss if returns == "tensor" else loss.item()
    return amp_train_step


AMP_CHECKS = (lesson.check_amp_train_step_autocast, lesson.check_amp_train_step_update,
              lesson.check_amp_train_step_scaler, lesson.check_amp_train_step_clipping)


def _passes_and_fails(answer):
    """The names of the amp_train_step checks that ``answer`` passes, and fails."""
    passed, failed = [], []
    for check in AMP_CHECKS:
        try:
            check(answer)
            passed.append(check.__name__)
        except CheckFailed as error:
            for part in ("expected:", "got:", "hint:"):
                assert part in str(error), str(error)
            failed.append(check.__name__.removeprefix("check_amp_train_step_"))
    return failed


def test_a_right_amp_train_step_passes_every_check_visible_and_hidden():
    right = _stepper()
    assert _passes_and_fails(right) == []
    runs = [dict(seed=1, dtype=torch.float32, base=F.mse_loss, widths=(5, 7, 2)),
            dict(seed=2, dtype=torch.float16, scaler_kwargs={"init_scale": 2.0 ** 12}),
            dict(seed=3, dtype=torch.bfloat16, steps=3, device=torch.device("cpu"))]
    for run in runs:
        for record in lesson.run_amp_steps(right, parcels=True, **run):
            lesson.check_autocast(record)
            lesson.check_update(record)
    for record in lesson.run_amp_steps(right, seed=4, dtype=torch.float16,
                                       scaler_kwargs={"init_scale": 2.0 ** 8}):
        lesson.check_scaled_step(record)
    for max_norm in (100.0, 0.01):
        for record in lesson.run_amp_steps(right, seed=5, dtype=torch.float32, max_norm=max_norm,
                                           scaler_kwargs={"init_scale": 2.0 ** 6}):
            lesson.check_clipped_step(record)


# The usual mistakes, and the checks (the grade cells' names after test_amp_train_step_) each fails.
AMP_MISTAKES = [
    (dict(autocast=False), ["autocast"]),
    (dict(loss_inside=False), ["autocast"]),
    (dict(zero=False), ["update", "scaler", "clipping"]),
    (dict(move=False), ["update"]),
    (dict(returns="tensor"), ["update", "scaler"]),
    (dict(returns="scaled"), ["scaler"]),
    (dict(scaled=False), ["scaler", "clipping"]),
    (dict(through_scaler=False), ["scaler", "clipping"]),
    (dict(clip="before"), ["clipping"]),
    (dict(clip="none"), ["clipping"]),
]


@pytest.mark.parametrize(("mistake", "failing"), AMP_MISTAKES)
def test_each_usual_mistake_loses_the_points_of_its_own_behaviour(mistake, failing):
    assert _passes_and_fails(_stepper(**mistake)) == failing


def test_float32_handed_to_an_enabled_autocast_is_caught_by_its_warning():
    def forced(model, batch, loss_fn, optimizer, scaler, device, dtype, max_norm=None):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = loss_fn(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return loss.item()

    (record,) = lesson.run_amp_steps(forced, seed=0, dtype=torch.float32, steps=1)
    failure(lesson.check_autocast, record,
            says=["step 1: warnings: is not right", "In CPU autocast, but the target dtype is not supported"])


def test_the_spies_record_calls_steps_moves_and_the_losss_own_gradients():
    (record,) = lesson.run_amp_steps(_stepper(), seed=0, dtype=torch.float32, base=F.mse_loss, steps=1,
                                     parcels=True, scaler_kwargs={"init_scale": 8.0})
    (own,) = record.loss_calls
    assert own.autocast == (False, None) and own.value == record.returned
    assert record.scaler_calls == ["scale", "step", "update"]    # the step unscales by itself: no "unscale_"
    assert record.moves == ["cpu", "cpu"] and record.scale_before == record.scale_after == 8.0
    step = record.optimizer_step                                   # the gradients at their real size
    for grad, mine in zip(step.grads, own.grads, strict=True):
        torch.testing.assert_close(grad, mine)
    torch.testing.assert_close(record.after[0], step.before[0] - 0.1 * own.grads[0])
    torch.testing.assert_close(step.after[0], record.after[0])


def test_the_gate_names_a_batch_that_was_not_moved():
    failure(lesson.check_amp_train_step_update, _stepper(move=False),
            says=["inputs: was not moved to the device", "expected: torch.Tensor"])


# ------------------------------------------------------------------------------------ skipped_steps
def test_scales_of_a_run_halves_exactly_on_the_overflowed_steps():
    scales, overflowed = lesson.scales_of_a_run(torch.Generator().manual_seed(3), 30)
    assert len(scales) == 31 and overflowed
    assert overflowed == [i for i in range(30) if scales[i + 1] == scales[i] / 2]


def _steps_where(changed, shift=0):
    """The indices of the steps after which the scale ``changed(before, after)``, shifted by ``shift``."""
    def steps(scales):
        pairs = zip(scales[:-1], scales[1:], strict=True)
        return [i + shift for i, (before, after) in enumerate(pairs) if changed(before, after)]
    return steps


def test_skipped_steps():
    lesson.check_skipped_steps(_steps_where(lambda before, after: after < before))
    failure(lesson.check_skipped_steps, _steps_where(lambda before, after: after != before),
            says=["expected: [1, 4, 5] (list)", "got: [1, 3, 4, 5] (list)"])
    failure(lesson.check_skipped_steps, _steps_where(lambda before, after: after < before, shift=1),
            says=["expected: [1, 4, 5] (list)", "got: [2, 5, 6] (list)"])


def test_messages_and_hints_follow_the_edition_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_time_per_call_median(_timer(warmup_timed=True))
    message = str(caught.value)
    assert all(word in message for word in ("esperado:", "obtenido:", "pista:", "sección 2", "calentamiento"))
    assert "si sigues sin verlo: hint('time_per_call')" in message


@pytest.mark.kernel
@pytest.mark.parametrize("form", ["from time import perf_counter", "import time as t"])
def test_in_a_kernel_a_clock_imported_by_name_earns_both_grade_cells_with_their_hidden_tests(form, tmp_path):
    """The notebook's own namespace, as grading runs it: the lesson's setup, the answer in a cell of
    its own, then the two grade cells of exercise 1 with their hidden tests."""
    from contextlib import closing

    import nbformat
    from lesson_files import read_solution, write

    from graders.nbgrader_adapter import grade_id, is_grade_cell
    from graders.selfcheck import scored_grade_cells

    source = read_solution("06_mixed_precision")
    code = [cell for cell in source.cells if cell.cell_type == "code"]
    setup = code[:next(i for i, cell in enumerate(code) if "from course import amp" in cell.source) + 1]
    imports, clock, sync, scale = RIGHT_TIMERS[form]
    answer = nbformat.v4.new_code_cell(
        imports + "\n" + _ANSWER.replace("CLOCK", clock).replace("SYNC", sync).replace("SCALE", scale))
    graded = [cell for cell in source.cells
              if is_grade_cell(cell) and grade_id(cell).startswith("test_time_per_call")]
    source.cells = [*setup, answer, *graded]
    with closing(scored_grade_cells(source, tmp_path)) as scored:
        scores = {grade_id(cell): (score, points) for cell, score, points in scored}
    write(source, tmp_path / "executed.ipynb")
    assert scores == {"test_time_per_call_median": (1, 1), "test_time_per_call_synchronizes": (1, 1)}, scores


# ------------------------------------------------------------------------------- decided by the judge
LESSON = "06_mixed_precision"


def _judged_lost(answers: dict, secret: str = "term") -> list:
    """The judged grade cells of the exercises ``answers`` answers (their names: the answers) that a
    kernel holding the notebook's imports, the reference's answers and ``answers`` in place of some
    loses, through the probe and the wire as grading runs them."""
    cells = tuple(dict.fromkeys(cell for call in calls.judged(LESSON) for cell in calls.answer_cells(call)))
    asked = [call for call in calls.probe_calls(LESSON, secret) if call["function"] in answers]
    namespace = {**calls.reference_namespace(read_solution(LESSON), cells), **answers}
    exec(wire.probe([], asked), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged(LESSON)}
    scores = calls.cell_scores(LESSON, secret, solution_path(LESSON), returned, points)
    return [call["cell"] for call in asked if scores[call["cell"]] == 0]


def test_every_grade_cell_of_the_lesson_is_decided_by_the_judge_too():
    assert calls.coverage(LESSON) == (13.0, 13.0, [])


@pytest.mark.parametrize(("mistake", "failing"), AMP_MISTAKES)
def test_the_judge_takes_from_each_amp_mistake_the_cells_the_kernels_checks_take(mistake, failing):
    """Each cell's outcome holds the data of its own behaviour only: autocast's state, the step in
    float32 with a scaler off, the scaler's calls and scale, clipping."""
    assert _judged_lost({"amp_train_step": _stepper(**mistake)}) == [
        f"test_amp_train_step_{name}" for name in failing]


def test_the_judge_gives_a_right_amp_train_step_written_another_way_every_cell():
    def another_way(model, batch, loss_fn, optimizer, scaler, device, dtype, max_norm=None):
        inputs, targets = batch[0].to(device=device), batch[1].to(device, non_blocking=True)
        model.zero_grad(set_to_none=False)
        on = dtype in (torch.float16, torch.bfloat16)
        with torch.amp.autocast(torch.device(device).type, dtype=dtype if on else torch.bfloat16, enabled=on):
            loss = loss_fn(model(inputs), targets)
        scaled = scaler.scale(loss)
        scaled.backward()
        if max_norm:
            scaler.unscale_(optimizer)
            grads = [p.grad for p in model.parameters()]
            total = torch.cat([g.flatten() for g in grads]).norm()
            for grad in grads:
                grad.mul_(torch.clamp(max_norm / (total + 1e-6), max=1.0))
        scaler.step(optimizer)
        scaler.update()
        return loss.detach().item()

    assert _judged_lost({"amp_train_step": _stepper()}) == []
    assert _judged_lost({"amp_train_step": another_way}, secret="another term") == []


def test_the_judge_times_on_the_simulated_clock_and_accepts_both_ways_of_waiting_for_cuda():
    forms = ("perf_counter_ns", "from torch.cuda import synchronize")
    right = [_timer(), *(_clock_answer(*RIGHT_TIMERS[form]) for form in forms),
             *(_notebook_answer(_EVENTS_ANSWER.replace("    BODY", body)) for body in EVENT_BODIES.values())]
    for answer in right:
        assert _judged_lost({"time_per_call": answer}) == []
    median, waits = "test_time_per_call_median", "test_time_per_call_synchronizes"
    assert _judged_lost({"time_per_call": _timer(middle=lambda times: sum(times) / len(times))}) == [median]
    assert median in _judged_lost({"time_per_call": _timer(warmup_timed=True)})
    for mistake in (dict(sync_before=False), dict(sync_after=False), dict(sync_everywhere=True)):
        assert _judged_lost({"time_per_call": _timer(**mistake)}) == [waits]
    milliseconds = _clock_answer("from time import perf_counter_ns", "perf_counter_ns",
                                 "torch.cuda.synchronize", "/ 1e6")
    assert _judged_lost({"time_per_call": milliseconds}) == [median, waits]
    as_tensor = _timer(middle=lambda times: torch.tensor(times).median())
    assert _judged_lost({"time_per_call": as_tensor}) == [median, waits]
    read_before_waiting = EVENT_BODIES["one pair reused, waiting for the end event"].replace(
        "        end.synchronize()\n", "")
    assert _judged_lost({"time_per_call": _notebook_answer(
        _EVENTS_ANSWER.replace("    BODY", read_before_waiting))}) == [waits]


def test_a_time_per_call_that_compares_the_device_with_the_text_cuda_loses_the_waits_cell():
    namespace = defined(LESSON, "time_per_call", torch=torch, time=time, statistics=statistics)
    for secret in ("term", "another term", "a third term"):
        assert _judged_lost({"time_per_call": namespace["time_per_call"]}, secret) == [
            "test_time_per_call_synchronizes"]


def test_the_waits_cells_accept_refuses_what_is_not_the_outcomes_shape():
    args = ("cuda:0", [0.02, 0.03], 1)
    fenced = ["call"] + ["sync", "clock", "call", "sync", "clock"] * 2
    assert lesson.time_per_call_synchronizes_accept({"returned": 0.025, "events": fenced}, None, args)
    for got in (None, [], Refused("builtins.object"), {"returned": 0.025},
                {"returned": "0.025", "events": fenced}, {"returned": 0.025, "events": tuple(fenced)},
                {"returned": 0.025, "events": fenced, "more": 1}, {"returned": 0.025, "events": fenced[1:]},
                {"returned": 25.0, "events": fenced}, {"returned": 0.025, "events": [["call"], 1, None]}):
        assert not lesson.time_per_call_synchronizes_accept(got, None, args), got
    assert not lesson.time_per_call_synchronizes_accept({"returned": 0.025, "events": fenced}, None,
                                                        ("cpu", [0.02, 0.03], 1))


def test_the_judge_asks_pick_amp_dtype_on_simulated_gpus():
    by_properties = _picker(lambda device: torch.cuda.get_device_properties(device).major >= 8)
    for answer in (_pick, by_properties):
        assert _judged_lost({"pick_amp_dtype": answer}) == []

    def always_asks(device, bf16_supported=None):
        return _pick(device, None)

    def never_asks(device, bf16_supported=None):
        return _pick(device, bool(bf16_supported))

    def never_raises(device, bf16_supported=None):
        return _pick(device, bf16_supported) if torch.device(device).type in ("cpu", "cuda", "mps") else None

    def through_the_course(device, bf16_supported=None):
        if torch.device(device).type != "cuda" or bf16_supported is not None:
            return _pick(device, bf16_supported)
        return torch.bfloat16 if amp.autocast_supported("cuda", torch.bfloat16) else torch.float16

    wrong = [_picker(lambda device: torch.cuda.is_bf16_supported()), _current_only, always_asks, never_asks,
             never_raises, through_the_course, lambda device, bf16_supported=None: torch.float16]
    for answer in wrong:
        for secret in ("term", "another term"):
            assert _judged_lost({"pick_amp_dtype": answer}, secret) == ["test_pick_amp_dtype"]
    assert amp.autocast_supported.__module__ == "course.amp"
    assert torch.cuda.is_bf16_supported.__module__ == "torch.cuda"


def test_the_judge_hands_fp16_fate_grids_that_are_not_contiguous():
    for answer in (_fate, _fate_by_the_limits):
        assert _judged_lost({"fp16_fate": answer}) == []
    shape = "test_fp16_fate_shape"

    def flat_views(values):
        return _fate(values.view(-1)).view(values.shape)        # a permuted grid has no flat view

    assert _judged_lost({"fp16_fate": flat_views}) == [shape]
    assert shape in _judged_lost({"fp16_fate": lambda values: _fate(values).flatten()})
    assert shape in _judged_lost({"fp16_fate": lambda values: _fate(values).int()})


@pytest.mark.parametrize("calls, says", [
    (["scale", "step", "unscale_", "update"], "in another order"),
    (["scale", "step", "update"], "is missing"),
    (["scale", "unscale_", "unscale_", "step", "update"], "more than once"),
    (["scale", "unscale_", "step", "update", "get_scale"], "does not make: get_scale"),
])
def test_a_wrong_sequence_of_scaler_calls_is_told_without_the_right_one(calls, says):
    record = SimpleNamespace(scaler_calls=calls, max_norm=1.0, where="amp_train_step(...)")
    with pytest.raises(CheckFailed) as failure:
        lesson._check_scaler_calls(record)
    assert says in str(failure.value)
    assert "['scale', 'unscale_', 'step', 'update']" not in str(failure.value)  # never the right order


def test_tensor_bytes_refuses_a_tensor_made_to_count_them_even_on_the_meta_device():
    def on_meta(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta").nbytes

    failure(lesson.check_tensor_bytes, on_meta, says=["empty made a tensor: count the bytes"])
    failure(lesson.check_tensor_bytes, lambda shape, dtype: torch.zeros((), dtype=dtype).element_size()
            * math.prod(shape), says=["zeros made a tensor"])
