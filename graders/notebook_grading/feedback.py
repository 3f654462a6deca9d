"""Feedback without hidden tests: neither their source nor what their failure printed.

nbgrader puts hidden tests back before grading and, by design, shows them in feedback
(jupyter/nbgrader#917). This preprocessor runs in ``GenerateFeedback`` after the grades are read.
"""

import re

from nbformat.v4 import new_output
from nbgrader.preprocessors import ClearHiddenTests

from graders.release.editions import edition_language

HIDDEN_FAILED = {
    "es": "Una prueba oculta falló: prueba tu función con otras entradas (otras formas, "
    "valores límite, otros dtypes). Sus entradas no se muestran.",
    "en": "A hidden test failed: try your function on other inputs (other shapes, edge "
    "values, other dtypes). Its inputs are not shown.",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_LINE = re.compile(r"(?:Cell In\s*\[\d*\]|<ipython-input-[^>]*>), line (\d+)")


def _first_hidden_line(source: str, marker: str) -> int | None:
    for number, line in enumerate(source.split("\n"), start=1):
        if marker in line:
            return number
    return None


def _failing_line(output) -> int | None:
    """The line of the grade cell where an error output's traceback starts, if it says."""
    for entry in output.get("traceback", []):
        match = _CELL_LINE.search(_ANSI.sub("", entry))
        if match:
            return int(match.group(1))
    return None


class HideHiddenTests(ClearHiddenTests):
    """Remove hidden-test source, and replace the error of a failed hidden test by a notice."""

    def preprocess(self, nb, resources):
        self._language = edition_language(nb)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        hidden_from = None
        if cell.cell_type == "code":
            hidden_from = _first_hidden_line(cell.source, self.begin_test_delimeter)
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if hidden_from is None:
            return cell, resources
        kept = []
        for output in cell.get("outputs", []):
            if output.output_type != "error":
                kept.append(output)
                continue
            line = _failing_line(output)
            if line is None or line >= hidden_from:
                notice = HIDDEN_FAILED[self._language]
                kept.append(new_output("error", ename="HiddenTestFailed", evalue=notice,
                                       traceback=[notice]))
            else:
                # A traceback quotes the lines around the failure, which can reach into the
                # hidden block: a visible failure keeps only its message.
                message = f"{output.ename}: {output.evalue}"
                kept.append(new_output("error", ename=output.ename, evalue=output.evalue,
                                       traceback=[message]))
        cell.outputs = kept
        return cell, resources
