"""How reliable lesson 07's torchrun launch is: the lesson's package, launched N times on this machine.

Each launch is the one the package checks make (``graders.lesson_checks.scale.package_run``): the
lesson's files (``graders/lesson_checks/scale_package``) and the reference ``minitrain/training.py`` (the
solution cell of ``solutions/07_scale.ipynb``), 2 processes, a configuration drawn afresh as the
visible checks draw it, and then the three checks on what the processes printed. A launch whose
process is killed by a signal is launched once more (``course.distributed.torchrun``); this script
counts the launches that succeeded at once, those that succeeded once retried and those that failed,
and groups the retries and failures by cause (numbers and addresses blurred), with one full message
per cause.

Run it with ``python tests/benchmarks/torchrun_launches.py`` (200 launches, about 10 s each on 2
busy cores); ``--launches N`` for fewer, ``--minutes M`` to stop after M minutes, whatever is left.
"""

import argparse
import collections
import re
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
import torch

from course import distributed
from graders import checks
from graders.lesson_checks import scale as lesson
from graders.lessons import solution_path
from graders.nbgrader_adapter import grade_id

LESSON = "07_scale"


def reference_training() -> str:
    """The solution's ``minitrain/training.py``, as its ``%%writefile`` cell writes it."""
    cell = next(c for c in nbformat.read(solution_path(LESSON), 4).cells if grade_id(c) == "ddp_training")
    first, _, body = cell.source.partition("\n")
    assert first == f"%%writefile {{RUN_DIR}}/{lesson.TRAINING_FILE}", first
    return body + "\n"


def blurred(cause: str) -> str:
    """A cause with its numbers and addresses blurred, so that alike failures fall together."""
    cause = re.sub(r"0x[0-9a-f]+", "0x…", cause)
    cause = re.sub(r"\[[0-9.:]+\]:\d+", "[…]:…", cause)
    return re.sub(r"\d+", "#", cause)[:240]


def configuration(generator: torch.Generator) -> dict:
    """What the visible checks draw once per kernel (``scale._session_run``)."""
    return {"world_size": 2, "batch_size": lesson._draw(generator, 8, 12),
            "examples": 2 * lesson._draw(generator, 60, 120), "epochs": 3,
            "seed": lesson._draw(generator, 0, 99_999)}


def checked(run) -> str:
    """``""`` when the launch worked and the three package checks pass on it; else the first line of
    why not."""
    if run.failure:
        return run.failure.splitlines()[0]
    for check in (lesson.check_ranks_agree_on, lesson.check_shards_on_run, lesson.check_learns_on):
        try:
            check(run)
        except checks.CheckFailed as failure:
            return str(failure).splitlines()[0]
    return ""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=200)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long (default: none)")
    parser.add_argument("--timeout", type=float, default=lesson.TORCHRUN_TIMEOUT_S,
                        help="seconds per launch")
    args = parser.parse_args(argv)

    launches = []
    original = distributed.torchrun

    def recording(*arguments, **options):
        launch = original(*arguments, **{**options, "report": lambda line: None})
        launches.append(launch)
        return launch

    distributed.torchrun = recording       # scale's checks launch through it
    generator = torch.Generator().manual_seed(7)
    outcomes, retried, failed, examples, seconds = collections.Counter(), collections.Counter(), \
        collections.Counter(), {}, []
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else float("inf")
    with tempfile.TemporaryDirectory(prefix="torchrun-launches-") as folder:
        (Path(folder) / "minitrain").mkdir()
        (Path(folder) / lesson.TRAINING_FILE).write_text(reference_training())
        for number in range(1, args.launches + 1):
            if time.monotonic() > deadline:
                print(f"stopped after {args.minutes:g} minutes")
                break
            lesson._RUNS.clear()            # a launch each time, not the cached one
            start = time.perf_counter()
            run = lesson.package_run(folder, timeout_s=args.timeout, **configuration(generator))
            seconds.append(time.perf_counter() - start)
            launch = launches[-1]
            verdict = checked(run)
            if launch.earlier is not None:
                cause = blurred(launch.earlier.cause())
                retried[cause] += 1
                examples.setdefault(("retried", cause), launch.earlier.errors())
            if verdict:
                cause = blurred(launch.cause() or verdict)      # a launch that worked: the check's word
                failed[cause] += 1
                examples.setdefault(("failed", cause), run.failure or verdict)
            outcomes["failed" if verdict else "retried, then passed" if launch.earlier else "passed"] += 1
            if number % 10 == 0:
                print(f"{number} launches, {dict(outcomes)}, {statistics.mean(seconds):.1f} s each",
                      flush=True)
    distributed.torchrun = original

    total = sum(outcomes.values())
    print(f"\n{total} launches of the lesson's package (2 processes), {statistics.mean(seconds):.1f} s each "
          f"(median {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s)")
    for outcome in ("passed", "retried, then passed", "failed"):
        print(f"  {outcome}: {outcomes[outcome]}")
    for title, causes in (("retried, by cause of the first launch", retried), ("failed, by cause", failed)):
        print(f"{title}:" + ("" if causes else " none"))
        for cause, count in causes.most_common():
            print(f"  {count} × {cause}")
    for (kind, cause), message in examples.items():
        print(f"\n--- {kind}: {cause}\n{message}")


if __name__ == "__main__":
    main()
