"""``course run`` (``make run``): execute every lesson with papermill, grade it with nbgrader, report.

Each lesson runs once: nbgrader grades the notebook papermill executed. A lesson that fails to run
or to grade is recorded with its error; the others still run and the report is always written.
"""

import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import torch

from course.device import describe_device, pick_device
from graders.lessons import BUILD, ROOT, available_lessons, solution_path
from graders.nbgrader_adapter import NbgraderFailed, grade_id
from graders.notebook_grading.autograde import autograde, submit
from graders.release.editions import build_course
from graders.run import CELL_TIMEOUT_S, LESSON_TIMEOUT_S
from graders.run.report import metrics_from_notebook, write_report

REFERENCE_STUDENT = "reference"


class LessonFailed(RuntimeError):
    """A lesson did not run to its end; the message names the lesson, the cell and the error."""


@dataclass
class LessonResult:
    name: str
    seconds: float
    score: float = 0.0
    max_score: float = 0.0
    metrics: dict = field(default_factory=dict)
    error: str = ""


PAPERMILL_TAGS = {"injected-parameters", "papermill-error-cell-tag"}


def _cell_label(index: int, cell) -> str:
    """``cell N [grade_id] `first line```, N counted from 1 as the lesson's author sees it."""
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    label = f"cell {index}" + (f" [{grade_id(cell)}]" if grade_id(cell) else "")
    return label + (f" `{first[:60]}`" if first else "")


def check_execution(nb, lesson: str) -> None:
    """Raise :class:`LessonFailed` unless every code cell ran without an error."""
    own = [c for c in nb.cells if not PAPERMILL_TAGS & set(c.get("metadata", {}).get("tags", []))]
    code = [(i, c) for i, c in enumerate(own, start=1) if c.cell_type == "code" and c.source.strip()]
    if not code:
        raise LessonFailed(f"{lesson}: the notebook has no code cells, so nothing ran.")
    for index, cell in code:
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                raise LessonFailed(
                    f"{lesson}: {_cell_label(index, cell)} raised "
                    f"{output.ename}: {output.evalue}".rstrip(": ")
                )
    never_ran = [(i, c) for i, c in code if c.get("execution_count") is None]
    if never_ran:
        index, cell = never_ran[0]
        raise LessonFailed(
            f"{lesson}: only {len(code) - len(never_ran)} of {len(code)} code cells ran; "
            f"{_cell_label(index, cell)} and those after it never did "
            "(the kernel died or the notebook stopped early, e.g. sys.exit())."
        )


def execute_lesson(notebook: Path, output: Path, *, fast: bool, device: str, cell_timeout: int,
                   lesson_timeout: int, progress: bool = True) -> float:
    """Run ``notebook`` through papermill in a child process; returns the seconds it took."""
    lesson = notebook.stem
    output.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COURSE_FAST="1" if fast else "0", COURSE_DEVICE=device)
    command = [sys.executable, "-m", "graders.run.papermill_child", str(notebook), str(output),
               "--cell-timeout", str(cell_timeout), "--cwd", str(ROOT)]
    if not progress:
        command.append("--no-progress")
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        child.wait(timeout=lesson_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the kernel is in the same session: it goes too
        child.wait()
        raise LessonFailed(f"{lesson}: still running after {lesson_timeout} s, stopped.") from None
    seconds = time.perf_counter() - start
    if not output.exists():
        raise LessonFailed(f"{lesson}: papermill wrote no output (exit code {child.returncode}).")
    check_execution(nbformat.read(output, 4), lesson)
    if child.returncode != 0:
        raise LessonFailed(f"{lesson}: papermill exited with code {child.returncode}.")
    return seconds


def run_lesson(lesson: str, course_dir: Path, out_dir: Path, **execution) -> LessonResult:
    """Execute one lesson, grade what ran, read its metrics; a failure becomes the result's error."""
    executed = Path(out_dir) / "executed" / f"{lesson}.ipynb"
    result = LessonResult(lesson, 0.0)
    try:
        result.seconds = execute_lesson(solution_path(lesson), executed, **execution)
        submit(course_dir, lesson, REFERENCE_STUDENT, executed)
        score = autograde(course_dir, lesson, REFERENCE_STUDENT, execute=False)
        result.score, result.max_score = score.score, score.max_score
        result.metrics = metrics_from_notebook(nbformat.read(executed, 4))
    except (LessonFailed, NbgraderFailed) as failure:
        result.error = str(failure)
        print(f"FAILED {failure}", file=sys.stderr, flush=True)
    return result


def run_course(lessons=None, *, fast: bool, device: str = "auto", out_dir: Path = BUILD,
               cell_timeout: int = CELL_TIMEOUT_S, lesson_timeout: int = LESSON_TIMEOUT_S,
               progress: bool = True) -> dict:
    """Execute and grade ``lessons``; write ``report.json`` and ``report.md`` into ``out_dir``."""
    lessons = list(lessons or available_lessons())
    device_name = describe_device(pick_device(device))
    course_dir = build_course(Path(out_dir) / "run" / "nbgrader", "en", lessons)
    results = []
    for number, lesson in enumerate(lessons, start=1):
        print(f"[{number}/{len(lessons)}] {lesson} (fast={fast}, device={device_name})", flush=True)
        results.append(run_lesson(lesson, course_dir, out_dir, fast=fast, device=device,
                                  cell_timeout=cell_timeout, lesson_timeout=lesson_timeout,
                                  progress=progress))
    report = {"device": device_name, "fast": fast, "torch": torch.__version__,
              "lessons": [asdict(r) for r in results]}
    write_report(report, Path(out_dir))
    return report
