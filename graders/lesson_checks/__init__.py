"""Per-lesson checks, kernel side: what grade cells call, and the hints a student can ask for.

One module per lesson, named after its slug (``tensors`` for ``01_tensors``), holding its check
functions and the harnesses they need (probes, recorders), built on ``graders.checks``: what is
checked and how. Its hints live apart, in ``hints/<module>.toml``, in both languages:

- ``hints``: the first hint of each exercise, printed by a failing check. It points at the idea and
  the section that teaches it, never at the answer's code;
- ``more_hints``: a second, stronger hint, printed only when the student asks for it with
  ``hint("exercise id")`` in a cell of their own.

Its concept questions live in ``questions/<module>.toml``; what every lesson's questions share (the
draw, the scoring, whose draw is graded) is ``questions.py`` and ``identity.py``.

Reference solutions never live here: a student receives this package. They stay in the hidden
tests of the grade cells, which the release strips.
"""

import functools
import importlib
import pkgutil
import tomllib
from pathlib import Path
from typing import NamedTuple

__all__ = ["concept_questions", "hint", "lesson_hints"]

HINTS_DIR = Path(__file__).with_name("hints")
# What every lesson's concept questions share; the other modules are one per lesson.
_SHARED = ("identity", "questions")


class LessonHints(NamedTuple):
    """A lesson's hints by exercise id, each ``{"es": ..., "en": ...}``: the first ones, and the
    second ones ``hint()`` prints."""

    hints: dict
    more_hints: dict


@functools.cache
def lesson_hints(module: str) -> LessonHints:
    """The hints of the lesson whose check module is ``module`` (``tensors``, or its full name)."""
    data = tomllib.loads((HINTS_DIR / f"{module.rpartition('.')[2]}.toml").read_text(encoding="utf-8"))
    return LessonHints(data.get("hints", {}), data.get("more_hints", {}))


def concept_questions(module: str):
    """``(show_questions, check_concepts, grade_concepts)`` of the lesson whose check module is
    ``module``: its concept questions (``questions.py``), bound to its pool."""
    from graders import checks
    from graders.lesson_checks import questions

    def show_questions(student_id) -> None:
        """Print the concept questions drawn for the notebook's student, and the template to fill in."""
        questions.show_questions(module, student_id)

    @checks.keeps_random_state
    def check_concepts(answers, student_id) -> None:
        """The concept questions' visible part: ANSWERS answers the draw, each answer in its form."""
        __tracebackhide__ = True
        questions.check_concepts(module, answers, student_id)

    @checks.keeps_random_state
    def grade_concepts(answers, student_id, truths: dict, points: float) -> float:
        """The concept questions' hidden part: the cell's score."""
        return questions.grade_concepts(module, answers, student_id, truths, points)

    for function in (show_questions, check_concepts, grade_concepts):
        function.__module__ = module
    return show_questions, check_concepts, grade_concepts


def lesson_modules() -> list:
    """Every per-lesson check module, imported (for tests and tools; a kernel imports only its own)."""
    return [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
            if not info.name.startswith("_") and info.name not in _SHARED]


def more_hints() -> dict:
    """Every exercise's second hint, by exercise id, across lessons (read from the hint files, so that
    asking for a hint imports no other lesson's checks)."""
    return {exercise: texts for path in sorted(HINTS_DIR.glob("*.toml"))
            for exercise, texts in lesson_hints(path.stem).more_hints.items()}


def hint(exercise_id: str) -> None:
    """Print the second hint of an exercise (its id is the one its failing check names)."""
    from graders.checks import both, say  # here: the sandbox's launcher imports this package, torch-free

    hints = more_hints()
    if exercise_id not in hints:
        known = ", ".join(sorted(hints)) or "-"
        raise KeyError(say(both(
            f"no hay una segunda pista para {exercise_id!r}; la tienen: {known}",
            f"there is no second hint for {exercise_id!r}; these exercises have one: {known}",
        )))
    print(say(hints[exercise_id]))
