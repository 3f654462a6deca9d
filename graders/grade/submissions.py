"""Finding and checking submissions before any code runs.

Accepted layouts: nbgrader's ``submitted/<student>/<lesson>/<lesson>.ipynb``, a folder of
``<student>.ipynb`` files, one folder per student, or a ``.zip`` of any of these (as learning
platforms export them). Student names may hold spaces and accents: the name is kept for people,
and a safe id derived from it is used for nbgrader and file names. The identifier a learning
platform put in its export (Moodle's participant number, Canvas's user id) is kept too, so that
grades can be imported back (``lms_export``).
"""

import hashlib
import json
import re
import unicodedata
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders.nbgrader_adapter import grade_id, is_grade_cell

MAX_NOTEBOOK_BYTES = 50 * 1024**2
# A notebook nests about 8 levels deep (widget state a few more); past this, Python's own readers
# (nbformat's schema check, nbgrader's copies) recurse until they fail.
MAX_DEPTH = 64
MAX_ZIP_BYTES = 2 * 1024**3
IGNORED = ("__MACOSX", ".ipynb_checkpoints")


class SubmissionsError(RuntimeError):
    """The submissions path cannot be read as any of the accepted layouts."""


@dataclass
class Submission:
    student: str
    student_id: str
    path: Path
    platform_id: str = ""  # the learning platform's id of the student, "" when the export had none
    platform: str = ""  # the platform that id comes from: "moodle" or "canvas"

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def student_id(name: str) -> str:
    """A short ASCII id for nbgrader, stable for a name and distinct for different names."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:40] or "student"
    return f"{slug}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"


def _extract(archive: Path, into: Path) -> Path:
    """Unpack a zip without letting a member escape ``into`` or exceed the size budget."""
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive) as zf:
        total = 0
        for member in zf.infolist():
            target = (into / member.filename).resolve()
            if not target.is_relative_to(into.resolve()):
                raise SubmissionsError(f"{archive}: member {member.filename!r} points outside the archive")
            total += member.file_size
            if total > MAX_ZIP_BYTES:
                raise SubmissionsError(f"{archive}: more than {MAX_ZIP_BYTES // 1024**3} GiB unpacked")
        zf.extractall(into)
    return into


# Moodle names each student's folder "<Full Name>_<participant>_assignsubmission_file_", or each
# file "<Full Name>_<participant>_assignsubmission_file_<file name>" when it exports no folders.
_MOODLE = re.compile(r"^(?P<name>.+?)(?:_(?P<id>\d+))?_assignsubmission_[a-z]+_(?P<file>.*)$")
# Canvas names each file "<lastfirst>_<user id>_<attachment id>_<file name>", with "_LATE" after
# the name for a late submission.
_CANVAS = re.compile(r"^(?P<name>[^_]+)(?:_LATE)?_(?P<id>\d+)_\d+_(?P<file>.+)$")


@dataclass(frozen=True)
class Identity:
    """Who a notebook belongs to: a name for people, and the platform's id if its export had one."""

    name: str
    platform_id: str = ""
    platform: str = ""  # "moodle", "canvas" or "" (no platform's naming)


def platform_identity(name: str) -> Identity:
    """The student behind a folder or file name as Moodle or Canvas export it; any other name is
    the student's name, with no platform id."""
    for platform, pattern in (("moodle", _MOODLE), ("canvas", _CANVAS)):
        match = pattern.match(name)
        if match and match["name"].strip():
            return Identity(match["name"].strip(), match["id"] or "", platform if match["id"] else "")
    return Identity(name)


def _visible(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return not any(p.startswith(".") or p in IGNORED for p in parts)


def find_submissions(source: Path, lesson: str, scratch: Path) -> list[Submission]:
    """Every submission under ``source`` (a folder or a zip), one per student, sorted by name."""
    source = Path(source)
    if not source.exists():
        raise SubmissionsError(f"{source} does not exist: give a folder of notebooks, nbgrader's "
                               "submitted/ folder or a .zip")
    if source.is_file():
        if not zipfile.is_zipfile(source):
            raise SubmissionsError(f"{source} is a file but not a zip archive")
        source = _extract(source, Path(scratch) / "unzipped")
    notebooks = [p for p in sorted(source.rglob("*.ipynb")) if p.is_file() and _visible(p, source)]
    found: dict[str, tuple[Identity, Path]] = {}
    for who, path in _distinct_names([_identify(p, source, lesson) for p in notebooks]):
        if who.name in found:
            raise SubmissionsError(f"two notebooks for {who.name!r}: {found[who.name][1]} and {path}; "
                                   "keep one per student")
        found[who.name] = (who, path)
    if not found:
        raise SubmissionsError(f"no .ipynb file under {source}")
    return [Submission(name, student_id(name), path, who.platform_id, who.platform)
            for name, (who, path) in sorted(found.items())]


def _identify(path: Path, source: Path, lesson: str) -> tuple[Identity, Path]:
    """Whose notebook ``path`` is, from where it lies under ``source``."""
    parts = path.relative_to(source).parts
    if len(parts) >= 3 and parts[-2] == lesson:  # nbgrader: <student>/<lesson>/<file>
        return Identity(parts[-3]), path
    # a flat folder (<student>.ipynb, or a platform's flat export) or one folder per student
    return platform_identity(path.stem if len(parts) == 1 else parts[0]), path


def _distinct_names(found: list[tuple[Identity, Path]]) -> list[tuple[Identity, Path]]:
    """Two students of one name whom the platform tells apart keep its id in their name."""
    ids: dict[str, set[str]] = {}
    for who, _ in found:
        ids.setdefault(who.name, set()).add(who.platform_id)
    return [(Identity(f"{who.name} ({who.platform_id})", who.platform_id, who.platform)
             if who.platform_id and len(ids[who.name]) > 1 else who, path) for who, path in found]


@dataclass
class Verdict:
    status: str  # "ok", "invalid" or "wrong_lesson"
    reason: str = ""


def _grade_ids(nb) -> set[str]:
    return {grade_id(cell) for cell in nb.get("cells", []) if is_grade_cell(cell)} - {None}


def _depth(value) -> int:
    """How deeply lists and objects nest in ``value``, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


# nbgrader's cell metadata as nbgrader writes it: which keys hold which types.
NBGRADER_TYPES = {"grade": bool, "solution": bool, "locked": bool, "task": bool, "grade_id": str,
                  "points": (int, float), "schema_version": int}


def _of_type(value, kind) -> bool:
    """``isinstance``, where a bool is no number (JSON's ``true`` is not nbgrader's points)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _metadata_problem(nb) -> str:
    """What is wrong with the nbgrader metadata of a notebook's cells, ``""`` when nothing is: a
    hand-edited file breaks nbgrader's own reading of it."""
    for number, cell in enumerate(nb.cells, start=1):
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        if not isinstance(meta, dict):
            return f"cell {number}'s nbgrader metadata is a {type(meta).__name__}, not a table"
        for key, kind in NBGRADER_TYPES.items():
            if key in meta and not _of_type(meta[key], kind):
                return f"cell {number}'s nbgrader {key!r} is {meta[key]!r:.60}, not what nbgrader writes"
    return ""


def _first_line(error: Exception) -> str:
    """An error's first line, short and printable (a reason lands in a CSV and in HTML)."""
    lines = str(error).splitlines() or [type(error).__name__]
    return ascii(lines[0][:200])[1:-1]


def validate_notebook(path: Path, lesson: str, lesson_grade_ids: set[str]) -> Verdict:
    """Whether a file can be graded as ``lesson`` at all, and if not, why, in plain words. Whatever
    the file holds, this returns a verdict: no file stops a class."""
    try:
        return _verdict(path, lesson, lesson_grade_ids)
    except Exception as error:  # a file no rule above foresaw: its own row, never the class's end
        return Verdict("invalid", f"not a notebook this grader can read ({type(error).__name__}: "
                       f"{_first_line(error)})")


def _verdict(path: Path, lesson: str, lesson_grade_ids: set[str]) -> Verdict:
    size = path.stat().st_size
    if size == 0:
        return Verdict("invalid", "the file is empty")
    if size > MAX_NOTEBOOK_BYTES:
        return Verdict("invalid", f"the file is {size // 1024**2} MiB; a notebook is at most "
                       f"{MAX_NOTEBOOK_BYTES // 1024**2} MiB (clear its outputs)")
    try:
        raw = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return Verdict("invalid", f"not a notebook: the file is not valid JSON ({error})")
    except RecursionError:
        return Verdict("invalid", f"not a notebook: its JSON nests deeper than {MAX_DEPTH} levels")
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return Verdict("invalid", "not a notebook: no list of cells")
    if _depth(raw) > MAX_DEPTH:
        return Verdict("invalid", f"not a notebook: its JSON nests deeper than {MAX_DEPTH} levels")
    major, minor = raw.get("nbformat"), raw.get("nbformat_minor")
    if major != 4:
        return Verdict("invalid", f"notebook format {major!r:.20}.{minor!r:.20} is not the 4.x this "
                       "course uses: open it in JupyterLab and save it again")
    try:
        with warnings.catch_warnings():  # cells without ids (before format 4.5) are still a notebook
            warnings.simplefilter("ignore", nbformat.validator.MissingIDFieldWarning)
            nb = nbformat.reads(json.dumps(raw), as_version=4)
            nbformat.validate(nb)
    except Exception as error:  # nbformat raises several types for a malformed notebook
        return Verdict("invalid", f"not a valid notebook: {_first_line(error)}")
    if problem := _metadata_problem(nb):
        return Verdict("invalid", f"{problem}; download the lesson again and copy your answers into it")
    present = _grade_ids(nb)
    if len(present - lesson_grade_ids) > len(present & lesson_grade_ids):
        return Verdict("wrong_lesson", f"this notebook is not {lesson}: most of its grade cells "
                       f"({', '.join(sorted(present - lesson_grade_ids)[:3])}…) are not {lesson}'s")
    return Verdict("ok")
