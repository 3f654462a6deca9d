"""Mixed precision and timing GPU work: the helpers of lesson 06 and of GPU runners.

Taught in lesson 06 (mixed_precision), sections 3, 4, 8 and 9.

- Timing lives in :mod:`course.timing`; :func:`benchmark_median` (``torch.utils.benchmark``) is also
  reachable here, as ``amp.benchmark_median``, because lesson 06 calls it that way after its timing
  exercise. The timing loop itself (``time_calls``) is not re-exported: lesson 06 imports this module
  in its setup cell, before the exercise that asks students to write that loop.
- Floating-point formats: :func:`format_bits`, :func:`finfo_table`, :func:`round_trip_error` and the
  pictures :func:`plot_formats` and :func:`plot_gradient_scaling`.
- Memory: :func:`tensor_nbytes` and :func:`format_bytes` (the meter of bytes kept for backward and the
  CUDA peak are in :mod:`course.memory`).
- Measuring: :func:`amp_modes` (which of fp32 / bf16 autocast / fp16 autocast + GradScaler a device
  runs), :func:`run_amp_benchmark` with :func:`plot_amp_benchmark`, and :func:`compile_benchmark`
  with :func:`plot_compile` for ``torch.compile``.

The lesson asks students to write their own training step, timing function and dtype choice, and
grades them by behaviour; the versions here carry other names and keyword-only arguments, and the
lesson's checks switch off the ones an exercise duplicates.
"""

import contextlib
import copy
import gc
import logging
import math
import statistics
import warnings
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.nn import functional as F

from course import timing
from course.memory import SavedTensorMeter, track_cuda_memory
from course.settings import say
from course.timing import benchmark_median

FORMAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_COLORS = {torch.float32: "tab:blue", torch.float16: "tab:orange", torch.bfloat16: "tab:green",
           torch.float64: "tab:purple"}

__all__ = [
    "FORMAT_DTYPES", "AmpMode", "AmpResult", "CompileResult", "amp_modes", "autocast_supported",
    "benchmark_median", "compile_benchmark", "dtype_name", "finfo_table", "format_amp_results",
    "format_bits", "format_bytes", "format_finfo_table", "make_matmul_mlp", "plot_amp_benchmark",
    "plot_compile", "plot_formats", "plot_gradient_scaling", "round_trip_error", "run_amp_benchmark",
    "tensor_nbytes",
]


# ----------------------------------------------------------------------------------------- formats
def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def format_bits(dtype: torch.dtype) -> tuple[int, int, int]:
    """``(sign, exponent, mantissa)`` bits of a floating-point dtype, read from ``torch.finfo``."""
    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    return 1, info.bits - 1 - mantissa, mantissa


def finfo_table(dtypes=FORMAT_DTYPES) -> list[dict]:
    """One row per dtype: bits, range (max, smallest normal and subnormal), ``eps`` and digits."""
    rows = []
    for dtype in dtypes:
        info = torch.finfo(dtype)
        _, exponent, mantissa = format_bits(dtype)
        rows.append({
            "dtype": dtype_name(dtype),
            "bits": info.bits,
            "exponent_bits": exponent,
            "mantissa_bits": mantissa,
            "max": info.max,
            "smallest_normal": info.smallest_normal,
            "smallest_subnormal": info.smallest_normal * info.eps,
            "eps": info.eps,
            "decimal_digits": (mantissa + 1) * math.log10(2),
        })
    return rows


def _aligned(columns, rows) -> list[str]:
    """A header and a rule, then ``rows``: ``columns`` are ``(header, width, format)``; a width grows
    to fit its header (the Spanish words are longer), text columns align left, numbers right."""
    widths = [max(width, len(head)) for head, width, _ in columns]
    header = " ".join(f"{head:{'<' if i == 0 else '>'}{w}}" for i, ((head, _, _), w)
                      in enumerate(zip(columns, widths, strict=True)))
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(" ".join(f"{value:{'<' if i == 0 else '>'}{w}{fmt}}" for i, (value, w, (_, _, fmt))
                              in enumerate(zip(row, widths, columns, strict=True))))
    return lines


def format_finfo_table(rows) -> str:
    """:func:`finfo_table` as aligned text, its headers in the edition's language."""
    columns = [("dtype", 9, ""), ("bits", 4, "d"), ("exp", 4, "d"), ("mant", 4, "d"),
               (say({"es": "máx", "en": "max"}), 10, ".3g"),
               (say({"es": "mín normal", "en": "min normal"}), 11, ".3g"),
               (say({"es": "mín subnormal", "en": "min subnormal"}), 13, ".3g"), ("eps", 10, ".3g"),
               (say({"es": "dígitos", "en": "digits"}), 6, ".1f")]
    return "\n".join(_aligned(columns, [
        (r["dtype"], r["bits"], r["exponent_bits"], r["mantissa_bits"], r["max"], r["smallest_normal"],
         r["smallest_subnormal"], r["eps"], r["decimal_digits"]) for r in rows]))


def round_trip_error(values, dtype: torch.dtype) -> torch.Tensor:
    """Relative error of storing positive ``values`` in ``dtype`` and reading them back (float64).

    1.0 means the value became 0 (underflow); ``inf`` means it became infinite (overflow).
    """
    exact = torch.as_tensor(values, dtype=torch.float64)
    stored = exact.to(dtype).to(torch.float64)
    return (stored - exact).abs() / exact.abs()


def plot_formats(dtypes=FORMAT_DTYPES, low: float = -50.0, high: float = 40.0, points: int = 3000):
    """Left: the bits of each format. Right: round-trip relative error against magnitude.

    The flat floor of each curve is half its ``eps`` (precision); the curve rises where values become
    subnormal, sits at 1 where they flush to zero, and stops at the format's largest value, past
    which they become ``inf``.
    """
    fig, (ax_bits, ax_err) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1, 1.6]})
    for row, dtype in enumerate(dtypes):
        sign, exponent, mantissa = format_bits(dtype)
        start = 0
        mantissa_word = say({"es": "mantisa", "en": "mantissa"})
        for width, color, label in ((sign, "tab:gray", "s"), (exponent, "tab:red", f"exp {exponent}"),
                                    (mantissa, "tab:blue", f"{mantissa_word} {mantissa}")):
            ax_bits.barh(row, width, left=start, color=color, edgecolor="white", alpha=0.8)
            ax_bits.text(start + width / 2, row, label, ha="center", va="center", color="white", fontsize=8)
            start += width
    ax_bits.set_yticks(range(len(dtypes)), [dtype_name(d) for d in dtypes])
    ax_bits.invert_yaxis()
    ax_bits.set_xlabel("bits")
    ax_bits.set_title(say({"es": "signo · exponente (rango) · mantisa (precisión)",
                           "en": "sign · exponent (range) · mantissa (precision)"}), fontsize=10)

    window = 10                                  # plot the worst error among each run of neighbours
    points -= points % window
    magnitudes = torch.logspace(low, high, points, dtype=torch.float64)
    centres = magnitudes.view(-1, window)[:, window // 2]
    for k, dtype in enumerate(dtypes):
        error = round_trip_error(magnitudes, dtype).view(-1, window).amax(dim=1)
        finite = torch.isfinite(error)
        color = _COLORS.get(dtype)
        ax_err.loglog(centres[finite], error[finite].clamp(min=1e-9), lw=1.2, color=color,
                      label=dtype_name(dtype))
        info = torch.finfo(dtype)
        if info.max < 10 ** high:
            ax_err.axvline(info.max, color=color, ls=":", lw=1)
            labelled = sum(abs(math.log10(torch.finfo(d).max / info.max)) < 1 for d in dtypes[:k])
            top = say({"es": "máx", "en": "max"})
            ax_err.text(info.max, 10 ** (-5 - labelled), f"{top} {info.max:.3g} ", color=color, fontsize=8,
                        ha="right")
    ax_err.axhline(1.0, color="black", lw=0.6, ls="--")
    ax_err.text(10 ** low, 1.3, say({
        "es": "error 1: se guarda como 0 (underflow); más allá del máximo: inf (overflow)",
        "en": "error 1: stored as 0 (underflow); past max: inf (overflow)"}), fontsize=8)
    ax_err.set_ylim(1e-9, 10)
    ax_err.set_xlabel("|x|")
    ax_err.set_ylabel(say({"es": "|guardado − x| / |x|", "en": "|stored − x| / |x|"}))
    ax_err.set_title(say({"es": "peor error relativo al guardar x, según su magnitud",
                          "en": "worst relative error of storing x, by magnitude"}), fontsize=10)
    ax_err.legend(loc="upper center", bbox_to_anchor=(0.5, 0.88), ncol=len(dtypes), fontsize=8)
    ax_err.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_gradient_scaling(grads, scale: float, dtype: torch.dtype = torch.float16):
    """Histogram of ``log2 |g|`` before and after multiplying by ``scale``, over the zones of ``dtype``."""
    info = torch.finfo(dtype)
    values = torch.as_tensor(grads, dtype=torch.float64).flatten()
    values = values[values != 0].abs()
    flush = math.log2(info.smallest_normal * info.eps) - 1      # below this: rounds to zero
    normal = math.log2(info.smallest_normal)
    top = math.log2(info.max)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    unscaled = values.log2()
    scaled = (values * scale).log2()
    lo = min(unscaled.min().item(), flush) - 2
    hi = max(scaled.max().item(), top) + 2
    name = dtype_name(dtype)
    ax.axvspan(lo, flush, color="tab:red", alpha=0.12,
               label=say({"es": f"{name}: se vuelve 0", "en": f"{name}: becomes 0"}))
    ax.axvspan(flush, normal, color="tab:orange", alpha=0.12,
               label=say({"es": f"{name}: subnormal, pocos bits", "en": f"{name}: subnormal, few bits"}))
    ax.axvspan(top, hi, color="tab:purple", alpha=0.12,
               label=say({"es": f"{name}: se vuelve inf", "en": f"{name}: becomes inf"}))
    bins = torch.linspace(lo, hi, 90).tolist()
    gradients = say({"es": "gradientes", "en": "gradients"})
    ax.hist(unscaled.tolist(), bins=bins, color="tab:gray", alpha=0.8, label=gradients)
    ax.hist(scaled.tolist(), bins=bins, color="tab:green", alpha=0.6,
            label=f"{gradients} × {scale:g} (2^{math.log2(scale):g})")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("log2 |g|")
    ax.set_ylabel(say({"es": "cantidad", "en": "count"}))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------ memory
def tensor_nbytes(tensor: torch.Tensor) -> int:
    """Bytes of a tensor's elements (not of the storage it may be a view of)."""
    return tensor.numel() * tensor.element_size()


def format_bytes(n) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass
class AmpMode:
    """One way of training: the autocast dtype (``float32``: no autocast), a scaler or not."""

    name: str
    dtype: torch.dtype
    scaler: bool
    skipped: str = ""          # why this device does not run it; empty when it runs


def autocast_supported(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch.autocast(device_type, dtype)`` really lowers a matmul on this machine; on CUDA,
    bf16 counts only where the GPU computes it natively (compute capability 8.0 on)."""
    if device_type == "cuda" and not torch.cuda.is_available():
        return False
    # PyTorch 2.x says True by default where bf16 is only emulated (T4, V100): slower than fp16 there
    if device_type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(
            including_emulation=False):
        return False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(device_type=device_type, dtype=dtype):
                a = torch.ones(2, 2, device=device_type)
                lowered = (a @ a).dtype == dtype
    except Exception:  # a device or dtype autocast cannot handle at all
        return False
    # autocast says "... not supported ... Disabling autocast" as a warning, then runs in fp32
    return lowered and not any("autocast" in str(w.message).lower() for w in caught)


def amp_modes(device) -> list[AmpMode]:
    """fp32, bf16 autocast and fp16 autocast + GradScaler, each marked with why it is skipped here."""
    device_type = torch.device(device).type
    modes = [AmpMode("fp32", torch.float32, scaler=False)]
    for name, dtype, scaler in (("bf16", torch.bfloat16, False), ("fp16+scaler", torch.float16, True)):
        reason = ""
        if not autocast_supported(device_type, dtype):
            call = f"torch.autocast('{device_type}', {dtype_name(dtype)})"
            reason = say({"es": f"{call} no está disponible aquí", "en": f"{call} is not supported here"})
        modes.append(AmpMode(name, dtype, scaler=scaler, skipped=reason))
    return modes


def make_matmul_mlp(in_features: int, width: int, depth: int, classes: int = 10) -> nn.Sequential:
    """A model that is almost only matrix multiplications: ``depth`` Linear+GELU blocks and a head."""
    layers = [nn.Linear(in_features, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def _synthetic_batches(*, batches: int, batch_size: int, in_features: int, classes: int, seed: int, device):
    """Fixed inputs and the labels a random linear "teacher" gives them: a task a model can learn."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batches, batch_size, in_features, generator=g)
    teacher = torch.randn(in_features, classes, generator=g)
    y = (x @ teacher).argmax(dim=-1)
    return [(x[i].to(device), y[i].to(device)) for i in range(batches)]


def _step(model, x, y, *, optimizer, scaler, device_type: str, dtype: torch.dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device_type, dtype=dtype, enabled=dtype != torch.float32):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


@dataclass
class AmpResult:
    mode: str
    dtype: str
    steps: int
    seconds: float = math.nan
    steps_per_s: float = math.nan
    final_loss: float = math.nan
    peak_bytes: int | None = None      # torch.cuda.max_memory_allocated above the data; CUDA only
    saved_bytes: int | None = None     # bytes kept for backward in one forward pass (any device)
    skipped: str = ""


def run_amp_benchmark(make_model, *, device, steps: int, batch_size: int, in_features: int,
                      classes: int = 10, warmup: int = 3, lr: float = 1e-3, batches: int = 4,
                      seed: int = 0, modes=None) -> list[AmpResult]:
    """Train a fresh ``make_model()`` for ``warmup + steps`` steps in each mode; time the last ``steps``.

    Every mode starts from the same weights, uses AdamW and sees the same few batches (a task the
    model can learn: a random linear "teacher" labels them). Reported: steps per second,
    the loss after the last step, the bytes saved for backward in one forward pass, and on CUDA the
    peak memory the training allocated (model, gradients, activations; the data excluded).
    """
    device = torch.device(device)
    modes = amp_modes(device) if modes is None else modes
    data = _synthetic_batches(batches=batches, batch_size=batch_size, in_features=in_features,
                              classes=classes, seed=seed, device=device)
    torch.manual_seed(seed)
    initial = make_model()
    results = []
    for mode in modes:
        result = AmpResult(mode=mode.name, dtype=dtype_name(mode.dtype), steps=steps, skipped=mode.skipped)
        results.append(result)
        if not mode.skipped:
            _measure_mode(result, mode, copy.deepcopy(initial), data, device=device, steps=steps,
                          warmup=warmup, lr=lr)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


def _measure_mode(result: AmpResult, mode: AmpMode, model, data, *, device, steps: int, warmup: int,
                  lr: float) -> None:
    """Train ``model`` in ``mode`` and fill in ``result``: speed, last loss, memory."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    with track_cuda_memory(device) as usage:
        model = model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        scaler = torch.amp.GradScaler(device.type, enabled=mode.scaler)
        kwargs = dict(optimizer=optimizer, scaler=scaler, device_type=device.type, dtype=mode.dtype)
        for i in range(warmup):
            _step(model, *data[i % len(data)], **kwargs)
        with timing.stopwatch(device) as watch:
            for i in range(steps):
                loss = _step(model, *data[(warmup + i) % len(data)], **kwargs)
    result.seconds = watch.seconds
    result.steps_per_s = steps / result.seconds
    result.final_loss = loss.float().item()
    result.peak_bytes = usage.peak_bytes
    lowered = mode.dtype != torch.float32
    with SavedTensorMeter(exclude=list(model.parameters())) as meter:
        with torch.autocast(device_type=device.type, dtype=mode.dtype, enabled=lowered):
            F.cross_entropy(model(data[0][0]), data[0][1])
    result.saved_bytes = meter.bytes


def format_amp_results(results) -> str:
    """:func:`run_amp_benchmark`'s results as aligned text, its headers in the edition's language."""
    base = next((r for r in results if r.mode == "fp32" and not r.skipped), None)
    columns = [(say({"es": "modo", "en": "mode"}), 12, ""),
               (say({"es": "pasos/s", "en": "steps/s"}), 9, ".2f"),
               (say({"es": "aceleración", "en": "speed-up"}), 9, ""),
               (say({"es": "memoria pico", "en": "peak memory"}), 12, ""),
               (say({"es": "guardado para backward", "en": "saved for bwd"}), 14, ""),
               (say({"es": "pérdida final", "en": "final loss"}), 11, ".4f")]
    lines = _aligned(columns, [])[:1]                      # the header, without the rule
    width = max(12, len(columns[0][0]))
    skipped = say({"es": "omitido", "en": "skipped"})
    ran = []
    for r in results:
        if r.skipped:
            ran.append(None)
            continue
        speedup = r.steps_per_s / base.steps_per_s if base else math.nan
        ran.append((r.mode, r.steps_per_s, f"{speedup:.2f}x", format_bytes(r.peak_bytes),
                    format_bytes(r.saved_bytes), r.final_loss))
    measured = iter(_aligned(columns, [row for row in ran if row is not None])[2:])
    for r, row in zip(results, ran, strict=True):
        lines.append(f"{r.mode:{width}} {skipped}: {r.skipped}" if row is None else next(measured))
    return "\n".join(lines)


def plot_amp_benchmark(results, title: str = ""):
    """Three bar charts: steps per second, memory (CUDA peak, else bytes saved for backward), loss."""
    ran = [r for r in results if not r.skipped]
    names = [r.mode for r in results]
    colors = ["tab:blue", "tab:green", "tab:orange", "tab:purple"]
    use_peak = bool(ran) and all(r.peak_bytes is not None for r in ran)
    memory = (say({"es": "memoria pico (MiB)", "en": "peak memory (MiB)"}) if use_peak else
              say({"es": "guardado para la pasada hacia atrás, un paso (MiB)",
                   "en": "saved for backward, one step (MiB)"}))
    panels = [(say({"es": "pasos por segundo", "en": "steps per second"}), lambda r: r.steps_per_s),
              (memory, (lambda r: r.peak_bytes / 2**20) if use_peak else (lambda r: r.saved_bytes / 2**20)),
              (say({"es": "pérdida tras el último paso", "en": "loss after the last step"}),
               lambda r: r.final_loss)]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, (label, value) in zip(axes, panels, strict=True):
        for i, r in enumerate(results):
            if r.skipped:
                ax.text(i, 0, say({"es": "omitido", "en": "skipped"}), rotation=90, ha="center", va="bottom",
                        fontsize=8, color="gray")
                continue
            v = value(r)
            ax.bar(i, v, color=colors[i % len(colors)])
            ax.text(i, v, f"{v:.4g}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names)
        ax.set_title(label, fontsize=10)
        ax.margins(y=0.15)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------- compile
@dataclass
class CompileResult:
    eager_step_s: float = math.nan     # median seconds of one eager training step
    first_step_s: float = math.nan     # the first compiled step: compilation included
    compiled_step_s: float = math.nan  # median seconds of one compiled step, once compiled
    error: str = ""                    # why compiling failed; empty when it worked

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def speedup(self) -> float:
        return self.eager_step_s / self.compiled_step_s

    @property
    def break_even_steps(self) -> float:
        """Steps after which the compiled model has caught up with eager, compilation included."""
        saved = self.eager_step_s - self.compiled_step_s
        return math.inf if saved <= 0 else (self.first_step_s - self.compiled_step_s) / saved


@contextlib.contextmanager
def _quiet_compiler():
    """Silence the compiler stack's log lines and warnings (they go to stderr)."""
    names = ("torch._dynamo", "torch._inductor", "torch.utils.cpp_extension")
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def compile_benchmark(make_model, *, device, batch_size: int, in_features: int, steps: int,
                      classes: int = 10, lr: float = 0.05, seed: int = 0, backend: str = "inductor",
                      dtype: torch.dtype = torch.float32) -> CompileResult:
    """Time training steps of ``make_model()`` eagerly, then under ``torch.compile``.

    Compilation happens during the first call of the compiled model, so the first step is timed on
    its own. Any failure (no C++ compiler, an unsupported operation) is caught and returned in
    ``error``: compiling is an optimisation, never a reason for a lesson to stop.
    """
    device = torch.device(device)
    (x, y), = _synthetic_batches(batches=1, batch_size=batch_size, in_features=in_features,
                                 classes=classes, seed=seed, device=device)
    torch.manual_seed(seed)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    kwargs = dict(optimizer=optimizer, scaler=scaler, device_type=device.type, dtype=dtype)
    result = CompileResult()
    eager = timing.time_calls(lambda: _step(model, x, y, **kwargs), device=device, repeats=steps, warmup=2)
    result.eager_step_s = statistics.median(eager)
    try:
        with _quiet_compiler():
            torch.compiler.reset()                # compile from scratch: measure the real cost
            compiled = torch.compile(model, backend=backend)
            (first,) = timing.time_calls(lambda: _step(compiled, x, y, **kwargs), device=device, repeats=1,
                                         warmup=0)
            result.first_step_s = first
            fast = timing.time_calls(lambda: _step(compiled, x, y, **kwargs), device=device, repeats=steps,
                                     warmup=1)
            result.compiled_step_s = statistics.median(fast)
    except Exception as error:  # any compiler failure is reported, not raised
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        result.error = f"{type(error).__name__}: {' '.join(lines[:2])}"[:300]
    return result


def plot_compile(result: CompileResult, steps: int = 200):
    """Cumulative time of ``steps`` training steps, eager vs compiled (compilation included)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    n = torch.arange(0, steps + 1, dtype=torch.float64)
    eager = n * result.eager_step_s
    compiled = torch.where(n > 0, result.first_step_s + (n - 1).clamp(min=0) * result.compiled_step_s,
                           torch.zeros_like(n))
    eager_ms, first_s = result.eager_step_s * 1e3, result.first_step_s
    compiled_ms = result.compiled_step_s * 1e3
    ax.plot(n, eager, label=say({"es": f"eager: {eager_ms:.2f} ms/paso",
                                 "en": f"eager: {eager_ms:.2f} ms/step"}))
    ax.plot(n, compiled, label=say({
        "es": f"compilado: primer paso {first_s:.1f} s, después {compiled_ms:.2f} ms/paso",
        "en": f"compiled: first step {first_s:.1f} s, then {compiled_ms:.2f} ms/step"}))
    if math.isfinite(result.break_even_steps) and result.break_even_steps <= steps:
        ax.axvline(result.break_even_steps, color="gray", ls=":", lw=1)
        even = result.break_even_steps
        ax.text(even, 0, say({"es": f" compensa desde ≈ {even:.0f} pasos",
                              "en": f" break-even ≈ {even:.0f} steps"}), fontsize=8, va="bottom")
    ax.set_xlabel(say({"es": "pasos de entrenamiento", "en": "training steps"}))
    ax.set_ylabel(say({"es": "segundos, acumulados", "en": "seconds, cumulative"}))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
