"""Grading one notebook with stock nbgrader: submit it to a course directory, autograde, read the score."""

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from graders import nbgrader_adapter as adapter


@dataclass
class Score:
    """One submission's autograde result, straight from the gradebook."""

    score: float
    max_score: float
    cells: dict = field(default_factory=dict)  # grade_id → (score, max_score)


def submit(course_dir: Path, lesson: str, student: str, notebook: Path) -> None:
    """Place ``notebook`` where nbgrader expects a submission: ``submitted/<student>/<lesson>/``."""
    target = adapter.submission_path(course_dir, "submitted", student, lesson)
    if target.parent.exists():
        shutil.rmtree(target.parent)
    target.parent.mkdir(parents=True)
    shutil.copyfile(notebook, target)


def autograde(course_dir: Path, lesson: str, student: str, execute: bool = True) -> Score:
    """Run nbgrader's autograde on one submission and return its score.

    ``execute=False`` grades the outputs the notebook already has (what papermill executed).
    """
    pipeline = "stock" if execute else "already_executed"
    adapter.autograde(adapter.api(course_dir, pipeline=pipeline), lesson, student)
    return read_score(course_dir, lesson, student)


def read_score(course_dir: Path, lesson: str, student: str) -> Score:
    """The gradebook's record of one submission."""
    cells = adapter.submission_scores(course_dir, lesson, student)
    return Score(sum(s or 0 for s, _ in cells.values()), sum(m for _, m in cells.values()), cells)


def generate_feedback(course_dir: Path, lesson: str, student: str) -> Path:
    """nbgrader's HTML feedback for one graded submission (hidden tests removed); returns its path."""
    return adapter.generate_feedback(adapter.api(course_dir), lesson, student)
