"""course.amp: timing, floating-point formats, the saved-tensor meter and the benchmarks (CPU paths).

The CUDA branches (peak memory, synchronisation, the CUDA autocast policy) run on a GPU runner; here
only what a CPU-only machine can do is checked, including that those branches stay out of the way.
"""

import math
import time
import warnings
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from torch import nn

from course import amp, timing
from course.memory import SavedTensorMeter

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _closed_figures():
    yield
    plt.close("all")


def _tiny_model():
    return amp.make_matmul_mlp(16, 32, 2, classes=4)


# ------------------------------------------------------------------------------------------ timing
@pytest.fixture
def fake_clock(monkeypatch):
    """course.timing reads this clock: ``clock[0]`` seconds, advanced by hand instead of by sleeping."""
    clock = [0.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    return clock


@pytest.fixture
def device_waits(monkeypatch):
    """Records each wait on a device instead of waiting: ``("cuda", device)`` or ``("mps",)``."""
    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waits.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waits.append(("mps",)))
    return waits


def test_synchronize_waits_only_for_an_asynchronous_device(device_waits):
    timing.synchronize("cpu")
    timing.synchronize(torch.device("cpu"))
    assert device_waits == []
    timing.synchronize("cuda:1")
    timing.synchronize(torch.device("mps"))
    assert device_waits == [("cuda", torch.device("cuda", 1)), ("mps",)]


def test_time_calls_warms_up_then_times_each_call(fake_clock):
    durations = iter([50.0, 2.0, 3.0, 1.0, 4.0, 7.0, 8.0])   # the first call is the warm-up

    def fn():
        fake_clock[0] += next(durations)

    assert timing.time_calls(fn, device="cpu", repeats=4, warmup=1) == [2.0, 3.0, 1.0, 4.0]
    assert timing.time_calls(fn, device="cpu", repeats=2, warmup=0, sync=False) == [7.0, 8.0]
    assert next(durations, None) is None                      # 5 + 2 calls, no more


def test_time_per_call_is_the_median_of_the_timed_calls(fake_clock):
    durations = iter([9.0, 9.0, 5.0, 1.0, 3.0])

    def fn():
        fake_clock[0] += next(durations)

    assert timing.time_per_call(fn, repeats=3, warmup=2) == 3.0


def test_time_calls_waits_for_cuda_only_on_cuda(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: events.append("sync"))
    timing.time_calls(lambda: events.append("call"), device="cpu", repeats=2, warmup=1)
    assert events == ["call"] * 3
    events.clear()
    timing.time_calls(lambda: events.append("call"), device="cuda", repeats=2, warmup=1)
    assert events == ["call", "sync", "call", "sync", "sync", "call", "sync"]
    events.clear()
    timing.time_calls(lambda: events.append("call"), device="cuda", repeats=2, warmup=0, sync=False)
    assert events == ["call", "call", "sync"]       # nothing left queued behind


def test_stopwatch_stops_after_the_device_has_finished(fake_clock, monkeypatch):
    queued = []                                     # work a fake device finishes when waited for

    def finish_queued(device=None):
        fake_clock[0] += sum(queued)
        queued.clear()

    monkeypatch.setattr(torch.cuda, "synchronize", finish_queued)
    with timing.stopwatch("cuda") as right:
        queued.append(5.0)
    with timing.stopwatch("cuda", sync=False) as wrong:
        queued.append(5.0)
    assert (right.seconds, wrong.seconds) == (5.0, 0.0)


def test_benchmark_median_is_seconds_per_call():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.001)

    seconds = amp.benchmark_median(fn, min_run_time=0.05)     # lesson 06 calls it through amp
    assert isinstance(seconds, float)
    assert seconds >= 0.001                  # a sleep lasts at least as long as asked, however busy
    assert len(calls) > 1


# ----------------------------------------------------------------------------------------- formats
@pytest.mark.parametrize(("dtype", "bits"), [(torch.float32, (1, 8, 23)), (torch.float16, (1, 5, 10)),
                                             (torch.bfloat16, (1, 8, 7)), (torch.float64, (1, 11, 52))])
def test_format_bits(dtype, bits):
    assert amp.format_bits(dtype) == bits
    assert sum(bits) == torch.finfo(dtype).bits


def test_finfo_table_rows_and_text():
    rows = {row["dtype"]: row for row in amp.finfo_table()}
    assert list(rows) == ["float32", "float16", "bfloat16"]
    assert rows["float16"]["max"] == 65504.0
    assert rows["float16"]["smallest_subnormal"] == 2.0 ** -24
    assert rows["bfloat16"]["smallest_normal"] == rows["float32"]["smallest_normal"]
    assert rows["bfloat16"]["eps"] == 2.0 ** -7
    assert 7 < rows["float32"]["decimal_digits"] < 7.3
    text = amp.format_finfo_table(amp.finfo_table())
    assert all(name in text for name in rows) and "65504" not in text.splitlines()[0]


def test_round_trip_error_marks_underflow_and_overflow():
    error = amp.round_trip_error([1.0, 1e-9, 1e5, 1.0 + 2.0 ** -12], torch.float16)
    assert error.dtype == torch.float64
    assert error[0] == 0.0 and error[1] == 1.0 and math.isinf(error[2])
    assert 0 < error[3] <= 2.0 ** -11
    assert amp.round_trip_error([1e5], torch.bfloat16)[0] < 2.0 ** -8


def test_pictures_draw():
    assert len(amp.plot_formats(points=300).axes) == 2
    grads = torch.logspace(-10, -3, 500)
    assert amp.plot_gradient_scaling(grads, 2.0 ** 16).axes


# ------------------------------------------------------------------------------------------ memory
def test_bytes_helpers():
    assert amp.tensor_nbytes(torch.zeros(3, 5, dtype=torch.bfloat16)) == 30
    assert amp.tensor_nbytes(torch.zeros(10)[2:4]) == 8          # a view counts its own elements
    assert amp.format_bytes(512) == "512 B"
    assert amp.format_bytes(3 * 2**20) == "3.0 MiB"
    assert amp.format_bytes(None) == "-"


def test_saved_tensor_meter_counts_activations_not_parameters():
    layer = nn.Linear(64, 64)
    x = torch.randn(32, 64)
    with SavedTensorMeter(exclude=list(layer.parameters())) as meter:
        layer(x).relu()
    assert meter.bytes == 2 * 32 * 64 * 4           # the input of the linear layer and relu's output
    with SavedTensorMeter(exclude=list(layer.parameters())) as low:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            layer(x).relu()
    # the same two activations in bf16 (the input needs no gradient, so no weight copy is kept)
    assert low.bytes == 2 * 32 * 64 * 2 == meter.bytes // 2
    with SavedTensorMeter() as nothing:
        with torch.no_grad():
            layer(x)
    assert nothing.bytes == 0 and nothing.count == 0


# ---------------------------------------------------------------------------------------- autocast
def test_autocast_support_on_this_machine():
    assert amp.autocast_supported("cpu", torch.bfloat16)
    assert not amp.autocast_supported("cpu", torch.float32)     # CPU autocast warns and disables itself
    if not torch.cuda.is_available():
        assert not amp.autocast_supported("cuda", torch.float16)
    modes = amp.amp_modes("cpu")
    assert [m.name for m in modes] == ["fp32", "bf16", "fp16+scaler"]
    assert modes[0].dtype == torch.float32 and not modes[0].skipped
    assert not modes[1].skipped and modes[2].scaler


def test_autocast_refuses_bf16_that_a_gpu_only_emulates(monkeypatch):
    """PyTorch 2.x's is_bf16_supported() counts emulation by default: a T4 would say True, and bf16
    there runs slower than fp16. The course asks for native support only."""
    asked = []

    def t4_answer(including_emulation=True):
        asked.append(including_emulation)
        return including_emulation

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", t4_answer)
    assert not amp.autocast_supported("cuda", torch.bfloat16)
    assert asked == [False]
    assert amp.amp_modes("cuda")[1].skipped


def test_run_amp_benchmark_on_cpu():
    modes = [amp.AmpMode("fp32", torch.float32, scaler=False),
             amp.AmpMode("bf16", torch.bfloat16, scaler=False),
             amp.AmpMode("fp16+scaler", torch.float16, scaler=True, skipped="not on this test")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = amp.run_amp_benchmark(_tiny_model, device="cpu", steps=3, batch_size=8, in_features=16,
                                        classes=4, warmup=1, modes=modes)
    fp32, bf16, skipped = results
    assert (fp32.mode, bf16.mode, skipped.mode) == ("fp32", "bf16", "fp16+scaler")
    for r in (fp32, bf16):
        assert r.steps == 3 and r.steps_per_s > 0 and math.isfinite(r.final_loss)
        assert r.peak_bytes is None                  # CUDA only
    assert 0 < bf16.saved_bytes < fp32.saved_bytes
    assert abs(bf16.final_loss - fp32.final_loss) < 0.05      # same start, same batches
    assert skipped.skipped and math.isnan(skipped.steps_per_s)
    text = amp.format_amp_results(results)
    assert "skipped: not on this test" in text and "1.00x" in text
    assert len(amp.plot_amp_benchmark(results, title="cpu").axes) == 3


def test_run_amp_benchmark_uses_every_mode_this_cpu_supports():
    results = amp.run_amp_benchmark(_tiny_model, device=torch.device("cpu"), steps=2, batch_size=8,
                                    in_features=16, classes=4, warmup=1)
    ran = [r.mode for r in results if not r.skipped]
    assert ran[:2] == ["fp32", "bf16"]


# ----------------------------------------------------------------------------------------- compile
def test_compile_benchmark_reports_failures_and_measures_success():
    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no C++ compiler on this machine")

    kwargs = dict(device="cpu", batch_size=8, in_features=16, classes=4, steps=3)
    failed = amp.compile_benchmark(_tiny_model, backend=broken_backend, **kwargs)
    assert not failed.ok and "no C++ compiler on this machine" in failed.error, failed.error
    assert failed.eager_step_s > 0 and math.isnan(failed.compiled_step_s)

    worked = amp.compile_benchmark(_tiny_model, backend="eager", **kwargs)
    assert worked.ok, worked.error
    assert worked.first_step_s > 0 and worked.compiled_step_s > 0 and worked.speedup > 0
    assert len(amp.plot_compile(worked, steps=50).axes) == 1


def test_break_even_steps():
    result = amp.CompileResult(eager_step_s=0.010, first_step_s=2.005, compiled_step_s=0.005)
    assert result.speedup == pytest.approx(2.0)
    assert result.break_even_steps == pytest.approx(400.0)
    slower = amp.CompileResult(eager_step_s=0.01, first_step_s=1.0, compiled_step_s=0.02)
    assert math.isinf(slower.break_even_steps)
    assert amp.plot_compile(result, steps=600).axes


# ------------------------------------------------------------------------------------ two languages
def test_tables_and_pictures_speak_the_edition_language(english):
    import course

    result = amp.CompileResult(eager_step_s=0.01, first_step_s=2.0, compiled_step_s=0.005)
    rows = amp.finfo_table()
    said = {}
    for language in ("es", "en"):
        course.set_language(language)
        ax = amp.plot_compile(result, steps=1000).axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        said[language] = (ax.get_xlabel(), ax.get_ylabel(), legend, [t.get_text() for t in ax.texts],
                          amp.format_finfo_table(rows).splitlines()[0],
                          [a.get_title() for a in amp.plot_formats().axes])
    course.set_language("en")
    xlabel, ylabel, legend, texts, header, titles = said["es"]
    assert (xlabel, ylabel) == ("pasos de entrenamiento", "segundos, acumulados")
    assert legend[1].startswith("compilado: primer paso 2.0 s") and legend[1].endswith("ms/paso")
    assert texts == [" compensa desde ≈ 399 pasos"]
    assert "dígitos" in header and "mín subnormal" in header
    assert titles[0] == "signo · exponente (rango) · mantisa (precisión)"
    xlabel, ylabel, legend, texts, header, titles = said["en"]
    assert (xlabel, ylabel) == ("training steps", "seconds, cumulative")
    assert legend[0] == "eager: 10.00 ms/step" and texts == [" break-even ≈ 399 steps"]
    assert header.split() == ["dtype", "bits", "exp", "mant", "max", "min", "normal", "min", "subnormal",
                              "eps", "digits"]
    assert titles[1] == "worst relative error of storing x, by magnitude"


def test_benchmark_report_speaks_the_edition_language(spanish):
    results = [amp.AmpResult("fp32", "float32", 3, 1.0, 10.0, 0.5, None, 1000),
               amp.AmpResult("bf16", "bfloat16", 3, 1.0, 20.0, 0.5, None, 500),
               amp.AmpResult("fp16+scaler", "float16", 3, skipped="no")]
    with spanish():
        text = amp.format_amp_results(results)
        fig = amp.plot_amp_benchmark(results, title="cpu")
        titles = [ax.get_title() for ax in fig.axes]
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["modo", "pasos/s", "aceleración"] and "pérdida final" in lines[0]
    assert lines[2].split()[2] == "2.00x" and lines[3].split()[1:] == ["omitido:", "no"]
    assert lines[1].index("10.00") + 5 == lines[0].index("pasos/s") + 7       # columns stay aligned
    assert titles == ["pasos por segundo", "guardado para la pasada hacia atrás, un paso (MiB)",
                      "pérdida tras el último paso"]
    assert amp.format_amp_results(results).splitlines()[0].split()[:2] == ["mode", "steps/s"]
