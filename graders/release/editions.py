"""One source, two editions: filter a lesson per language, then let nbgrader make the student version.

Prose cells in ``solutions/`` carry a tag ``lang:es`` or ``lang:en``; untagged cells are shared, and
their comments and labels are translated from a catalogue (``graders.release.translation``).
"""

import copy
import shutil
from pathlib import Path

import nbformat

from course.settings import LANGUAGES
from graders import nbgrader_adapter as adapter
from graders.lessons import EDITIONS, available_lessons, solution_path
from graders.nbgrader_settings import write_config_file
from graders.release.translation import translate_notebook

TAG_PREFIX = "lang:"


class EditionError(RuntimeError):
    """A lesson source that cannot be split into editions."""


def cell_language(cell) -> str | None:
    """The language a cell belongs to, or ``None`` when it is shared by both editions."""
    tags = [t for t in cell.get("metadata", {}).get("tags", []) if t.startswith(TAG_PREFIX)]
    if not tags:
        return None
    if len(tags) > 1 or tags[0][len(TAG_PREFIX):] not in LANGUAGES:
        raise EditionError(
            f"cell {cell.get('id')} has language tags {tags}; use exactly one of "
            + ", ".join(TAG_PREFIX + lang for lang in LANGUAGES)
        )
    return tags[0][len(TAG_PREFIX):]


def edition_language(nb) -> str:
    """The language an edition was written for (``en`` for the bilingual source)."""
    return nb.get("metadata", {}).get("course", {}).get("language", "en")


def filter_language(nb, language: str):
    """A copy of ``nb`` with only the shared cells and those of ``language``."""
    if language not in LANGUAGES:
        raise EditionError(f"unknown language {language!r}; use one of {LANGUAGES}")
    filtered = copy.deepcopy(nb)
    filtered.cells = [c for c in filtered.cells if cell_language(c) in (None, language)]
    filtered.metadata.setdefault("course", {})["language"] = language
    return filtered


def strip_outputs(nb):
    """Outputs and execution counts removed, in place; returns ``nb``."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return nb


def build_course(course_dir: Path, language: str, lessons=None) -> Path:
    """An nbgrader course directory whose ``source/`` holds the ``language`` filter of each lesson.

    ``generate_assignment`` fills ``release/`` and the gradebook. An existing gradebook is kept:
    releasing again never loses grades.
    """
    course_dir = Path(course_dir)
    course_dir.mkdir(parents=True, exist_ok=True)
    write_config_file(course_dir, language)
    api = adapter.api(course_dir, language)
    for lesson in lessons or available_lessons():
        source = course_dir / "source" / lesson
        source.mkdir(parents=True, exist_ok=True)
        nb = filter_language(nbformat.read(solution_path(lesson), 4), language)
        nb = strip_outputs(translate_notebook(nb, lesson, language))
        nbformat.write(nb, source / f"{lesson}.ipynb")
        adapter.generate_assignment(api, lesson)
    return course_dir


def read_release(course_dir: Path, lesson: str, language: str):
    """The student version nbgrader released, tagged with its language."""
    nb = nbformat.read(Path(course_dir) / "release" / lesson / f"{lesson}.ipynb", 4)
    nb.metadata.setdefault("course", {})["language"] = language
    return strip_outputs(nb)


def release(build_dir: Path, editions_dir: Path = EDITIONS, lessons=None) -> list[Path]:
    """Regenerate ``notebooks/<lang>/NN_slug.ipynb`` for every language; returns the files written."""
    written = []
    lessons = lessons or available_lessons()
    for language in LANGUAGES:
        course_dir = Path(build_dir) / language
        if course_dir.exists():
            shutil.rmtree(course_dir)
        build_course(course_dir, language, lessons)
        (Path(editions_dir) / language).mkdir(parents=True, exist_ok=True)
        for lesson in lessons:
            target = Path(editions_dir) / language / f"{lesson}.ipynb"
            nbformat.write(read_release(course_dir, lesson, language), target)
            written.append(target)
    return written


def solution_sources(source_nb) -> dict:
    """``grade_id`` → source of every solution cell of a lesson source."""
    return {adapter.grade_id(cell): cell.source for cell in source_nb.cells
            if adapter.is_solution_cell(cell)}


def fill_solutions(edition_nb, solutions: dict):
    """A copy of a student edition with the given solution cells filled in (by ``grade_id``)."""
    filled = copy.deepcopy(edition_nb)
    for cell in filled.cells:
        if adapter.is_solution_cell(cell) and adapter.grade_id(cell) in solutions:
            cell.source = solutions[adapter.grade_id(cell)]
    return filled
