"""Wall-clock figures of the lessons' timing helpers, measured on this machine and printed.

The unit tests check what these helpers do with a fake clock, so that a busy machine cannot fail
them; the figures that need a real clock are here instead, to read rather than to assert:

- how close :func:`course.timing.time_calls`, :func:`~course.timing.time_per_call` and
  :func:`~course.timing.benchmark_median` come to a sleep of known length;
- what :func:`course.training.compare_loading` reports for a loader that costs nothing and for one
  whose every example sleeps 2 ms;
- steps per second of :func:`course.amp.run_amp_benchmark` on this device.

Run it with ``python tests/benchmarks/lesson_helpers.py`` (under 10 s on 2 CPU cores).
"""

import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from course import amp, timing, training

SLEEP_S = 0.002


class SlowDataset(TensorDataset):
    """An expensive per-example transform, played by a sleep."""

    def __getitem__(self, index):
        time.sleep(SLEEP_S)
        return super().__getitem__(index)


def sleep_timings(repeats: int) -> None:
    """Each timing helper against ``time.sleep(SLEEP_S)``: what it reports and how far off it is."""

    def nap():
        time.sleep(SLEEP_S)

    times = timing.time_calls(nap, device="cpu", repeats=repeats)
    rows = [("time_calls, median", statistics.median(times)),
            ("time_calls, fastest", min(times)),
            ("time_calls, slowest", max(times)),
            ("time_per_call", timing.time_per_call(nap, repeats=repeats)),
            ("benchmark_median", timing.benchmark_median(nap, min_run_time=0.2))]
    print(f"sleep of {SLEEP_S * 1e3:.1f} ms, {repeats} calls")
    for name, seconds in rows:
        print(f"  {name:22} {seconds * 1e3:8.3f} ms   {(seconds - SLEEP_S) * 1e6:+8.0f} µs off")


def loading_ratios() -> None:
    """``compare_loading`` on a free loader (ratio near 1) and on a loader that sleeps per example."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 6, generator=g), torch.randint(0, 3, (256,), generator=g)
    print("compare_loading, batches of 32 (loader / memory images per second)")
    for name, dataset, repeats in (("in-memory tensors", TensorDataset(x, y), 3),
                                   (f"{SLEEP_S * 1e3:.0f} ms per example", SlowDataset(x, y), 1)):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        result = training.compare_loading(model, DataLoader(dataset, batch_size=32),
                                          loss_fn=nn.CrossEntropyLoss(),
                                          optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                          device="cpu", batches=4, repeats=repeats, chunk=2)
        print(f"  {name:22} {result['loader_images_per_s']:>10,.0f} / {result['memory_images_per_s']:>10,.0f}"
              f"   ratio {result['ratio']:.3f}")


def amp_speeds(device) -> None:
    """Steps per second of a small matmul MLP in each precision this device runs."""
    results = amp.run_amp_benchmark(lambda: amp.make_matmul_mlp(256, 512, 4), device=device, steps=20,
                                    batch_size=64, in_features=256, warmup=3)
    print(f"run_amp_benchmark on {device}")
    print("  " + amp.format_amp_results(results).replace("\n", "\n  "))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50, help="timed calls of the sleep")
    parser.add_argument("--device", default="cpu", help="device of the AMP figures")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    sleep_timings(args.repeats)
    loading_ratios()
    amp_speeds(torch.device(args.device))
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
