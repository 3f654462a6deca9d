"""Shared fixtures: a built nbgrader course per test worker, and the lessons to test."""

import copy

import nbformat
import pytest

from graders.editions import build_course, filter_language
from graders.lessons import available_lessons, edition_path, solution_path

LESSONS = available_lessons()


@pytest.fixture(scope="session")
def course_dir(tmp_path_factory):
    """An nbgrader course directory built from ``solutions/`` (English source, all lessons)."""
    return build_course(tmp_path_factory.mktemp("course"), "en", LESSONS)


def read_source(lesson: str, language: str = "en"):
    return filter_language(nbformat.read(solution_path(lesson), 4), language)


def read_edition(lesson: str, language: str):
    return nbformat.read(edition_path(lesson, language), 4)


def solution_cells(nb) -> list[str]:
    return [c.metadata.nbgrader["grade_id"] for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def replace_cell(nb, grade_id: str, source: str):
    """A copy of ``nb`` with the cell ``grade_id`` given a new source."""
    changed = copy.deepcopy(nb)
    for cell in changed.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
            return changed
    raise KeyError(grade_id)


def write(nb, path):
    nbformat.write(nb, path)
    return path
