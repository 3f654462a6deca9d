"""Lesson settings: quick mode and device (read from the environment) and the edition's language.

Used by every lesson; taught in lesson 01 (tensors), setup cell.

papermill injects parameters, but nbgrader's autograde cannot: reading the defaults from
``COURSE_FAST`` and ``COURSE_DEVICE`` makes both run a lesson the same way. The language is set
by a cell of each edition (``course.set_language("es")``); checks and helpers speak it.
"""

import os

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
LANGUAGES = ("es", "en")
_language = "en"


def set_language(language: str) -> None:
    """Choose the language of every later message (``es`` or ``en``)."""
    global _language
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    _language = language


def get_language() -> str:
    """The edition's language, ``en`` until a lesson sets it."""
    return _language


def say(texts) -> str:
    """Pick the current language from ``{"es": ..., "en": ...}``; a plain string passes through.

    Checks and lesson helpers use it for every message, label and plot text a student reads.
    """
    if isinstance(texts, dict):
        return texts.get(_language) or texts.get("en") or next(iter(texts.values()))
    return str(texts)


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
