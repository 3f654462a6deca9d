"""Per-lesson checks, kernel side: what grade cells call, and the hints a student can ask for.

One module per lesson, named after its slug (``tensors`` for ``01_tensors``). Each module holds:

- check functions and harnesses (spy optimizers, probes, recorders) that the visible part of a
  grade cell calls, so that the cell reads like a specification;
- ``HINTS``: the first hint of each exercise, printed by a failing check. It points at the idea and
  the section that teaches it, never at the answer's code;
- ``MORE_HINTS``: a second, stronger hint, printed only when the student asks for it with
  ``hint("exercise id")`` in a cell of their own.

Reference solutions never live here: a student receives this package. They stay in the hidden
tests of the grade cells, which the release strips.
"""

import importlib
import pkgutil

from graders.checks import say


def lesson_modules() -> list:
    """Every per-lesson module of this package, imported."""
    return [importlib.import_module(f"{__name__}.{info.name}")
            for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]


def more_hints() -> dict:
    """Every exercise's second hint, by exercise id, across lessons."""
    return {exercise: texts for module in lesson_modules()
            for exercise, texts in getattr(module, "MORE_HINTS", {}).items()}


def hint(exercise_id: str) -> None:
    """Print the second hint of an exercise (its id is the one its failing check names)."""
    hints = more_hints()
    if exercise_id not in hints:
        known = ", ".join(sorted(hints)) or "-"
        raise KeyError(say({
            "es": f"no hay una segunda pista para {exercise_id!r}; la tienen: {known}",
            "en": f"there is no second hint for {exercise_id!r}; these exercises have one: {known}",
        }))
    print(say(hints[exercise_id]))
