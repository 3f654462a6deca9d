"""Grading with stock nbgrader: put submissions in a course directory, autograde, read the gradebook."""

import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook

from graders.config import SANITIZE
from graders.editions import EditionError, nbgrader_api

# Grading what papermill already executed: the course's sanitize and autograde steps, less the
# two that would clear the outputs and run the notebook a second time.
WITHOUT_EXECUTION = {
    "sanitize_preprocessors": [step for step in SANITIZE if not step.endswith(".ClearOutput")],
    "autograde_preprocessors": [
        "nbconvert.preprocessors.ClearMetadataPreprocessor",
        "nbgrader.preprocessors.LimitOutput",
        "nbgrader.preprocessors.SaveAutoGrades",
        "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata",
    ],
}


@dataclass
class Score:
    """One submission's autograde result, straight from the gradebook."""

    score: float
    max_score: float
    cells: dict = field(default_factory=dict)  # grade_id → (score, max_score)


def submit(course_dir: Path, lesson: str, student: str, notebook: Path) -> None:
    """Place ``notebook`` where nbgrader expects a submission: ``submitted/<student>/<lesson>/``."""
    folder = Path(course_dir) / "submitted" / student / lesson
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copyfile(notebook, folder / f"{lesson}.ipynb")


def autograde(course_dir: Path, lesson: str, student: str, execute: bool = True) -> Score:
    """Run nbgrader's autograde on one submission and return its score."""
    api = nbgrader_api(Path(course_dir))
    if not execute:
        for name, value in WITHOUT_EXECUTION.items():
            setattr(api.config.Autograde, name, value)
    with warnings.catch_warnings():
        # nbgrader's own SQLAlchemy session warnings say nothing to a course user
        warnings.filterwarnings("ignore", module="nbgrader")
        result = api.autograde(lesson, student, force=True, create=True)
    if not result["success"]:
        raise EditionError(
            f"nbgrader autograde failed for {student}/{lesson}:\n"
            f"{result.get('error', '')}\n{result.get('log', '')}"
        )
    return read_score(course_dir, lesson, student)


def read_score(course_dir: Path, lesson: str, student: str) -> Score:
    """The gradebook's record of one submission (each lesson is one notebook of the same name)."""
    db_url = f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"
    with Gradebook(db_url) as gradebook:
        notebook = gradebook.find_submission_notebook(lesson, lesson, student)
        cells = {g.name: (g.score, g.max_score) for g in notebook.grades}
        return Score(notebook.score, notebook.max_score, cells)


def generate_feedback(course_dir: Path, lesson: str, student: str) -> Path:
    """nbgrader's HTML feedback for one graded submission (hidden tests removed); returns its path."""
    api = nbgrader_api(Path(course_dir))
    result = api.generate_feedback(lesson, student, force=True)
    if not result["success"]:
        raise EditionError(f"nbgrader generate_feedback failed for {student}/{lesson}:\n"
                           f"{result.get('error', '')}\n{result.get('log', '')}")
    return Path(course_dir) / "feedback" / student / lesson / f"{lesson}.html"
