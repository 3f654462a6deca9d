"""Grades in the layout a learning platform imports: ``course grade --export moodle|canvas|csv``.

- ``moodle``: the assignment's grading worksheet (Assignment → View all submissions → Grading
  action → Upload grading worksheet). Moodle finds its columns by their names in the language of
  the interface of whoever uploads, and each student by ``Participant <id>``, the number its
  "Download all submissions" zip put in each folder name.
- ``canvas``: a Gradebook import (Gradebook → Import): ``Student, ID, SIS User ID, SIS Login ID,
  Section`` and one column named after the assignment; ``ID`` is the Canvas user id that its
  "Download submissions" zip put in each file name.
- ``csv``: student, platform identifier (if any), points, maximum, status: for anything else.

A submission whose identifier could not be recovered cannot be imported: it is listed in
``export-<platform>-unmatched.csv`` (and printed), never dropped silently. So is one the grader
failed on (status ``failed``): its 0 is not a grade, grading again retries it.
"""

import csv
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

PLATFORMS = ("moodle", "canvas", "csv")
NOT_A_GRADE = ("failed",)  # the grader broke: the next run grades it again

# Moodle's own strings (mod/assign lang packs: recordid, grade, lastmodifiedgrade, hiddenuser):
# its importer matches the header to them and strips the participant prefix by its length.
MOODLE_WORDS = {
    "en": {"id": "Identifier", "name": "Full name", "grade": "Grade", "max": "Maximum grade",
           "modified": "Last modified (grade)", "participant": "Participant ", "decimal": "."},
    "es": {"id": "Identificador", "name": "Nombre completo", "grade": "Calificación",
           "max": "Calificación máxima", "modified": "Última modificación (calificación)",
           "participant": "Participante", "decimal": ","},
}
CANVAS_FIXED = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


@dataclass
class Export:
    path: Path
    exported: int
    unmatched: list  # rows that could not be put in the import file
    unmatched_path: Path | None


def _points(value: float, decimal: str = ".") -> str:
    return f"{value:g}".replace(".", decimal)


def _moodle(rows, maximum: float, language: str, now: datetime) -> list[list[str]]:
    words = MOODLE_WORDS[language]
    modified = now.strftime("%Y-%m-%d %H:%M:%S")
    return [[words["id"], words["name"], words["grade"], words["max"], words["modified"]],
            *([f"{words['participant']}{row.platform_id}", row.student,
               _points(row.total, words["decimal"]), _points(maximum, words["decimal"]), modified]
              for row in rows)]


def _canvas(rows, assignment: str) -> list[list[str]]:
    return [[*CANVAS_FIXED, assignment],
            *([row.student, row.platform_id, "", "", "", _points(row.total)] for row in rows)]


def _plain(rows, maximum: float) -> list[list[str]]:
    return [["student", "identifier", "points", "max", "status"],
            *([row.student, row.platform_id, _points(row.total), _points(maximum), row.status]
              for row in rows)]


def _write(table: list[list[str]], path: Path) -> Path:
    # utf-8-sig: spreadsheet programs and Moodle read accented names right with the BOM
    with open(path, "w", newline="", encoding="utf-8-sig") as handle:
        csv.writer(handle).writerows(table)
    return path


def export(rows: list, grade_cells: dict, lesson: str, platform: str, out_dir: Path,
           language: str = "en", assignment: str | None = None, now: datetime | None = None) -> Export:
    """Write ``export-<platform>.csv`` in ``out_dir`` from the class's rows (see the module doc)."""
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}: use one of {', '.join(PLATFORMS)}")
    if platform == "moodle" and language not in MOODLE_WORDS:
        raise ValueError(f"Moodle's column names are known here in {', '.join(MOODLE_WORDS)}, "
                         f"not {language!r}: switch your Moodle interface to one of them to upload")
    maximum = float(sum(grade_cells.values()))
    needs_id = platform != "csv"
    ready, unmatched = [], []
    for row in rows:
        importable = row.status not in NOT_A_GRADE and (
            not needs_id or (row.platform_id and row.platform in (platform, "")))
        (ready if importable else unmatched).append(row)
    tables = {"moodle": lambda: _moodle(ready, maximum, language, now or datetime.now()),
              "canvas": lambda: _canvas(ready, assignment or lesson),
              "csv": lambda: _plain(ready, maximum)}
    path = _write(tables[platform](), Path(out_dir) / f"export-{platform}.csv")
    unmatched_path = None
    if unmatched:
        unmatched_path = _write(
            [["student", "student_id", "points", "max", "status", "why it is not in the import file"],
             *([r.student, r.student_id, _points(r.total), _points(maximum), r.status, _why(r, platform)]
               for r in unmatched)],
            Path(out_dir) / f"export-{platform}-unmatched.csv")
    return Export(path, len(ready), unmatched, unmatched_path)


def _why(row, platform: str) -> str:
    if row.status in NOT_A_GRADE:
        return f"not graded: the grader failed ({row.reason}); run course grade again"
    if row.platform_id:
        return (f"its identifier {row.platform_id} comes from a {row.platform.capitalize()} export, "
                f"not {platform.capitalize()}: enter this grade by hand")
    return (f"no {platform.capitalize()} identifier in its file or folder name: "
            "enter this grade by hand")
