"""Who a notebook's student is, kernel side: whose concept questions are drawn and graded.

The notebook names its student in ``STUDENT_ID``, or, on a JupyterHub, by the hub user. A grading
run that knows the submitter grades the submitter's own draw when the notebook names another
student of the class, and the notebook's draw, flagged for the instructor, when it names no one in
the class (:func:`whose_draw`). ``course grade`` decides it in its judge (graders/judge/concepts.py),
from what it alone knows: no classmate's name enters a grading kernel. Stock ``nbgrader autograde``
decides it here, from its course directory. Imports nothing heavy.
"""

import dataclasses
import os
import sqlite3
import unicodedata
from pathlib import Path


def normalized(identity) -> str:
    """An identity as compared and drawn for: case, accents' encoding and spacing do not count."""
    return " ".join(unicodedata.normalize("NFKC", str(identity or "")).casefold().split())


@dataclasses.dataclass(frozen=True)
class Draw:
    """Whose questions are graded: ``status`` is ``own`` (the notebook's identity, the submitter's or
    no grader's), ``submitter`` (none written: the submitter's), ``another_student`` (the notebook
    names ``named``, another student of the class: the submitter's) or ``unknown`` (it names
    ``named``, no one in the class: the notebook's, for the instructor to look at)."""

    identity: str
    status: str
    named: str = ""


def notebook_identity(written) -> str:
    """Who the notebook says its student is: ``STUDENT_ID`` as written, else the hub user."""
    return str(written or "").strip() or os.environ.get("JUPYTERHUB_USER", "")


def whose_draw(written, submitter: list[str] | None, roster: list[list[str]]) -> Draw:
    """Whose draw to grade, from the notebook's ``STUDENT_ID`` and what the grader knows: the
    submitter's identities (``None`` when it knows none) and every student's, the class roster."""
    if submitter is None:
        return Draw(notebook_identity(written), "own")
    written = str(written or "").strip()
    if not written:
        return Draw(submitter[0], "submitter")
    if normalized(written) in {normalized(form) for form in submitter}:
        return Draw(written, "own")
    for student in roster:
        if normalized(written) in {normalized(form) for form in student}:
            return Draw(submitter[0], "another_student", student[0])
    return Draw(written, "unknown", written)


def _stock_nbgrader() -> tuple[list[str], list[list[str]]] | None:
    """The submitter and the class as stock ``nbgrader autograde`` knows them: it runs the notebook
    in ``<course>/autograded/<student>/<assignment>``; the class is who submitted, and the gradebook's
    students (their ids, names and emails)."""
    here = Path.cwd()
    if os.environ.get("NBGRADER_EXECUTION") != "autograde" or here.parent.parent.name != "autograded":
        return None
    course = here.parents[2]
    roster = {p.name: [p.name] for p in sorted((course / "submitted").glob("*")) if p.is_dir()}
    database = course / "gradebook.db"
    if database.exists():
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            for sid, first, last, email in db.execute("SELECT id, first_name, last_name, email FROM student"):
                forms = [f"{first or ''} {last or ''}".strip(), email or ""]
                roster.setdefault(sid, [sid]).extend(form for form in forms if form)
    return roster.get(here.parent.name, [here.parent.name]), list(roster.values())


def grader_knowledge() -> tuple[list[str] | None, list[list[str]]]:
    """``(the submitter's identities, the roster)`` as stock ``nbgrader autograde`` knows them, or
    ``(None, [])`` elsewhere (the student's own run, ``make check``, ``course grade``'s kernels)."""
    return _stock_nbgrader() or (None, [])
