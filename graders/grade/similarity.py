"""Which submissions share their code: ``similarity.html``, a lead for a human, never a verdict.

The solution cells of every pair of submissions are compared with copydetect, a winnowing
detector of the MOSS family: code is tokenised (names become placeholders, comments vanish, so
renaming variables or rewording comments changes nothing), cut into k-grams, and the fingerprints
two submissions share are mapped back to the passages they came from. Every fingerprint of the
released edition's own code (its stubs, its examples, its grade cells) is boilerplate: the
template never counts as shared work.

Each submission is also compared with the reference solution, which is public in the course's
repository, and with earlier terms' submissions when given: one fingerprint more per source, and
a comparison per submission and source (sources are never compared with each other).
"""

import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap

from graders import nbgrader_adapter as adapter
from graders.lessons import solution_path

DEFAULT_THRESHOLD = 0.5
# copydetect's defaults: a shared run shorter than 25 characters of tokenised code is noise, and
# any run of 25 or more is found (window 1).
NOISE_CHARACTERS = 25
WINDOW = 1
CONTEXT_LINES = 2  # lines shown around each shared passage
DETAILED_PAIRS = 100  # pairs whose passages the page shows side by side, in each section
REFERENCE = "reference solution"
EARLIER = "earlier: "  # before an earlier term's student's name


@dataclass
class Pair:
    """Two submissions whose solution cells share more than the threshold; with the reference or
    an earlier term, ``a`` is the student and ``b`` the reference or earlier submission."""

    a: str  # a student's name
    b: str  # another student's, REFERENCE, or EARLIER + an earlier term's student's name
    share_a: float  # share of a's own code (boilerplate left out) found in b's
    share_b: float
    tokens: int  # tokenised characters in shared passages
    passages_a: str  # a's code as HTML, shared passages marked ("" beyond the DETAILED_PAIRS first)
    passages_b: str

    @property
    def similarity(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass
class SimilarityReport:
    lesson: str
    threshold: float
    compared: int  # submissions with code of their own
    pairs: list  # Pair of two students, most similar first
    reference: list = field(default_factory=list)  # Pair of a student and REFERENCE
    earlier: list = field(default_factory=list)  # Pair of a student and an earlier submission
    earlier_compared: int | None = None  # earlier submissions with code of their own; None: not given


# The concept answers are values, not code: the same right answer to the same question is no sign
# of copying, and a copied dictionary answers another student's questions, which grading catches
# (graders/lesson_checks/identity.py).
VALUES_ONLY = {"concept_check"}


def solution_ids(release_nb: dict) -> list[str]:
    """The grade ids of the released edition's solution cells that hold code, in order."""
    return [adapter.grade_id(c) for c in release_nb.get("cells", [])
            if c.get("cell_type") == "code" and adapter.is_solution_cell(c)
            and adapter.grade_id(c) not in VALUES_ONLY]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def solution_code(nb: dict, ids: list[str]) -> str:
    """A submission's solution cells, in the template's order, each under a comment with its id."""
    by_id: dict[str, str] = {}
    for cell in nb.get("cells", []):
        name = adapter.grade_id(cell)
        if cell.get("cell_type") == "code" and name in ids and name not in by_id:
            by_id[name] = _source(cell)
    return "\n".join(f"# --- {name} ---\n{by_id[name]}\n" for name in ids if name in by_id)


def template_code(release_nb: dict) -> str:
    """What each student started from: every code cell of the released edition, then its solution
    cells joined as :func:`solution_code` joins a submission's (stubs side by side)."""
    cells = [_source(c) for c in release_nb.get("cells", []) if c.get("cell_type") == "code"]
    return "\n".join([*cells, solution_code(release_nb, solution_ids(release_nb))])


def _fingerprint(code: str, boilerplate=None) -> CodeFingerprint:
    # The ".py" name tells copydetect's tokenizer the language; nothing is read from disk.
    return CodeFingerprint("solution.py", NOISE_CHARACTERS, WINDOW, boilerplate=boilerplate,
                           fp=io.StringIO(code))


def _marked(code: str, slices) -> str:
    marked, _ = highlight_overlap(code, slices, "<mark>", "</mark>", truncate=CONTEXT_LINES,
                                  escape_html=True)
    return marked


def fingerprints(codes: dict[str, str], boilerplate: str) -> dict[str, CodeFingerprint]:
    """copydetect's fingerprint of each student's code with the boilerplate's left out; a student
    with nothing of their own (an untouched template) is left out too."""
    template = _fingerprint(boilerplate).hashes
    ignored = np.unique(np.array(sorted(template), dtype=np.int64))
    prints = {name: _fingerprint(code, ignored) for name, code in codes.items()}
    return {name: fp for name, fp in prints.items() if len(fp.hashes)}


def compare(prints: dict[str, CodeFingerprint], threshold: float,
            detailed: int = DETAILED_PAIRS) -> list[Pair]:
    """Every pair of ``prints`` sharing more than ``threshold``, most similar first; the passages
    of the ``detailed`` most similar pairs are marked (a class of near copies would make a page
    nobody can read)."""
    names = sorted(prints)
    return _shared([(a, b) for i, a in enumerate(names) for b in names[i + 1:]], prints, prints,
                   threshold, detailed)


def compare_with(sources: dict[str, CodeFingerprint], prints: dict[str, CodeFingerprint],
                 threshold: float, detailed: int = DETAILED_PAIRS) -> list[Pair]:
    """Every (student, source) sharing more than ``threshold``, most similar first, each student of
    ``prints`` compared with each of ``sources`` (the reference, earlier terms) and sources never
    with each other; passages marked as :func:`compare` marks them."""
    return _shared([(a, b) for a in sorted(prints) for b in sorted(sources)], prints, sources,
                   threshold, detailed)


def _shared(names: list[tuple[str, str]], prints_a: dict, prints_b: dict, threshold: float,
            detailed: int) -> list[Pair]:
    """The pairs of ``names`` (a from ``prints_a``, b from ``prints_b``) above ``threshold``."""
    found = []
    for a, b in names:
        tokens, (share_a, share_b), slices = compare_files(prints_a[a], prints_b[b])
        if max(share_a, share_b) > threshold:
            found.append((Pair(a, b, float(share_a), float(share_b), int(tokens), "", ""), slices))
    found.sort(key=lambda item: -item[0].similarity)
    for pair, (slices_a, slices_b) in found[:detailed]:
        pair.passages_a = _marked(prints_a[pair.a].raw_code, slices_a)
        pair.passages_b = _marked(prints_b[pair.b].raw_code, slices_b)
    return [pair for pair, _ in found]


def reference_code(lesson: str, ids: list[str]) -> str:
    """The reference solution's answer cells (``solutions/NN_slug.ipynb``), joined as a submission's
    are: what a student who pasted them hands in. nbgrader's ``### BEGIN SOLUTION`` and ``### END
    SOLUTION`` lines are comments, which the tokeniser drops, and the lines around them are the
    template's, which are boilerplate: only the code between the markers counts."""
    return solution_code(json.loads(solution_path(lesson).read_text(encoding="utf-8")), ids)


def earlier_codes(submissions: list, ids: list[str]) -> dict[str, str]:
    """The solution cells of earlier terms' submissions (from ``find_submissions``), each named
    ``EARLIER + student``."""
    codes = {}
    for submission in submissions:
        nb = _read(submission.path)
        if nb is not None:
            codes[EARLIER + submission.student] = solution_code(nb, ids)
    return codes


def _read(path: Path) -> dict | None:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # an unreadable submission has no code to compare
    return nb if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else None


def analyse(course_dir: Path, lesson: str, rows: list, threshold: float = DEFAULT_THRESHOLD,
            earlier: list | None = None) -> SimilarityReport:
    """Compare the submitted solution cells of every student in ``rows`` (from ``course_dir``) with
    each other, with the reference solution, and with ``earlier`` terms' submissions (a list from
    ``find_submissions``; None when none were given), which are not graded."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"the similarity threshold is a share between 0 and 1, not {threshold}")
    release = json.loads((Path(course_dir) / "release" / lesson / f"{lesson}.ipynb").read_text("utf-8"))
    ids = solution_ids(release)
    codes = {}
    for row in rows:
        nb = _read(adapter.submission_path(course_dir, "submitted", row.student_id, lesson))
        if nb is not None:
            codes[row.student] = solution_code(nb, ids)
    boilerplate = template_code(release)
    prints = fingerprints(codes, boilerplate)
    reference = fingerprints({REFERENCE: reference_code(lesson, ids)}, boilerplate)
    previous = fingerprints(earlier_codes(earlier or [], ids), boilerplate)
    return SimilarityReport(lesson, threshold, len(prints), compare(prints, threshold),
                            compare_with(reference, prints, threshold),
                            compare_with(previous, prints, threshold),
                            None if earlier is None else len(previous))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Similarity: {lesson}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
.warning {{ border: 2px solid #ef6c00; background: #fff3e0; padding: 0.8em 1em; max-width: 60em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; vertical-align: top; }}
.side {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }}
pre {{ background: #fafafa; border: 1px solid #ddd; padding: 0.5em; overflow-x: auto; font-size: 0.85em; }}
mark {{ background: #ffcc80; }}
</style></head><body>
<h1>Similarity of solution cells: {lesson}</h1>
<p class="warning"><b>A lead for a human, not a verdict.</b> Two submissions that share code may
share it for honest reasons: a study group the course allows, the same tutorial, a hint followed
to the letter, or an exercise with one short way to write it. Read the passages side by side,
and hear the students, before you conclude anything.</p>
<p>{compared} submissions with code of their own compared pairwise and with the sources below, with
copydetect (winnowing, MOSS family): names and comments do not count, and the released edition's own
code is left out. Listed: those where more than {threshold:.0%}
of one side's own code is found in the other's (<code>--similarity-threshold</code>). {verdict}.</p>
<h2 id="students">Between students</h2>
{students}
<h2 id="reference">Copies of the reference solution</h2>
<p>The reference solution (<code>solutions/{lesson}.ipynb</code>) is public in the course's
repository; each submission is compared with its answer cells.</p>
{reference}
<h2 id="earlier">Copies of earlier terms</h2>
<p>{earlier_intro}</p>
{earlier}
</body></html>
"""


def _section(key: str, pairs: list[Pair], a: str, b: str) -> str:
    """A section's table of ``pairs`` (columns named after ``a`` and ``b``), then the passages of
    each detailed pair side by side; every name is escaped, as students choose them."""
    if not pairs:
        return "<p>None above the threshold.</p>"
    rows = "".join(f"<tr><td><a href='#{key}-{n}'>{html.escape(p.a)}</a></td><td>{html.escape(p.b)}</td>"
                   f"<td>{p.share_a:.0%}</td><td>{p.share_b:.0%}</td></tr>" for n, p in enumerate(pairs))
    table = (f"<table><tr><th>{a}</th><th>{b}</th><th>share of {a} found in {b}</th>"
             f"<th>share of {b} found in {a}</th></tr>{rows}</table>")
    shown = [(n, p) for n, p in enumerate(pairs) if p.passages_a]
    details = "".join(
        f"<h3 id='{key}-{n}'>{html.escape(p.a)} · {html.escape(p.b)} ({p.similarity:.0%})</h3>"
        f"<div class='side'><div><h4>{html.escape(p.a)}</h4><pre>{p.passages_a}</pre></div>"
        f"<div><h4>{html.escape(p.b)}</h4><pre>{p.passages_b}</pre></div></div>" for n, p in shown)
    if len(shown) < len(pairs):
        details += (f"<p>Passages are shown for the {len(shown)} most similar pairs; so many pairs "
                    "usually mean an exercise with one way to write it, or a shared source.</p>")
    return table + details


def verdict(report: SimilarityReport) -> str:
    """How many pairs each section lists, in words (the page's summary and ``course grade``'s)."""
    earlier = ("earlier terms not given" if report.earlier_compared is None
               else f"{len(report.earlier)} like an earlier term's submission")
    return (f"{len(report.pairs)} pair(s) of students above {report.threshold:.0%}, "
            f"{len(report.reference)} submission(s) like the reference solution, {earlier}")


def write_html(report: SimilarityReport, path: Path) -> Path:
    """``similarity.html``: the pairs above the threshold in three sections (between students, with
    the reference, with earlier terms), each with its pairs' passages side by side."""
    earlier_intro = (
        "No earlier terms were given: <code>course grade … --earlier-submissions DIR</code> compares "
        "each submission with every notebook of an earlier term." if report.earlier_compared is None
        else f"{report.earlier_compared} earlier submissions with code of their own, each compared with "
        "every submission of this class (not with each other).")
    path.write_text(_PAGE.format(
        lesson=html.escape(report.lesson), compared=report.compared, threshold=report.threshold,
        verdict=verdict(report), students=_section("pair", report.pairs, "student A", "student B"),
        reference=_section("reference", report.reference, "student", "reference"),
        earlier_intro=earlier_intro, earlier=_section("earlier", report.earlier, "student", "earlier")),
        encoding="utf-8")
    return path
