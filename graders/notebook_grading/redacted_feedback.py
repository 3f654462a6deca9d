"""Feedback without hidden tests: neither their source, nor what their failure printed, nor any
output line that repeats them.

nbgrader puts hidden tests back before grading and, by design, shows them in feedback
(jupyter/nbgrader#917). This preprocessor runs in ``GenerateFeedback`` after the grades are read.
Hidden tests live only in the instructor's test cells (grade cells that are not answers, whose
source nbgrader restored from the gradebook before grading): only those are searched for the
markers. A student's own cells are shown as written, so marker text a student typed there (a
comment quoting ``### BEGIN HIDDEN TESTS``) neither hides their code nor makes nbgrader's
``ClearHiddenTests`` raise, which would fail the feedback.
The kernel's guard already removes hooks that could print a cell's source; redacting every output
line that reproduces a hidden test is the defence in depth behind it.

The HTML comes from nbconvert's exporter, whose templates are compiled once per process rather
than once per feedback file (:class:`FeedbackHTMLExporter`): a grading worker writes hundreds.
"""

import html
import re

from jinja2 import BytecodeCache
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_output
from nbgrader.preprocessors import ClearHiddenTests
from traitlets import Bool

from graders.nbgrader_adapter import is_grade_cell, is_solution_cell
from graders.release.editions import edition_language

HIDDEN_FAILED = {
    "es": "Una prueba oculta falló: prueba tu función con otras entradas (otras formas, "
    "valores límite, otros dtypes). Sus entradas no se muestran.",
    "en": "A hidden test failed: try your function on other inputs (other shapes, edge "
    "values, other dtypes). Its inputs are not shown.",
}
REDACTED = {"es": "[línea de una prueba oculta retirada]", "en": "[line of a hidden test removed]"}
# Shorter lines (``)``, ``else:``) say nothing about a test and appear everywhere.
MIN_SECRET_LENGTH = 12
_TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/javascript")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_LINE = re.compile(r"(?:Cell In\s*\[\d*\]|<ipython-input-[^>]*>), line (\d+)")


class _CompiledTemplates(BytecodeCache):
    """Jinja's compiled templates, kept in memory for the process (keyed by template file and
    checked against its source by Jinja)."""

    def __init__(self):
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self.code:
            bucket.bytecode_from_string(self.code[bucket.key])

    def dump_bytecode(self, bucket) -> None:
        self.code[bucket.key] = bucket.bytecode_to_string()


_TEMPLATES = _CompiledTemplates()


class FeedbackHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter (nbgrader's feedback templates and all), whose compiled templates
    outlive it: the next feedback file of the process skips compiling them again. What a student
    wrote or printed as HTML (Markdown, ``display(HTML(...))``) is sanitized: the page is opened by
    the instructor too, and no student's script may run there."""

    sanitize_html = Bool(True).tag(config=True)

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _TEMPLATES
        return environment


def holds_tests(cell) -> bool:
    """An instructor's test cell: a grade cell that is not an answer (the only place for hidden tests)."""
    return cell.cell_type == "code" and is_grade_cell(cell) and not is_solution_cell(cell)


def first_hidden_line(source: str, marker: str) -> int | None:
    for number, line in enumerate(source.split("\n"), start=1):
        if marker in line:
            return number
    return None


def failing_line(output) -> int | None:
    """The line of the grade cell where an error output's traceback starts, if it says."""
    for entry in output.get("traceback", []):
        match = _CELL_LINE.search(ANSI.sub("", entry))
        if match:
            return int(match.group(1))
    return None


def hidden_lines(nb, begin: str, end: str) -> set[str]:
    """The lines of the test cells' hidden tests that appear nowhere else in the notebook's code,
    stripped."""
    hidden, visible = set(), set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        inside = False
        for line in cell.source.split("\n"):
            if holds_tests(cell) and (begin in line or end in line):
                inside = begin in line
                continue
            (hidden if inside else visible).add(line.strip())
    return {line for line in hidden - visible if len(line) >= MIN_SECRET_LENGTH}


def redact(text: str, secrets: set[str], notice: str) -> str:
    """``text`` with every line that contains a secret line (plain or HTML-escaped) replaced."""
    needles = secrets | {html.escape(secret) for secret in secrets}
    lines = text.splitlines(keepends=True)
    return "".join(notice + line[len(line.rstrip("\r\n")):] if any(n in ANSI.sub("", line) for n in needles)
                   else line for line in lines)


class HideHiddenTests(ClearHiddenTests):
    """Remove hidden-test source, replace the error of a failed hidden test by a notice, and
    redact every output line, in any cell, that reproduces a line of a hidden test."""

    def preprocess(self, nb, resources):
        self._language = edition_language(nb)
        self._secrets = hidden_lines(nb, self.begin_test_delimeter, self.end_test_delimeter)
        nb, resources = super().preprocess(nb, resources)
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                self._redact_output(output)
        return nb, resources

    def _redact_output(self, output) -> None:
        if not self._secrets:
            return
        notice = REDACTED[self._language]
        if "text" in output:
            output.text = redact(output.text, self._secrets, notice)
        for mime in _TEXT_MIMES:
            if isinstance(output.get("data", {}).get(mime), str):
                output.data[mime] = redact(output.data[mime], self._secrets, notice)
        if output.get("output_type") == "error":
            output.evalue = redact(output.evalue, self._secrets, notice)
            output.traceback = [redact(line, self._secrets, notice) for line in output.traceback]

    def preprocess_cell(self, cell, resources, cell_index):
        if not holds_tests(cell):
            return cell, resources  # the student's own cell, marker text and all
        hidden_from = first_hidden_line(cell.source, self.begin_test_delimeter)
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if hidden_from is None:
            return cell, resources
        kept = []
        for output in cell.get("outputs", []):
            if output.output_type != "error":
                kept.append(output)
                continue
            line = failing_line(output)
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
