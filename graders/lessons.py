"""Where the lessons and their editions live."""

from pathlib import Path

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


def available_lessons() -> list[str]:
    """The lessons whose source exists in ``solutions/``, in course order."""
    return [name for name in LESSONS if (SOLUTIONS / f"{name}.ipynb").exists()]


def solution_path(lesson: str) -> Path:
    return SOLUTIONS / f"{lesson}.ipynb"


def edition_path(lesson: str, language: str) -> Path:
    return EDITIONS / language / f"{lesson}.ipynb"
