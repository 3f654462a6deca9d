"""Lesson 06's visible checks and harnesses: a correct answer passes, a typical mistake fails with
expected/got/hint, the spies record what they should, and course helpers that an exercise duplicates
are switched off inside the checks and back on afterwards."""

import math
import statistics
import time

import pytest
import torch
from check_messages import failure
from torch import nn
from torch.nn import functional as F

import course
from course import amp, memory, timing
from course.timing import time_calls
from graders import checks
from graders.checks import CheckFailed
from graders.lesson_checks import mixed_precision as lesson

pytestmark = pytest.mark.usefixtures("english")


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
    run = lesson.watch_time_per_call(_timer(), "cuda:0", durations=[5.0, 0.25, 0.5], warmup=1, hint=None)
    assert run.returned == pytest.approx(0.375)
    assert run.events == ["clock", "call"] + ["sync", "clock", "call", "sync", "clock"] * 2
    assert time.perf_counter is not None and torch.cuda.synchronize.__module__ == "torch.cuda"


def test_time_per_call_median():
    lesson.check_time_per_call_median(_timer())
    failure(lesson.check_time_per_call_median, _timer(warmup_timed=True), says=["60 s"])
    failure(lesson.check_time_per_call_median, _timer(middle=lambda times: sum(times) / len(times)))
    failure(lesson.check_time_per_call_median, _timer(middle=lambda times: torch.tensor(times).median()),
           says=["float"])


def test_time_per_call_synchronizes():
    lesson.check_time_per_call_synchronizes(_timer())
    for mistake in (dict(sync_before=False), dict(sync_after=False),
                    dict(sync_before=False, sync_after=False)):
        failure(lesson.check_time_per_call_synchronizes, _timer(**mistake),
               says=["sync clock call sync clock"])
    failure(lesson.check_time_per_call_synchronizes, _timer(sync_everywhere=True),
           says=["calls of torch.cuda.synchronize"])


def test_the_hidden_timing_checks_pass_the_right_answer_on_other_devices():
    lesson.check_median_of(_timer(), warmup=0, timed=[0.3, 0.1, 0.2, 0.9], expected=0.25)
    lesson.check_fenced_by_syncs(_timer(), torch.device("cuda", 1), repeats=2, warmup=0)
    lesson.check_never_syncs(_timer(), "meta", repeats=2, warmup=2)


def test_course_timing_is_switched_off_inside_the_check_and_back_on_after():
    def through_the_helper(fn, device, repeats=10, warmup=2):
        return statistics.median(time_calls(fn, device=device, repeats=repeats, warmup=warmup))

    def through_the_module(fn, device, repeats=10, warmup=2):
        return timing.time_per_call(fn, device=device, repeats=repeats, warmup=warmup)

    for shortcut in (through_the_helper, through_the_module):
        message = failure(lesson.check_time_per_call_median, shortcut,
                         says=["course.timing is not available"])
        assert "exercise 1" in message
    assert time_calls is timing.time_calls                        # this module's name is back
    assert timing.time_calls(lambda: None, device="cpu", repeats=2, warmup=0)[0] >= 0.0


def test_timing_helpers_off_swaps_every_name_of_a_helper_and_restores_it():
    namespace = {"alias": timing.synchronize, "other": print, "__name__": "notebook"}
    with lesson.timing_helpers_off(type("Answer", (), {"__globals__": namespace})):
        for swapped in (namespace["alias"], timing.synchronize, memory.synchronize):
            with pytest.raises(RuntimeError, match="course.timing is not available"):
                swapped("cpu")
        assert namespace["other"] is print
    assert namespace["alias"] is timing.synchronize is memory.synchronize


# ------------------------------------------------------------------------------------- tensor_bytes
def test_tensor_bytes():
    lesson.check_tensor_bytes(lambda shape, dtype: math.prod(shape) * dtype.itemsize)
    failure(lesson.check_tensor_bytes, lambda shape, dtype: len(shape) * dtype.itemsize)
    failure(lesson.check_tensor_bytes, lambda shape, dtype: math.prod(shape) * 4)
    failure(lesson.check_tensor_bytes, lambda shape, dtype: math.prod(shape) * dtype.itemsize / 1,
           says=["int"])


def test_tensor_bytes_check_refuses_the_course_helper():
    def through_the_helper(shape, dtype):
        return amp.tensor_nbytes(torch.empty(shape, dtype=dtype, device="meta"))

    failure(lesson.check_tensor_bytes, through_the_helper, says=["tensor_nbytes is not available"])
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


def test_values_with_known_fates_are_classified_alike_by_a_right_answer():
    values, fates = lesson.values_with_known_fates(500, torch.Generator().manual_seed(0))
    assert values.dtype == torch.float32 and set(fates.tolist()) == {0, 1, 2, 3}
    assert torch.equal(_fate(values), fates)


def test_fp16_fate_values():
    lesson.check_fp16_fate_values(_fate)
    failure(lesson.check_fp16_fate_values, _fate_by_thresholds, says=["4e-08"])
    failure(lesson.check_fp16_fate_values, lambda values: _fate(values).clamp(max=2))


def test_fp16_fate_shape():
    lesson.check_fp16_fate_shape(_fate)
    failure(lesson.check_fp16_fate_shape, lambda values: _fate(values).flatten(), says=["shape"])
    failure(lesson.check_fp16_fate_shape, lambda values: _fate(values).int(), says=["dtype"])


# ----------------------------------------------------------------------------------- pick_amp_dtype
def _pick(device, bf16_supported=None):
    kind = torch.device(device).type
    if kind == "cuda":
        supported = torch.cuda.is_bf16_supported() if bf16_supported is None else bf16_supported
        return torch.bfloat16 if supported else torch.float16
    return {"cpu": torch.bfloat16, "mps": torch.float16}.get(kind) or (_ for _ in ()).throw(ValueError(kind))


def test_pick_amp_dtype():
    lesson.check_pick_amp_dtype(_pick)
    lesson.check_pick(_pick, "mps", torch.float16)
    lesson.check_pick_raises(_pick, "meta")

    def always_asks(device, bf16_supported=None):
        return _pick(device, None)

    def never_asks(device, bf16_supported=None):
        return _pick(device, bool(bf16_supported))

    failure(lesson.check_pick_amp_dtype, always_asks)
    failure(lesson.check_pick_amp_dtype, never_asks, says=["is_bf16_supported() → True"])
    failure(lesson.check_pick_amp_dtype, lambda device, bf16_supported=None: torch.float16)
    with pytest.raises(CheckFailed, match="ValueError"):
        lesson.check_pick_raises(lambda device, bf16_supported=None: torch.float32, "meta")


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


@pytest.mark.parametrize(("mistake", "failing"), [
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
])
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
    with pytest.raises(CheckFailed, match="warnings"):
        lesson.check_autocast(record)


def test_the_spies_record_calls_steps_moves_and_the_losss_own_gradients():
    log, moves = [], []
    model = nn.Linear(3, 2)
    params = list(model.parameters())
    optimizer = lesson.SpySGD(params, lr=0.5)
    scaler = lesson.SpyScaler(log, init_scale=8.0)
    loss_fn = lesson.spy_loss(log, F.mse_loss, params)
    inputs = lesson.Parcel(torch.randn(4, 3), moves).to("cpu")
    loss = loss_fn(model(inputs), torch.zeros(4, 2))
    scaler.scale(loss).backward()
    (own,) = [entry for entry in log if isinstance(entry, lesson.LossCall)]
    assert own.autocast == (False, None) and own.value == loss.item()
    for param, grad in zip(params, own.grads, strict=True):
        torch.testing.assert_close(param.grad, 8.0 * grad)
    before = [p.detach().clone() for p in params]
    scaler.step(optimizer)                  # the step unscales by itself: no "unscale_" noted
    scaler.update()
    assert [entry for entry in log if isinstance(entry, str)] == ["scale", "step", "update"]
    assert moves == ["cpu"]
    (view,) = optimizer.views
    for grad, mine in zip(view.grads, own.grads, strict=True):
        torch.testing.assert_close(grad, mine)
    torch.testing.assert_close(view.after[0], before[0] - 0.5 * own.grads[0])


def test_the_gate_names_a_batch_that_was_not_moved():
    with pytest.raises(CheckFailed, match="inputs: was not moved to the device"):
        lesson.Gate()(lesson.Parcel(torch.zeros(1), []))


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
    failure(lesson.check_skipped_steps, _steps_where(lambda before, after: after != before))
    failure(lesson.check_skipped_steps, _steps_where(lambda before, after: after < before, shift=1))


# ------------------------------------------------------------------------------------ concept check
def test_concept_statements_are_checked_and_scored():
    answers = dict.fromkeys(lesson.CONCEPT_KEYS, True)
    checks.check_statements(answers, lesson.CONCEPT_KEYS, hint=lesson.HINTS["concept_check"])
    with pytest.raises(CheckFailed, match="hint: ANSWERS must have exactly"):
        checks.check_statements({**answers, "autocast_all_16_bit": None}, lesson.CONCEPT_KEYS,
                                hint=lesson.HINTS["concept_check"])


def test_messages_and_hints_follow_the_edition_language():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_time_per_call_median(_timer(warmup_timed=True))
    message = str(caught.value)
    assert all(word in message for word in ("esperado:", "obtenido:", "pista:", "sección 2", "calentamiento"))
    assert "si sigues sin verlo: hint('time_per_call')" in message
