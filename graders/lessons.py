"""Where the lessons and their editions live, and the names a lesson goes by."""

from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
EDITIONS = ROOT / "notebooks"
BUILD = ROOT / "build"
LESSONS = (
    "01_tensors",
    "02_autograd",
    "03_modules",
    "04_training_loop",
    "05_debugging_lab",
    "06_mixed_precision",
    "07_scale",
)

# The editions' languages (course.settings.LANGUAGES, kept here too: this module imports no torch).
LANGUAGES = ("es", "en")


class LessonNames(NamedTuple):
    """What one lesson is called where: ``01_tensors`` (its notebooks), ``tensors`` (its check
    module, ``graders.lesson_checks.tensors``) and ``01_tensors_es`` / ``_en`` (its editions'
    nbgrader assignments on the hub)."""

    lesson: str
    check_module: str
    assignments: dict


def lesson_names(lesson: str) -> LessonNames:
    """Every name of ``lesson`` (``NN_slug``)."""
    if lesson not in LESSONS:
        raise ValueError(f"no lesson {lesson!r}; the lessons are {', '.join(LESSONS)}")
    return LessonNames(lesson, lesson.partition("_")[2],
                       {language: f"{lesson}_{language}" for language in LANGUAGES})


def edition_of_assignment(assignment: str) -> tuple[str, str] | None:
    """``(lesson, language)`` of a hub assignment that :func:`lesson_names` names, else ``None``."""
    lesson, _, language = assignment.rpartition("_")
    return (lesson, language) if lesson in LESSONS and language in LANGUAGES else None


def available_lessons() -> list[str]:
    """The lessons whose source exists in ``solutions/``, in course order."""
    return [name for name in LESSONS if (SOLUTIONS / f"{name}.ipynb").exists()]


def solution_path(lesson: str) -> Path:
    return SOLUTIONS / f"{lesson}.ipynb"


def edition_path(lesson: str, language: str) -> Path:
    return EDITIONS / language / f"{lesson}.ipynb"
