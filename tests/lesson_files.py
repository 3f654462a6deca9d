"""Reading the lessons' sources and editions, and editing their cells, for the tests."""

import copy
import re

import nbformat
import torch

from graders.lessons import available_lessons, edition_path, solution_path
from graders.nbgrader_adapter import grade_id, is_grade_cell, is_solution_cell
from graders.release.editions import fill_solutions, filter_language, solution_sources

LESSONS = available_lessons()


def read_solution(lesson: str, language: str = "en"):
    return filter_language(nbformat.read(solution_path(lesson), 4), language)


def read_edition(lesson: str, language: str):
    return nbformat.read(edition_path(lesson, language), 4)


def solved_edition(lesson: str, language: str):
    """The student edition in ``language`` with the reference solutions filled in."""
    return fill_solutions(read_edition(lesson, language), solution_sources(read_solution(lesson)))


def graded_edition(lesson: str, language: str):
    """The student edition in ``language`` as nbgrader executes it for a student who answered with
    the reference: the solutions filled in, and each grade cell restored from the source (hidden
    tests included), as nbgrader's autograde restores them."""
    graded = solved_edition(lesson, language)
    tests = {grade_id(c): c.source for c in read_solution(lesson, language).cells
             if is_grade_cell(c) and not is_solution_cell(c)}
    for cell in graded.cells:
        if is_grade_cell(cell) and not is_solution_cell(cell):
            cell.source = tests[grade_id(cell)]
    return graded


def without_demonstrations(nb):
    """A copy of ``nb`` without the code cells after its set-up that are neither answers nor grade
    cells (examples, pictures, timings): what a student who deleted them hands in. The set-up is the
    code before the first nbgrader cell."""
    kept, first = copy.deepcopy(nb), next(i for i, c in enumerate(nb.cells) if is_grade_cell(c) or
                                          is_solution_cell(c))
    kept.cells = [c for i, c in enumerate(kept.cells) if c.cell_type != "code" or i < first or
                  is_grade_cell(c) or is_solution_cell(c)]
    return kept


def solution_cells(nb) -> list[str]:
    return [grade_id(c) for c in nb.cells if is_solution_cell(c)]


def replace_cell(nb, cell_id: str, source: str):
    """A copy of ``nb`` with the cell ``cell_id`` given a new source."""
    changed = copy.deepcopy(nb)
    for cell in changed.cells:
        if grade_id(cell) == cell_id:
            cell.source = source
            return changed
    raise KeyError(cell_id)


def without_cell(nb, cell_id: str):
    """A copy of ``nb`` without the cell ``cell_id``."""
    changed = copy.deepcopy(nb)
    changed.cells = [c for c in changed.cells if grade_id(c) != cell_id]
    return changed


def write(nb, path):
    nbformat.write(nb, path)
    return path


def browser_language(lesson: str) -> str:
    """The edition ``make test`` runs in JupyterLab for ``lesson``, alternating from one lesson to the
    next; ``make test-browser`` runs the other one too."""
    return "en" if LESSONS.index(lesson) % 2 == 0 else "es"


def hidden_answers(lesson: str) -> tuple[dict, dict]:
    """``(the reference ANSWERS, the hidden TRUTHS)`` of the lesson's concept cells, evaluated."""
    cells = {grade_id(c): c.source for c in read_solution(lesson).cells}
    found = {}
    for cell, name in (("concept_check", "ANSWERS"), ("test_concept_check", "TRUTHS")):
        literal = re.search(rf"^{name} = (\{{.*?^\}})", cells[cell], re.S | re.M).group(1)
        found[name] = eval(literal, {"torch": torch})
    return found["ANSWERS"], found["TRUTHS"]
