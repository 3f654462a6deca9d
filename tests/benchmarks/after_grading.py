"""After-grading figures (part of ``make bench``): item analysis and similarity against grading time
on lesson 04, and the cost per submission of grading on a Dask cluster instead of local workers.

1. ``--sample`` distinct lesson-04 submissions (the reference with a random choice of bugs and
   stubs per exercise, half of them in Spanish) are graded for real, as ``make grade`` does
   (sandbox on, two workers): that gives the grading time per submission. Grading 200 lesson-04
   notebooks takes hours on two cores, so the class of ``--size`` students is then made of copies
   of those graded submissions (each student's submitted and autograded notebooks are one graded
   sample's), and item analysis and similarity run on it. Every sample has about ``size / sample``
   identical copies, so similarity lists many pairs: its page is as heavy as a class gets.
2. 40 submissions of lesson 01 are graded with ``--workers 2`` and on a ``distributed.LocalCluster``
   of two single-thread worker processes started beforehand; the difference, per submission, is what
   the cluster costs (the client's connection and the scatter of the lesson included).

Run it with ``python tests/benchmarks/after_grading.py`` (about 20 minutes on 2 cores).
"""

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from graders import nbgrader_adapter as adapter
from graders.grade import item_analysis, similarity
from graders.grade.classroom import Options, grade_class
from graders.grade.results import Row
from graders.lessons import edition_path, solution_path
from graders.release.editions import fill_solutions, filter_language, solution_sources

sys.path.insert(0, str(Path(__file__).parent))
from class_grading import make_class  # noqa: E402  (the 40 lesson-01 submissions of that benchmark)

LESSON = "04_training_loop"
# per exercise, what a student may hand in instead of the reference: a bug or the stub (None)
BUGS = {
    "accuracy": ["""
def accuracy(logits, targets):
    return (logits.argmax(dim=0) == targets).float().mean().item()
"""],
    "train_one_epoch": ["""
def train_one_epoch(model, loader, loss_fn, optimizer, device):
    model.train()
    total = 0.0
    for x, y in loader:
        loss = loss_fn(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)
"""],
    "evaluate": ["""
def evaluate(model, loader, loss_fn, device):
    total, correct, seen = 0.0, 0, 0
    for x, y in loader:
        logits = model(x.to(device))
        total += loss_fn(logits, y.to(device)).item() * len(y)
        correct += (logits.argmax(dim=1) == y.to(device)).sum().item()
        seen += len(y)
    return total / seen, correct / seen
"""],
    "accumulation_step": ["""
def accumulation_step(model, loss_fn, optimizer, micro_batches):
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
"""],
    "make_classifier": ["""
def make_classifier():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
"""],
}


def lesson04_sample(folder: Path, count: int, seed: int = 4) -> list[Path]:
    """``count`` distinct submissions: per exercise the reference, a bug or the stub, at random."""
    folder.mkdir(parents=True, exist_ok=True)
    reference = solution_sources(filter_language(nbformat.read(solution_path(LESSON), 4), "en"))
    editions = {lang: nbformat.read(edition_path(LESSON, lang), 4) for lang in ("en", "es")}
    chooser, seen, paths = random.Random(seed), set(), []
    while len(paths) < count:
        picks = {name: chooser.choice([code, code, *(b.strip() for b in BUGS.get(name, [])), None])
                 for name, code in reference.items()}
        key = tuple(sorted((k, v or "") for k, v in picks.items()))
        if key in seen:
            continue
        seen.add(key)
        nb = fill_solutions(editions["es" if len(paths) % 2 else "en"],
                            {name: code for name, code in picks.items() if code is not None})
        paths.append(folder / f"sample {len(paths):03d}.ipynb")
        nbformat.write(nb, paths[-1])
    return paths


def replicate(graded_out: Path, rows: list[Row], size: int, into: Path) -> list[Row]:
    """A course folder of ``size`` students, student k holding graded sample k mod len(rows)."""
    for kind in ("release", "source"):
        shutil.copytree(graded_out / "nbgrader" / kind, into / "nbgrader" / kind)
    copies = []
    for number in range(size):
        row = rows[number % len(rows)]
        copy = Row(f"student {number:03d}", f"student-{number:03d}", row.digest, row.status, row.reason,
                   row.cells)
        for kind in ("submitted", "autograded"):
            source = adapter.submission_path(graded_out / "nbgrader", kind, row.student_id, LESSON)
            target = adapter.submission_path(into / "nbgrader", kind, copy.student_id, LESSON)
            target.parent.mkdir(parents=True)
            if source.exists():
                shutil.copyfile(source, target)
        copies.append(copy)
    return copies


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def after_grading_figures(tmp: Path, size: int, sample: int) -> None:
    paths = lesson04_sample(tmp / "l04", sample)
    (rows, _), grading = timed(grade_class, Options(LESSON, tmp / "l04", tmp / "l04-out", workers=2,
                                                    progress=False))
    per_submission = grading / len(paths)
    cells = adapter.grade_cells(tmp / "l04-out" / "nbgrader", LESSON)
    copies = replicate(tmp / "l04-out", rows, size, tmp / "class")
    analysis, items_s = timed(item_analysis.analyse, tmp / "class" / "nbgrader", LESSON, copies, cells)
    _, items_write_s = timed(item_analysis.write_report, analysis, tmp / "class")
    report, similar_s = timed(similarity.analyse, tmp / "class" / "nbgrader", LESSON, copies)
    _, similar_write_s = timed(similarity.write_html, report, tmp / "class" / "similarity.html")
    estimate = per_submission * size
    print(f"{LESSON}: {sample} distinct submissions graded for real (sandbox, 2 workers) in {grading:.0f} s: "
          f"{per_submission:.1f} s per submission; {size} students would take ~{estimate:.0f} s")
    print(f"  item analysis on {size}: {items_s + items_write_s:.2f} s "
          f"({items_s:.2f} s analysis + {items_write_s:.2f} s page, CSV, picture): "
          f"{100 * (items_s + items_write_s) / estimate:.2f} % of grading")
    print(f"  similarity on {size} ({size * (size - 1) // 2} pairs, {len(report.pairs)} listed): "
          f"{similar_s + similar_write_s:.2f} s ({similar_s:.2f} s compare + {similar_write_s:.2f} s page): "
          f"{100 * (similar_s + similar_write_s) / estimate:.2f} % of grading")
    print(f"  flagged exercises: {', '.join(i.name for i in analysis.flagged) or 'none'}")


def dask_figures(tmp: Path, size: int = 40) -> None:
    from distributed import LocalCluster

    make_class(tmp / "l01", size)
    options = {"lesson": "01_tensors", "submissions": tmp / "l01", "workers": 2, "progress": False}
    (local_rows, _), local_s = timed(grade_class, Options(out_dir=tmp / "l01-local", **options))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        (dask_rows, _), dask_s = timed(grade_class, Options(out_dir=tmp / "l01-dask",
                                                       scheduler=cluster.scheduler_address, **options))
    same = [(r.student, r.cells, r.status) for r in local_rows] == \
        [(r.student, r.cells, r.status) for r in dask_rows]
    print(f"01_tensors, {size} submissions: --workers 2 {local_s:.1f} s; Dask LocalCluster (2 workers, "
          f"1 thread each) {dask_s:.1f} s; overhead {(dask_s - local_s) / size:+.2f} s per submission; "
          f"same scores: {same}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=200, help="students in the lesson-04 class")
    parser.add_argument("--sample", type=int, default=24, help="lesson-04 submissions graded for real")
    parser.add_argument("--skip-dask", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        after_grading_figures(Path(tmp), args.size, args.sample)
        if not args.skip_dask:
            dask_figures(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
