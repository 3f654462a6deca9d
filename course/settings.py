"""Lesson parameters read from the environment.

papermill injects parameters, but nbgrader's autograde cannot: reading the defaults from
``COURSE_FAST`` and ``COURSE_DEVICE`` makes both run a lesson the same way.
"""

import os

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def fast_from_env(default: bool = False) -> bool:
    """``COURSE_FAST``: ``1`` for small data and few steps (CI, grading), ``0`` for the full lesson."""
    raw = os.environ.get("COURSE_FAST", "").strip()
    if raw == "":
        return default
    if raw not in ("0", "1"):
        raise ValueError(
            f"COURSE_FAST must be 0 or 1, got {raw!r}. "
            "Use COURSE_FAST=1 for the quick version, COURSE_FAST=0 for the full lesson."
        )
    return raw == "1"


def device_from_env(default: str = "auto") -> str:
    """``COURSE_DEVICE``: one of auto, cpu, cuda, mps."""
    raw = os.environ.get("COURSE_DEVICE", "").strip().lower() or default
    if raw not in DEVICE_CHOICES:
        raise ValueError(
            f"COURSE_DEVICE must be one of {', '.join(DEVICE_CHOICES)}, got {raw!r}. "
            "Use COURSE_DEVICE=auto to take the best device this machine has."
        )
    return raw
