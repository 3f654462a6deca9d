"""Feedback back through the exchange: what ``course grade`` wrote for each student, put where
``nbgrader release_feedback`` reads it, then released.

``course grade <course>/submitted --lesson NN_slug --out-dir <course>/grading/NN_slug`` grades both
editions' submissions (``submitted/<user>/NN_slug_<lang>/``) and writes
``feedback/<student_id>.html``. nbgrader releases ``<course>/feedback/<user>/<assignment>/*.html``
under a name computed from the submission's secret, which only its student holds: so each
student fetches their own feedback, and no one else's. A submission collected after the grading
(a newer one, the latest counts) is not given the older one's feedback: it waits for the next
``course grade``, and is named.
"""

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from graders.grade.submissions import student_id
from graders.lessons import edition_of_assignment

# What nbgrader's release_feedback reads beside the feedback, copied from the submission.
SUBMISSION_FILES = ("timestamp.txt", "submission_secret.txt")


@dataclass
class Placed:
    user: str
    assignment: str
    released: bool
    why: str = ""


def _graded_digests(grading_dir: Path) -> dict:
    state = Path(grading_dir) / "state.json"
    return {sid: record["digest"] for sid, record in json.loads(state.read_text()).items()} \
        if state.exists() else {}


def place(course_root: Path, lesson: str, grading_dir: Path) -> list[Placed]:
    """Copy each graded student's feedback into ``<course>/feedback/<user>/<assignment>/``."""
    course_root, grading_dir = Path(course_root), Path(grading_dir)
    digests = _graded_digests(grading_dir)
    placed = []
    for folder in sorted((course_root / "submitted").glob(f"*/{lesson}_*")):
        user, assignment = folder.parent.name, folder.name
        if (edition_of_assignment(assignment) or ("",))[0] != lesson:
            continue
        sid, notebook = student_id(user), folder / f"{lesson}.ipynb"
        html = grading_dir / "feedback" / f"{sid}.html"
        if not notebook.exists() or not html.exists():
            placed.append(Placed(user, assignment, False, "not graded yet: run `course grade` first"))
            continue
        if digests.get(sid) != hashlib.sha256(notebook.read_bytes()).hexdigest():
            placed.append(Placed(user, assignment, False, "a newer submission was collected after "
                                 "grading: run `course grade` again (it grades only what changed)"))
            continue
        target = course_root / "feedback" / user / assignment
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(html, target / f"{lesson}.html")
        for name in SUBMISSION_FILES:
            shutil.copyfile(folder / name, target / name)
        placed.append(Placed(user, assignment, True))
    return placed


def release(course_root: Path, lesson: str, grading_dir: Path) -> list[Placed]:
    """:func:`place`, then ``nbgrader release_feedback`` for each edition that has feedback."""
    placed = place(course_root, lesson, grading_dir)
    for assignment in sorted({p.assignment for p in placed if p.released}):
        done = subprocess.run([sys.executable, "-m", "nbgrader", "release_feedback", assignment],
                              cwd=course_root, capture_output=True, text=True)
        if done.returncode != 0:
            why = f"nbgrader release_feedback failed: {(done.stderr or done.stdout).strip()[-500:]}"
            placed = [Placed(p.user, p.assignment, False, why) if p.assignment == assignment else p
                      for p in placed]
    return placed
