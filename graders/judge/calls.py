"""Exercises the judge decides from data: it chooses inputs, the kernel calls the student's function
on them and sends back what it returned, and the judge compares that with what the reference
solution returns for the same inputs, run here.

A lesson's judged exercises are :class:`graders.checks.JudgedCall` entries in its check module's
``JUDGED``, beside the kernel-side checks of the same exercises. The inputs are drawn from the class's secret
(:func:`class_secret`), the same for every student of a class and different from one term's secret
to the next, so that last term's printed values pass nothing; the reference's outcomes are computed
once per class and process (:func:`expected`).

A judged grade cell scores what the kernel's checks gave it, at most: its points when every call
matched the reference, else nothing. What the kernel reports can only take points away (a spy, a
switched-off shortcut); it never grants one alone.
"""

import ast
import functools
import hashlib
import importlib
import os
import secrets
from pathlib import Path

import nbformat
import torch

from graders.checks import JudgedCall, matches
from graders.judge import wire
from graders.judge.concepts import concept_cell
from graders.lessons import lesson_names, solution_path
from graders.nbgrader_adapter import grade_id, is_grade_cell, is_solution_cell

WORDS = {
    "es": {"differs": "El juez llamó a tu función con entradas suyas y el resultado no es el de la "
                      "solución (o la llamada falló): la celda no puntúa.",
           "no_data": "El juez no recibió los resultados de tu función ({why}): la celda no puntúa."},
    "en": {"differs": "The judge called your function on inputs of its own and the result is not the "
                      "reference's (or the call failed): the cell earns nothing.",
           "no_data": "The judge did not receive your function's results ({why}): the cell earns nothing."},
}
# The names every lesson's answers may use: the reference runs after them and the notebook's own
# import statements.
PRELUDE = """import math
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
"""
SECRET_ENV = "COURSE_JUDGE_SECRET"
SECRET_FILE = "judge_secret"


def judged(lesson: str) -> list[JudgedCall]:
    """The lesson's judged exercises (its check module's ``JUDGED``, none if it has no such list)."""
    module = importlib.import_module(f"graders.lesson_checks.{lesson_names(lesson).check_module}")
    return list(getattr(module, "JUDGED", ()))


def class_secret(out_dir: Path) -> str:
    """The secret the class's inputs are drawn from: ``COURSE_JUDGE_SECRET`` (one per term, set by the
    instructor), else one made for this results folder and kept there (0600), so a class graded
    again meets the same inputs."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV]
    path = Path(out_dir) / SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def _generator(secret: str, call: JudgedCall) -> torch.Generator:
    seed = hashlib.sha256(f"{secret}\0{call.grade_cell}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(seed[:8], "big"))


@functools.cache
def requests(lesson: str, secret: str) -> dict:
    """``{grade cell: [args, ...]}``: the inputs of every judged call of the class."""
    return {call.grade_cell: call.inputs(_generator(secret, call)) for call in judged(lesson)}


@functools.cache
def _imports_of(source: str) -> str:
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return ""
    return "".join(ast.unparse(node) + "\n" for node in body if isinstance(node, ast.Import | ast.ImportFrom))


def notebook_imports(source: nbformat.NotebookNode) -> str:
    """Every import statement at the top level of the notebook's code cells, and nothing else of them."""
    return "".join(_imports_of(cell.source) for cell in source.cells if cell.cell_type == "code")


def answer_cells(call: JudgedCall) -> tuple[str, ...]:
    """The grade ids of the answer cells ``call`` needs, in the order they run."""
    return (call.answer_cell,) if isinstance(call.answer_cell, str) else call.answer_cell


def reference_namespace(source: nbformat.NotebookNode, answers: tuple[str, ...]) -> dict:
    """A namespace of the judge's holding :data:`PRELUDE`, the notebook's imports, then the
    ``answers`` cells of ``source``, run in that order."""
    cells = {grade_id(cell): cell.source for cell in source.cells}
    namespace = {}
    exec(compile(PRELUDE + notebook_imports(source), "<reference imports>", "exec"), namespace)
    for name in answers:
        exec(compile(cells[name], f"<reference {name}>", "exec"), namespace)
    return namespace


def reference_answer(source: nbformat.NotebookNode, call: JudgedCall):
    """The reference's ``call.function``, from the lesson's solutions ``source``."""
    return reference_namespace(source, answer_cells(call))[call.function]


def outcome_of(call: JudgedCall, answer, args: tuple):
    """What ``call`` judges of ``answer`` on ``args``: its result, or its outcome."""
    return call.outcome(answer, *args) if call.outcome else answer(*args)


@functools.cache
def expected(source: Path, lesson: str, secret: str) -> dict:
    """``{grade cell: [result, ...]}``: what the reference (the answer cells of ``source``, the
    lesson's solutions) gives for each call's inputs."""
    notebook = nbformat.read(source, 4)
    results = {}
    for call in judged(lesson):
        asked = requests(lesson, secret)[call.grade_cell]
        if not answer_cells(call):  # a value the notebook makes (a trained model): ``accept`` judges it alone
            results[call.grade_cell] = [None] * len(asked)
            continue
        reference = reference_answer(notebook, call)
        results[call.grade_cell] = [outcome_of(call, reference, args) for args in asked]
    return results


def _outcome_name(call: JudgedCall) -> str | None:
    return f"{call.outcome.__module__}:{call.outcome.__qualname__}" if call.outcome else None


def probe_calls(lesson: str, secret: str) -> list[dict]:
    """The calls as the kernel's probe makes them: the notebook's name, the outcome to run on it (if
    any) and the inputs as plain data."""
    asked = requests(lesson, secret)
    return [{"cell": call.grade_cell, "function": call.function, "outcome": _outcome_name(call),
             "args": [[wire.encode(arg) for arg in args] for args in asked[call.grade_cell]]}
            for call in judged(lesson)]


def cell_scores(lesson: str, secret: str, source: Path, returned: dict | None, points: dict) -> dict:
    """``{grade cell: the judge's score}`` from what the kernel ``returned`` (``{grade cell: [result
    or an error, ...]}``, ``None`` when nothing came back): a cell's points when every call matched."""
    want, asked = expected(source, lesson, secret), requests(lesson, secret)
    scores = {}
    for call in judged(lesson):
        got = (returned or {}).get(call.grade_cell)
        accept = call.accept or (lambda g, w, args, call=call: matches(g, w, call.tolerance))
        wanted = want[call.grade_cell]
        right = isinstance(got, list) and len(got) == len(wanted) and all(
            not isinstance(g, wire.Refused) and accept(g, w, args)
            for g, w, args in zip(got, wanted, asked[call.grade_cell], strict=True))
        scores[call.grade_cell] = float(points[call.grade_cell]) if right else 0.0
    return scores


def coverage(lesson: str) -> tuple[float, float, list[str]]:
    """``(points, points the judge decides, the grade cells resting on the kernel's word alone)``."""
    source = nbformat.read(solution_path(lesson), 4)
    points = {grade_id(cell): float(cell.metadata["nbgrader"].get("points", 0)) for cell in source.cells
              if is_grade_cell(cell) and not is_solution_cell(cell)}
    concept = concept_cell(source.cells)
    judged_cells = {call.grade_cell for call in judged(lesson)} | ({concept.grade_id} if concept else set())
    return (sum(points.values()), sum(points[cell] for cell in judged_cells),
            sorted(set(points) - judged_cells))


if __name__ == "__main__":
    from graders.lessons import LESSONS

    totals = [0.0, 0.0]
    for name in LESSONS:
        total, decided, left = coverage(name)
        totals = [totals[0] + total, totals[1] + decided]
        print(f"{name:<20} {decided:>4g} of {total:>3g} points decided by the judge; on the kernel's word: "
              + (", ".join(left) or "none"))
    print(f"{'course':<20} {totals[1]:>4g} of {totals[0]:>3g} ({totals[1] / totals[0]:.0%})")
