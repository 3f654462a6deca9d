"""Submission repairs nbgrader 0.9 lacks, run before its ``OverwriteCells``.

- A student who renames a grade cell's ``grade_id`` makes ``OverwriteCells`` fail on the whole
  submission (it drops the unknown id, then ``add_missing_cells`` trips over the cell left without
  one): such cells become plain cells, and nbgrader puts the real grade cell back.
- ``add_missing_cells`` inserts a deleted grade cell after the cell that precedes it in the
  source, and fails when that cell (the student's answer) was deleted too: a deleted answer cell
  comes back as the unanswered stub, so the grade cells after it are graded (and fail) normally.
"""

from nbformat.v4 import new_code_cell, new_markdown_cell
from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor

from graders.nbgrader_adapter import grade_id


def _stub(source_cell):
    make = new_code_cell if source_cell.cell_type == "code" else new_markdown_cell
    meta = {"nbgrader": {"grade": False, "grade_id": source_cell.name, "locked": False,
                         "schema_version": 3, "solution": True, "task": False}}
    return make(source_cell.source, metadata=meta)


class ForgetUnknownCells(NbGraderPreprocessor):
    """Forget grade ids the gradebook does not know; put deleted answer cells back as stubs."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            notebook = gradebook.find_notebook(info["notebook"], info["assignment"])
            ordered = list(notebook.source_cells)
            solutions = {cell.name for cell in notebook.solution_cells}
        known = {cell.name for cell in ordered}
        for cell in nb.cells:
            if "nbgrader" in cell.get("metadata", {}) and grade_id(cell) not in known:
                self.log.warning("Forgetting unknown grade id %r", grade_id(cell))
                del cell.metadata["nbgrader"]
        present = {grade_id(cell) for cell in nb.cells}
        for source_cell in ordered:
            if source_cell.name in solutions and source_cell.name not in present:
                self.log.warning("Answer cell %r was deleted: putting the stub back", source_cell.name)
                nb.cells.insert(self._after_previous(nb, ordered, source_cell), _stub(source_cell))
                present.add(source_cell.name)
        return nb, resources

    @staticmethod
    def _after_previous(nb, ordered, source_cell) -> int:
        """Index just after the submission's copy of the nearest earlier source cell, else 0."""
        earlier = [cell.name for cell in ordered[: ordered.index(source_cell)]]
        positions = {grade_id(cell): index for index, cell in enumerate(nb.cells)}
        for name in reversed(earlier):
            if name in positions:
                return positions[name] + 1
        return 0
