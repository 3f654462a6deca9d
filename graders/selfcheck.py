"""``make check NOTEBOOK=...``: run a student's notebook and say which visible checks pass.

It runs the notebook as the student has it (the student edition has no hidden tests) and scores
each grade cell with nbgrader's own rule. It cannot know what the hidden tests will say, and says so.
"""

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.utils import determine_grade

from graders.kernel_startup import KERNEL_ARGUMENTS
from graders.nbgrader_adapter import grade_id, is_grade_cell
from graders.nbgrader_settings import CELL_TIMEOUT_S
from graders.release.editions import edition_language

TEXT = {
    "en": {"title": "Visible checks of {name}", "pass": "pass", "fail": "FAIL",
           "total": "Visible checks passed: {ok} of {n} ({points:g} of {max:g} points).",
           "hidden": "Grading also runs hidden tests with other inputs: the final score can be lower."},
    "es": {"title": "Comprobaciones visibles de {name}", "pass": "bien", "fail": "FALLA",
           "total": "Comprobaciones visibles superadas: {ok} de {n} ({points:g} de {max:g} puntos).",
           "hidden": "Al calificar se ejecutan además pruebas ocultas con otras entradas: la nota final "
                     "puede ser menor."},
}


def _first_error(cell) -> str:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.ename}: {output.evalue}".splitlines()[0][:160]
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            return "stderr: " + output.get("text", "").strip().splitlines()[0][:150]
    return ""


def scored_grade_cells(nb, cwd, cell_timeout: int = CELL_TIMEOUT_S):
    """Execute ``nb`` in ``cwd`` in a grading kernel, cell by cell; after each grade cell, yield
    ``(cell, score, max_score)`` as nbgrader scores it. Closing the generator early stops the kernel
    without running the cells after."""
    client = NotebookClient(nb, timeout=cell_timeout, allow_errors=True, kernel_name="python3",
                            extra_arguments=list(KERNEL_ARGUMENTS),
                            resources={"metadata": {"path": str(cwd)}})
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)
            if is_grade_cell(cell):
                yield cell, *determine_grade(cell)


def run_visible_checks(path: Path, cell_timeout: int = CELL_TIMEOUT_S) -> tuple[str, bool]:
    """Execute ``path`` (in a copy) and return a report and whether every visible check passed."""
    path = Path(path)
    nb = nbformat.read(path, 4)
    os.environ.setdefault("COURSE_FAST", "1")
    words = TEXT[edition_language(nb)]
    lines = [words["title"].format(name=path.name), ""]
    passed = points = maximum = graded = 0
    for cell, score, max_score in scored_grade_cells(nb, path.parent.resolve(), cell_timeout):
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
