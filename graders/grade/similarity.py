"""Which submissions share their code: ``similarity.html``, a lead for a human, never a verdict.

The solution cells of every pair of submissions are compared with copydetect, a winnowing
detector of the MOSS family: code is tokenised (names become placeholders, comments vanish, so
renaming variables or rewording comments changes nothing), cut into k-grams, and the fingerprints
two submissions share are mapped back to the passages they came from. Every fingerprint of the
released edition's own code (its stubs, its examples, its grade cells) is boilerplate: the
template never counts as shared work.
"""

import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import highlight_overlap

from graders import nbgrader_adapter as adapter

DEFAULT_THRESHOLD = 0.5
# copydetect's defaults: a shared run shorter than 25 characters of tokenised code is noise, and
# any run of 25 or more is found (window 1).
NOISE_CHARACTERS = 25
WINDOW = 1
CONTEXT_LINES = 2  # lines shown around each shared passage
DETAILED_PAIRS = 100  # pairs whose passages the page shows side by side


@dataclass
class Pair:
    """Two submissions whose solution cells share more than the threshold."""

    a: str  # student names
    b: str
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
    pairs: list  # Pair, most similar first


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
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            tokens, (share_a, share_b), slices = compare_files(prints[a], prints[b])
            if max(share_a, share_b) > threshold:
                found.append((Pair(a, b, float(share_a), float(share_b), int(tokens), "", ""), slices))
    found.sort(key=lambda item: -item[0].similarity)
    for pair, (slices_a, slices_b) in found[:detailed]:
        pair.passages_a = _marked(prints[pair.a].raw_code, slices_a)
        pair.passages_b = _marked(prints[pair.b].raw_code, slices_b)
    return [pair for pair, _ in found]


def _read(path: Path) -> dict | None:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # an unreadable submission has no code to compare
    return nb if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else None


def analyse(course_dir: Path, lesson: str, rows: list,
            threshold: float = DEFAULT_THRESHOLD) -> SimilarityReport:
    """Compare the submitted solution cells of every student in ``rows`` (from ``course_dir``)."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"the similarity threshold is a share between 0 and 1, not {threshold}")
    release = json.loads((Path(course_dir) / "release" / lesson / f"{lesson}.ipynb").read_text("utf-8"))
    ids = solution_ids(release)
    codes = {}
    for row in rows:
        nb = _read(adapter.submission_path(course_dir, "submitted", row.student_id, lesson))
        if nb is not None:
            codes[row.student] = solution_code(nb, ids)
    prints = fingerprints(codes, template_code(release))
    return SimilarityReport(lesson, threshold, len(prints), compare(prints, threshold))


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
<p>{compared} submissions with code of their own compared pairwise with copydetect (winnowing,
MOSS family): names and comments do not count, and the released edition's own code is left out.
Pairs listed: those where more than {threshold:.0%} of one submission's own code is found in the other's
(<code>--similarity-threshold</code>). {verdict}</p>
{table}
{details}
</body></html>
"""


def write_html(report: SimilarityReport, path: Path) -> Path:
    """``similarity.html``: the pairs above the threshold, then each pair's passages side by side."""
    rows = "".join(f"<tr><td><a href='#pair-{n}'>{html.escape(p.a)}</a></td><td>{html.escape(p.b)}</td>"
                   f"<td>{p.share_a:.0%}</td><td>{p.share_b:.0%}</td></tr>"
                   for n, p in enumerate(report.pairs))
    table = ("<table><tr><th>student A</th><th>student B</th><th>share of A found in B</th>"
             f"<th>share of B found in A</th></tr>{rows}</table>" if report.pairs else "")
    shown = [(n, p) for n, p in enumerate(report.pairs) if p.passages_a]
    details = "".join(
        f"<h2 id='pair-{n}'>{html.escape(p.a)} · {html.escape(p.b)} ({p.similarity:.0%})</h2>"
        f"<div class='side'><div><h3>{html.escape(p.a)}</h3><pre>{p.passages_a}</pre></div>"
        f"<div><h3>{html.escape(p.b)}</h3><pre>{p.passages_b}</pre></div></div>" for n, p in shown)
    if len(shown) < len(report.pairs):
        details += (f"<p>Passages are shown for the {len(shown)} most similar pairs; so many pairs "
                    "usually mean an exercise with one way to write it, or a shared source.</p>")
    verdict = (f"{len(report.pairs)} pair(s) above the threshold." if report.pairs
               else "No pair is above the threshold.")
    path.write_text(_PAGE.format(lesson=html.escape(report.lesson), compared=report.compared,
                                 threshold=report.threshold, verdict=verdict, table=table,
                                 details=details), encoding="utf-8")
    return path
