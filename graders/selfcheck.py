"""``make check NOTEBOOK=...``: run a student's notebook and say which visible checks pass.

It runs the notebook as the student has it (the student edition has no hidden tests), under the
conditions grading runs it under (the quick version, on the CPU, each cell stopped after
``CELL_TIMEOUT_S``: ``graders/nbgrader_settings.py``), whatever the student's own environment says,
and scores each grade cell with nbgrader's own rule. It cannot know what the hidden tests will say,
and says so.
"""

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.preprocessors import Execute
from nbgrader.utils import determine_grade

from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.nbgrader_adapter import grade_id, is_grade_cell
from graders.nbgrader_settings import CELL_TIMEOUT_S, GRADING_ENVIRONMENT
from graders.release.editions import edition_language

TEXT = {
    "en": {"title": "Visible checks of {name}", "pass": "pass", "fail": "FAIL",
           "total": "Visible checks passed: {ok} of {n} ({points:g} of {max:g} points).",
           "hidden": "Grading also runs hidden tests with other inputs: the final score can be lower.",
           "conditions": "Run as grading runs it: the quick version (COURSE_FAST=1), on the CPU, each cell "
                         "stopped after {timeout} s."},
    "es": {"title": "Comprobaciones visibles de {name}", "pass": "bien", "fail": "FALLA",
           "total": "Comprobaciones visibles superadas: {ok} de {n} ({points:g} de {max:g} puntos).",
           "hidden": "Al calificar se ejecutan además pruebas ocultas con otras entradas: la nota final "
                     "puede ser menor.",
           "conditions": "Ejecutado como al calificar: versión rápida (COURSE_FAST=1), en la CPU, cada celda "
                         "detenida a los {timeout} s."},
}


def _first_error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.ename}: {output.evalue}".splitlines()[0][:160]
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            return "stderr: " + output.get("text", "").strip().splitlines()[0][:150]
    return ""


def _keep_the_error(cell, cell_index, execute_reply) -> None:
    """As nbgrader's Execute does: a cell that failed without an error output of its own (it ran
    past the time limit) gets one, so that it is scored as failed."""
    content = execute_reply["content"]
    if content["status"] == "error" and not any(
            output.get("output_type") == "error" and output.get("ename") == content["ename"]
            for output in cell.outputs):
        cell.outputs.append(nbformat.v4.new_output("error", ename=content["ename"], evalue=content["evalue"],
                                                   traceback=content["traceback"]))


def scored_grade_cells(nb, cwd, cell_timeout: int = CELL_TIMEOUT_S, env: dict | None = None):
    """Execute ``nb`` in ``cwd`` in a grading kernel, cell by cell; after each grade cell, yield
    ``(cell, score, max_score)`` as nbgrader scores it. A cell that runs past ``cell_timeout`` is
    interrupted and fails, and the cells after it run, as in nbgrader's autograde. Closing the
    generator early stops the kernel without running the cells after. ``env``: the kernel's whole
    environment (default: this process's)."""
    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, kernel_name="python3",
                            extra_arguments=list(KERNEL_ARGUMENTS),
                            resources={"metadata": {"path": str(cwd)}}, interrupt_on_timeout=True,
                            error_on_timeout=Execute.class_traits()["error_on_timeout"].default(),
                            on_cell_executed=_keep_the_error)
    with client.setup_kernel(**({} if env is None else {"env": env})):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)
            if is_grade_cell(cell):
                yield cell, *determine_grade(cell)


def run_visible_checks(path: Path, cell_timeout: int = CELL_TIMEOUT_S) -> tuple[str, bool]:
    """Execute ``path`` (in a copy) under grading's conditions and return a report and whether every
    visible check passed."""
    path = Path(path)
    nb = nbformat.read(path, 4)
    words = TEXT[edition_language(nb)]
    lines = [words["title"].format(name=path.name), words["conditions"].format(timeout=cell_timeout), ""]
    passed = points = maximum = graded = 0
    env = {**os.environ, **GRADING_ENVIRONMENT}
    for cell, score, max_score in scored_grade_cells(nb, path.parent.resolve(), cell_timeout, env):
        ok = score == max_score
        graded += 1
        passed += ok
        points += score or 0
        maximum += max_score
        mark = words["pass"] if ok else words["fail"]
        detail = "" if ok else f"  {_first_error(cell)}"
        lines.append(f"  {mark:5} {grade_id(cell)} ({max_score:g}){detail}")
    lines += ["", words["total"].format(ok=passed, n=graded, points=points, max=maximum),
              words["hidden"]]
    return "\n".join(lines), passed == graded
