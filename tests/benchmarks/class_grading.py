"""Class grading speed against stock nbgrader, and the sandbox's cost (part of ``make bench``).

Builds 40 submissions of lesson 01 (correct, partial, blank and broken ones that stock nbgrader
can also grade), grades them with ``course grade --workers 2`` and with stock ``nbgrader autograde``
run serially, and prints both times, their ratio and whether the scores agree. Then it grades the
first ``--few`` (8) of them with one worker with and without the sandbox: the sandbox's overhead per
submission, and the course's cost per submission with one unsandboxed worker against stock's.
Stock's figures and those of the unsandboxed worker come with the CPU time they took (this process
and the children it waited for, user + system), which other work on a shared machine disturbs far
less than it does the wall-clock time (a sandboxed kernel is killed with its sandbox, so its CPU
time reaches no one here).

A quicker look: ``--size 12 --few 4`` (sizes that are multiples of 4 keep the mix of the class).
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from graders import nbgrader_adapter as adapter
from graders.grade.classroom import Options, grade_class
from graders.grade.submissions import student_id
from graders.lessons import edition_path, solution_path
from graders.release.editions import build_course, fill_solutions, filter_language, solution_sources

LESSON = "01_tensors"
BROKEN = {
    "sys_exit": ("pairwise_distances", "import sys\nsys.exit(0)"),
    "nan": ("normalize_rows", "def normalize_rows(counts):\n    return counts * float('nan')"),
    "raises": ("linear_forward", "def linear_forward(x, weight, bias):\n    return x @ weight"),
    "wrong": ("to_unit_float", "def to_unit_float(images):\n    return images"),
}


def make_class(folder: Path, size: int = 40) -> list[Path]:
    """``size`` submissions: half correct, a quarter partial or broken, a quarter blank."""
    folder.mkdir(parents=True, exist_ok=True)
    solutions = solution_sources(filter_language(nbformat.read(solution_path(LESSON), 4), "en"))
    editions = {lang: nbformat.read(edition_path(LESSON, lang), 4) for lang in ("es", "en")}
    broken = list(BROKEN.values())
    paths = []
    for number in range(size):
        lang = "es" if number % 2 else "en"
        nb = fill_solutions(editions[lang], solutions)
        if number % 4 == 1:
            grade_id, code = broken[number // 4 % len(broken)]
            nb = fill_solutions(nb, {grade_id: code})
        elif number % 4 == 3:
            nb = editions[lang]
        path = folder / f"student {number:02d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def _cpu_seconds() -> float:
    """User + system time of this process and of every child it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


class Cost:
    """Wall-clock and CPU seconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds()
        return self

    def __exit__(self, *_):
        self.wall, self.cpu = time.perf_counter() - self.wall, _cpu_seconds() - self.cpu


def stock_nbgrader(paths: list[Path], course_dir: Path) -> tuple[Cost, dict]:
    """Stock ``nbgrader autograde`` on every submission, one after another, as an instructor runs it."""
    build_course(course_dir, "en", [LESSON])
    for path in paths:
        target = course_dir / "submitted" / student_id(path.stem) / LESSON
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / f"{LESSON}.ipynb")
    with Cost() as cost:
        subprocess.run([sys.executable, "-m", "nbgrader", "autograde", LESSON], cwd=course_dir,
                       check=True, capture_output=True)
    with adapter.gradebook(course_dir) as gradebook:
        scores = {s.student.id: s.score for s in gradebook.assignment_submissions(LESSON)}
    return cost, scores


def course_grader(folder: Path, out: Path, workers: int, sandbox: str = "auto") -> tuple[Cost, dict]:
    with Cost() as cost:
        rows, _ = grade_class(Options(LESSON, folder, out, workers=workers, sandbox=sandbox,
                                      progress=False))
    return cost, {r.student_id: r.total for r in rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--few", type=int, default=8,
                        help="submissions graded by one worker, with and without the sandbox")
    args = parser.parse_args(argv)
    few_count = min(args.few, args.size)
    print(f"{args.size} submissions of {LESSON}; load average at the start {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = make_class(tmp / "class", args.size)
        ours, our_scores = course_grader(tmp / "class", tmp / "ours", args.workers)
        stock, stock_scores = stock_nbgrader(paths, tmp / "stock")
        same = our_scores == stock_scores
        print(f"  course grade --workers {args.workers}: {ours.wall:7.1f} s")
        print(f"  stock nbgrader autograde, serial: {stock.wall:7.1f} s ({stock.cpu:.1f} s CPU)")
        print(f"  speed-up: {stock.wall / ours.wall:.2f}x; same scores: {same}", flush=True)
        for student in sorted(set(our_scores) | set(stock_scores)):
            if our_scores.get(student) != stock_scores.get(student):
                print(f"    {student}: {our_scores.get(student)} here, {stock_scores.get(student)} by stock")
        few = tmp / "few"
        few.mkdir()
        for path in paths[:few_count]:
            shutil.copy(path, few)
        boxed, _ = course_grader(few, tmp / "boxed", 1)
        bare, _ = course_grader(few, tmp / "bare", 1, sandbox="off")
        n = few_count
        print(f"  sandbox overhead, one worker: {(boxed.wall - bare.wall) / n:+.2f} s per submission "
              f"({boxed.wall / n:.2f} s sandboxed vs {bare.wall / n:.2f} s not)")
        print(f"  per submission, one unsandboxed worker: {bare.wall / n:.2f} s ({bare.cpu / n:.2f} s CPU); "
              f"stock nbgrader: {stock.wall / args.size:.2f} s ({stock.cpu / args.size:.2f} s CPU): "
              f"{bare.wall / n / (stock.wall / args.size):.2f}x stock's "
              f"({bare.cpu / n / (stock.cpu / args.size):.2f}x in CPU)")
        print(f"  load average at the end {_load()} ({os.cpu_count()} cores)")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
