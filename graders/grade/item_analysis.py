"""What the class got wrong, exercise by exercise: ``item_analysis.html``, ``.csv`` and ``.png``.

Computed in the parent after grading, from the rows (the scores) and the autograded notebooks
(what each failing grade cell printed). Per grade cell: mean score, share of full marks and of
zero, the discrimination index, and the visible-vs-hidden gap: how many students passed the
visible checks and failed the hidden tests. An exercise whose gap exceeds a third of the students
is flagged: its visible checks do not describe the task.

A failing grade cell is sorted by where it failed, with the same rule as the students' feedback
(``graders.notebook_grading.redacted_feedback``): before the hidden-tests marker it is a visible failure,
at or after it a hidden one. A cell that ran out of time, or that failed in a notebook the grader
had to run again without a cell that killed or hung the kernel, is counted apart, so that a
grader incident never reads as a misunderstanding (after such a rerun, a ``NameError`` is the
incident's too when the skipped cell was the exercise's own answer or would have defined the name).
"""

import ast
import csv
import html
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.preprocessors import ClearHiddenTests

from graders import nbgrader_adapter as adapter
from graders.checks import WORDS
from graders.grade.resilient_execute import INCIDENT
from graders.grade.results import identity_notes
from graders.notebook_grading.redacted_feedback import ANSI, failing_line, first_hidden_line

KINDS = ("visible", "hidden", "timeout", "incident")
KIND_LABELS = {"visible": "visible check", "hidden": "hidden test", "timeout": "ran out of time",
               "incident": "grader incident"}
ANALYSED = ("graded", "partial")  # the statuses whose notebooks ran and were autograded
HIDDEN_MARKER = ClearHiddenTests.begin_test_delimeter.default_value
# what a cell shows when the grader interrupted it at its time limit (nbclient's reply, the kernel's)
TIMED_OUT = ("CellTimeoutError", "KeyboardInterrupt")
TOP_MESSAGES = 3

# Spanish editions print the checks' words in Spanish: one error, one message, in either edition.
_TO_ENGLISH = {es: WORDS["en"][key] for key, es in WORDS["es"].items()}
_LABEL = re.compile(r"^(\s*)(\w+): ", flags=re.MULTILINE)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])")
_NUMBERS = re.compile(r"#(?:\s*,\s*#)+")


@dataclass
class Failure:
    """Why one student's grade cell failed: a kind (see ``KINDS``) and the message it printed."""

    kind: str
    message: str


@dataclass
class Item:
    """One exercise (grade cell) across the class."""

    name: str
    points: float
    students: int
    mean: float
    full: float  # share of students with full marks
    zero: float  # share of students with no marks
    discrimination: float | None  # None when the item or the rest of the total does not vary
    counts: dict = field(default_factory=dict)  # kind -> students
    messages: list = field(default_factory=list)  # (kind, example message, students), commonest first

    @property
    def gap(self) -> int:
        """Students who passed the visible checks and failed the hidden tests."""
        return self.counts.get("hidden", 0)

    @property
    def flagged(self) -> bool:
        return self.gap > self.students / 3


@dataclass
class ItemAnalysis:
    lesson: str
    items: list
    analysed: int
    left_out: dict  # status -> submissions not analysed (they never ran: invalid, wrong lesson…)
    identity_notes: list = field(default_factory=list)  # notebooks not answering their own questions
    tampering: dict = field(default_factory=dict)  # student → what their code reaches for (leads)

    @property
    def flagged(self) -> list:
        return [item for item in self.items if item.flagged]


# -- failure messages -----------------------------------------------------------------------
def normalise(message: str) -> str:
    """The message an error stands for: numbers and the edition's language do not make it another.

    The hint and detail lines are dropped (the hint is the same for every student of an exercise),
    the checks' Spanish words are put in English, and every run of numbers becomes one ``#``.
    """
    lines = [line for line in message.strip().splitlines()
             if not re.match(r"\s*(hint|pista|detail|detalle): ", line)]
    return _NUMBERS.sub("#", _NUMBER.sub("#", _english("\n".join(lines)))).strip()


def _english(text: str) -> str:
    for spanish, english in sorted(_TO_ENGLISH.items(), key=lambda pair: -len(pair[0])):
        text = text.replace(spanish, english)
    return text


def _shown(message: str) -> str:
    """A message as the report shows it: in English, without the hint line every student saw alike."""
    return _english("\n".join(line for line in message.strip().splitlines()
                               if not re.match(r"\s*(hint|pista): ", line)))


def _incident_kind(reason: str) -> str:
    return "timeout" if ("did not stop" in reason or "ran past" in reason) else "incident"


def _error_text(output: dict) -> str:
    if output.get("evalue"):
        return f"{output['ename']}: {output['evalue']}"
    first = ANSI.sub("", (output.get("traceback") or [""])[-1]).strip()
    return first.rstrip(": ") if first.startswith(output["ename"]) else output["ename"]


@dataclass
class Skipped:
    """The cells a rerun left out because they killed or hung the kernel: the first one's reason,
    and the names they define (``None`` when a source is unknown or does not parse)."""

    reason: str
    names: set | None

    def explains(self, error: dict, own_answer_skipped: bool) -> bool:
        """Whether ``error`` is a name missing because of the skipped cells: the exercise's own
        answer was one of them, or one of them would have defined that name."""
        missing = re.match(r"name '(\w+)' is not defined", error.get("evalue", ""))
        return error["ename"] == "NameError" and (own_answer_skipped or self.names is None
                                                  or bool(missing) and missing[1] in self.names)


def defined_names(source: str) -> set | None:
    """The names a cell's code binds at any depth; ``None`` when it does not parse (magics…)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _classify(cell: dict, skipped: Skipped | None, own_answer_skipped: bool = False) -> Failure | None:
    """Why a grade cell failed, or ``None`` when its outputs hold no error and nothing on stderr."""
    outputs = cell.get("outputs", [])
    error = next((o for o in outputs if o.get("output_type") == "error"), None)
    if error is None:
        stderr = [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        if not stderr:
            return None
        first = ("".join(stderr[0].get("text", "")).strip().splitlines() or [""])[0]
        return Failure("visible", f"wrote to stderr: {first}")
    if error["ename"] == INCIDENT:
        return Failure(_incident_kind(error["evalue"]), error["evalue"])
    if any(o.get("ename") in TIMED_OUT for o in outputs if o.get("output_type") == "error"):
        return Failure("timeout", "the cell ran past its time limit and was interrupted")
    if skipped is not None and skipped.explains(error, own_answer_skipped):
        # the notebook ran again without the cell that killed or hung the kernel: its names are missing
        return Failure(_incident_kind(skipped.reason),
                       f"after a grader incident ({skipped.reason}): {_error_text(error)}")
    source = "".join(cell.get("source", ""))
    hidden_from = first_hidden_line(source, HIDDEN_MARKER)
    line = failing_line(error)
    hidden = hidden_from is not None and (line is None or line >= hidden_from)
    return Failure("hidden" if hidden else "visible", _error_text(error))


def _sources(submitted: dict | None) -> dict:
    """A submission's cell sources by grade id and by cell id, to find what a skipped cell held."""
    found = {}
    for cell in (submitted or {}).get("cells", []):
        source = "".join(cell.get("source", ""))
        for key in (adapter.grade_id(cell), cell.get("id")):
            if key:
                found.setdefault(key, source)
    return found


def notebook_failures(nb: dict, submitted: dict | None = None) -> dict[str, Failure]:
    """``grade_id`` -> :class:`Failure` of every grade cell of an autograded notebook that failed.

    ``submitted``, the notebook as the student sent it, holds the source of any cell the grader
    had to skip (the autograded notebook holds only the error that replaced it).
    """
    failures: dict[str, Failure] = {}
    originals = _sources(submitted)
    skipped: Skipped | None = None
    answer_skipped = False  # whether the answer cell just before a grade cell was skipped
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        if adapter.is_grade_cell(cell):
            failure = _classify(cell, skipped, answer_skipped)
            name = adapter.grade_id(cell)
            if failure is not None and name not in failures:
                failures[name] = failure
        reason = next((o["evalue"] for o in cell.get("outputs", []) if o.get("ename") == INCIDENT), None)
        if adapter.is_solution_cell(cell):
            answer_skipped = reason is not None
        if reason is not None and not adapter.is_grade_cell(cell):
            source = originals.get(adapter.grade_id(cell)) or originals.get(cell.get("id"))
            names = None if source is None else defined_names(source)
            if skipped is None:
                skipped = Skipped(reason, names)
            elif names is None or skipped.names is None:
                skipped = Skipped(skipped.reason, None)
            else:
                skipped = Skipped(skipped.reason, skipped.names | names)
    return failures


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


# -- statistics -----------------------------------------------------------------------------
def discrimination(item_scores: list[float], totals: list[float]) -> float | None:
    """Correlation of an item's scores with the total without that item (``None`` if either is flat)."""
    rest = [total - score for score, total in zip(item_scores, totals, strict=True)]
    if len(item_scores) < 2 or len(set(item_scores)) < 2 or len(set(rest)) < 2:
        return None
    return statistics.correlation(item_scores, rest)


def _item(name: str, points: float, scores: list[float], totals: list[float],
          failures: list[Failure]) -> Item:
    students = len(scores)
    counts = Counter(f.kind for f in failures)
    groups: dict[str, list[Failure]] = {}
    for failure in failures:
        groups.setdefault(normalise(failure.message), []).append(failure)
    common = sorted(groups.values(), key=len, reverse=True)[:TOP_MESSAGES]
    return Item(name, points, students,
                mean=sum(scores) / students if students else 0.0,
                full=sum(s >= points for s in scores) / students if students else 0.0,
                zero=sum(s == 0 for s in scores) / students if students else 0.0,
                discrimination=discrimination(scores, totals),
                counts={kind: counts.get(kind, 0) for kind in KINDS},
                messages=[(group[0].kind, _shown(group[0].message), len(group)) for group in common])


def analyse(course_dir: Path, lesson: str, rows: list, grade_cells: dict) -> ItemAnalysis:
    """The item analysis of a graded class: ``rows`` from the grader, notebooks from ``course_dir``."""
    analysed, failures = [], []
    for row in rows:
        path = adapter.submission_path(course_dir, "autograded", row.student_id, lesson)
        if row.status in ANALYSED and path.exists():
            analysed.append(row)
            submitted = _read(adapter.submission_path(course_dir, "submitted", row.student_id, lesson))
            failures.append(notebook_failures(_read(path) or {}, submitted))
    ran = {row.student_id for row in analysed}
    left_out = Counter(row.status for row in rows if row.student_id not in ran)
    totals = [row.total for row in analysed]
    items = []
    for name, points in grade_cells.items():
        scores = [float(row.cells.get(name, [0.0])[0]) for row in analysed]
        # a cell that lost points says why; one that kept them may still have printed an error
        lost = [found[name] for found, score in zip(failures, scores, strict=True)
                if score < points and name in found]
        lost += [Failure("visible", "(scored below full marks without an error output)")
                 for found, score in zip(failures, scores, strict=True)
                 if score < points and name not in found]
        items.append(_item(name, float(points), scores, totals, lost))
    return ItemAnalysis(lesson, items, len(analysed), dict(left_out), identity_notes(rows),
                        {row.student: row.tampering for row in rows if row.tampering})


# -- the report -----------------------------------------------------------------------------
CSV_COLUMNS = ("exercise", "points", "students", "mean", "full_marks_share", "zero_share",
               "discrimination", "failed_visible", "failed_hidden_only", "timeouts", "incidents",
               "flagged")


def write_csv(analysis: ItemAnalysis, path: Path) -> Path:
    """One line per exercise, then its commonest messages as ``message_k``/``kind_k``/``count_k``."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        extra = [f"{what}_{k}" for k in range(1, TOP_MESSAGES + 1) for what in ("message", "kind", "count")]
        writer.writerow([*CSV_COLUMNS, *extra])
        for item in analysis.items:
            messages = [value for kind, text, count in item.messages for value in (text, kind, count)]
            writer.writerow([item.name, f"{item.points:g}", item.students, f"{item.mean:.3f}",
                             f"{item.full:.3f}", f"{item.zero:.3f}",
                             "" if item.discrimination is None else f"{item.discrimination:.3f}",
                             item.counts["visible"], item.counts["hidden"], item.counts["timeout"],
                             item.counts["incident"], int(item.flagged), *messages])
    return path


COLOURS = {"full": "#2e7d32", "visible": "#ef6c00", "hidden": "#c62828", "other": "#9e9e9e"}


def draw(analysis: ItemAnalysis, path: Path) -> Path:
    """Per exercise, the share of students failing hidden tests only (first, against the flag's
    threshold), failing visibly, failing through a timeout or an incident, and with full marks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = analysis.items[::-1]  # the first exercise on top
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(items) + 1.8))
    share = max(analysis.analysed, 1)
    parts = [("passed visible, failed hidden", COLOURS["hidden"], lambda i: i.counts["hidden"]),
             ("failed a visible check", COLOURS["visible"], lambda i: i.counts["visible"]),
             ("timeout or incident", COLOURS["other"],
              lambda i: i.counts["timeout"] + i.counts["incident"]),
             ("full marks", COLOURS["full"], lambda i: i.full * i.students)]
    left = [0.0] * len(items)
    for label, colour, count in parts:
        widths = [count(item) / share for item in items]
        ax.barh(range(len(items)), widths, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(range(len(items)), [("⚑ " if item.flagged else "") + item.name for item in items])
    ax.axvline(1 / 3, color="black", linestyle=":", linewidth=1.5)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"share of the {analysis.analysed} students whose notebook ran; ⚑ flagged: the red "
                  "bar passes the dotted line (a third)", fontsize=9)
    ax.set_title(f"{analysis.lesson}: what the class got wrong")
    fig.legend(loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Item analysis: {lesson}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }}
th:first-child, td:first-child {{ text-align: left; }}
tr.flagged td {{ background: #ffebee; }}
pre {{ white-space: pre-wrap; margin: 0; font-size: 0.85em; }}
.kind {{ font-size: 0.75em; padding: 0.1em 0.4em; border-radius: 0.3em; color: white; }}
.visible {{ background: {visible}; }} .hidden {{ background: {hidden}; }}
.timeout, .incident {{ background: {other}; }}
.note {{ color: #555; max-width: 60em; }}
</style></head><body>
<h1>Item analysis: {lesson}</h1>
<p>{analysed} submissions analysed{left_out}. {flag_line}</p>
{identities}
<img src="{picture}" alt="share of students per outcome, per exercise" style="max-width: 100%; width: 820px">
<table>
<tr><th>exercise</th><th>points</th><th>mean</th><th>full marks</th><th>zero</th>
<th>discrimination</th><th>failed visible</th><th>passed visible,<br>failed hidden</th>
<th>timeout</th><th>incident</th></tr>
{rows}
</table>
<p class="note"><b>Discrimination</b>: the correlation between an exercise's score and the rest of
the total; near 0 or negative, the exercise does not tell strong students from weak ones (— when
everyone scored alike). <b>Passed visible, failed hidden</b>: the student's code passed the checks
the notebook shows and failed the hidden tests; when this exceeds a third of the students the
exercise is flagged (⚑): its visible checks do not describe the task. <b>Timeout</b> and
<b>incident</b> are failures the grader caused or recorded (a cell that ran out of time, a kernel
that died or hung, and cells that failed after the notebook was run again without such a cell):
they are not counted as misunderstandings.</p>
<h2>Commonest failures, per exercise</h2>
<p class="note">Messages that differ only in their numbers count as one; hidden tests' messages
are shown here (this page is for instructors) and never in the students' feedback.</p>
{messages}
</body></html>
"""


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def _table_row(item: Item) -> str:
    cells = [("⚑ " if item.flagged else "") + html.escape(item.name), f"{item.points:g}",
             f"{item.mean:.2f}", _percent(item.full), _percent(item.zero),
             "—" if item.discrimination is None else f"{item.discrimination:+.2f}",
             *(str(item.counts[kind]) for kind in KINDS)]
    css = " class='flagged'" if item.flagged else ""
    return f"<tr{css}>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _messages_html(item: Item) -> str:
    if not item.messages:
        return f"<h3>{html.escape(item.name)}</h3><p>No failures.</p>"
    lines = "".join(f"<tr><td><span class='kind {kind}'>{KIND_LABELS[kind]}</span></td>"
                    f"<td>{count}</td><td style='text-align:left'><pre>{html.escape(text)}</pre></td></tr>"
                    for kind, text, count in item.messages)
    return (f"<h3>{html.escape(item.name)}</h3><table><tr><th>where</th><th>students</th>"
            f"<th>message (first example)</th></tr>{lines}</table>")


def _identities_html(analysis: ItemAnalysis) -> str:
    if not analysis.identity_notes:
        return ""
    notes = "".join(f"<li>{html.escape(note)}</li>" for note in analysis.identity_notes)
    return f"<h2>Concept questions: whose were answered</h2><ul>{notes}</ul>"


def _tampering_html(analysis: ItemAnalysis) -> str:
    if not analysis.tampering:
        return ""
    leads = "".join(f"<li><b>{html.escape(student)}</b><ul>"
                    + "".join(f"<li><code>{html.escape(lead)}</code></li>" for lead in found) + "</ul></li>"
                    for student, found in sorted(analysis.tampering.items()))
    return ("<h2>Code that reaches for the grader's machinery</h2><p>Graded like any other: points "
            "are not decided by what a kernel reports. Leads for a human, not verdicts.</p>"
            f"<ul>{leads}</ul>")


def write_html(analysis: ItemAnalysis, path: Path, picture: Path) -> Path:
    left_out = ", ".join(f"{count} {status}" for status, count in sorted(analysis.left_out.items()))
    flagged = analysis.flagged
    flag_line = ("Flagged: " + ", ".join(html.escape(item.name) for item in flagged) + "."
                 if flagged else "No exercise is flagged.")
    path.write_text(_PAGE.format(
        lesson=html.escape(analysis.lesson), analysed=analysis.analysed,
        left_out=f" (not analysed, their notebooks never ran: {left_out})" if left_out else "",
        flag_line=flag_line, picture=html.escape(picture.name),
        identities=_identities_html(analysis) + _tampering_html(analysis),
        rows="\n".join(_table_row(item) for item in analysis.items),
        messages="\n".join(_messages_html(item) for item in analysis.items), **COLOURS),
        encoding="utf-8")
    return path


def write_report(analysis: ItemAnalysis, out_dir: Path) -> dict[str, Path]:
    """``item_analysis.html``, ``.csv`` and ``.png`` in ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    picture = draw(analysis, out_dir / "item_analysis.png")
    return {"html": write_html(analysis, out_dir / "item_analysis.html", picture),
            "csv": write_csv(analysis, out_dir / "item_analysis.csv"), "png": picture}
