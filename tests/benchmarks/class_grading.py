"""Class grading speed against stock nbgrader, and the sandbox's cost (part of ``make bench``).

Builds 40 submissions of lesson 01 (correct, partial, blank and broken ones that stock nbgrader
can also grade), grades them with ``course grade --workers 2`` and with stock ``nbgrader autograde``
run serially, and prints both times, their ratio and whether the scores agree. Then it grades 8 of
them with one worker with and without the sandbox, and prints the overhead per submission.
"""

import argparse
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


def stock_nbgrader(paths: list[Path], course_dir: Path) -> tuple[float, dict]:
    """Stock ``nbgrader autograde`` on every submission, one after another, as an instructor runs it."""
    build_course(course_dir, "en", [LESSON])
    for path in paths:
        target = course_dir / "submitted" / student_id(path.stem) / LESSON
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / f"{LESSON}.ipynb")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", LESSON], cwd=course_dir,
                   check=True, capture_output=True)
    seconds = time.perf_counter() - start
    with adapter.gradebook(course_dir) as gradebook:
        scores = {s.student.id: s.score for s in gradebook.assignment_submissions(LESSON)}
    return seconds, scores


def course_grader(folder: Path, out: Path, workers: int, sandbox: str = "auto") -> tuple[float, dict]:
    start = time.perf_counter()
    rows, _ = grade_class(Options(LESSON, folder, out, workers=workers, sandbox=sandbox, progress=False))
    return time.perf_counter() - start, {r.student_id: r.total for r in rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = make_class(tmp / "class", args.size)
        ours, our_scores = course_grader(tmp / "class", tmp / "ours", args.workers)
        stock, stock_scores = stock_nbgrader(paths, tmp / "stock")
        same = our_scores == stock_scores
        print(f"{args.size} submissions of {LESSON}")
        print(f"  course grade --workers {args.workers}: {ours:7.1f} s")
        print(f"  stock nbgrader autograde, serial: {stock:7.1f} s")
        print(f"  speed-up: {stock / ours:.2f}x; same scores: {same}")
        few = tmp / "few"
        few.mkdir()
        for path in paths[:8]:
            shutil.copy(path, few)
        boxed, _ = course_grader(few, tmp / "boxed", 1)
        bare, _ = course_grader(few, tmp / "bare", 1, sandbox="off")
        print(f"  sandbox overhead, one worker: {(boxed - bare) / 8:+.2f} s per submission "
              f"({boxed / 8:.2f} s sandboxed vs {bare / 8:.2f} s not)")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
