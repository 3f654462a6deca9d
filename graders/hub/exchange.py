"""nbgrader's exchange folder on one machine: created with the modes nbgrader itself uses, checked,
and, where it is wrong, the one command that fixes it said.

Every user writes to the exchange (``<root>``: others need write and search); the course's folder
belongs to its instructor. Students list and fetch from ``outbound/``, drop submissions into
``inbound/`` without seeing each other's, and fetch their own feedback from ``feedback/`` by a name
only they can compute (nbgrader's ``release_assignment`` and ``release_feedback`` modes).
"""

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

# nbgrader's own default, so that stock commands find it without configuration
DEFAULT_ROOT = Path("/usr/local/share/nbgrader/exchange")
# Sticky: anyone may create, nobody may delete another's folder.
ROOT_MODE = 0o1777
COURSE_MODE = 0o755
# folder -> (its mode as nbgrader makes it, what others must be allowed, what they must not)
FOLDERS = {
    "outbound": (0o755, stat.S_IROTH | stat.S_IXOTH, 0),
    "inbound": (0o2733, stat.S_IWOTH | stat.S_IXOTH, stat.S_IROTH),
    "feedback": (0o711, stat.S_IXOTH, stat.S_IROTH),
}
WHY = {
    "outbound": "students could not list or fetch released lessons",
    "inbound": "students could not submit",
    "feedback": "students could not fetch their feedback",
}
WHY_NOT = {
    "inbound": "every student could list everyone's submissions",
    "feedback": "every student could list everyone's feedback",
}


class ExchangeError(RuntimeError):
    """An exchange that would lose or leak work; the message names each problem and its fix."""


@dataclass(frozen=True)
class Problem:
    path: Path
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}. Fix it (as root): {self.fix}"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def problems(root: Path, course_id: str, instructor: str) -> list[Problem]:
    """What is wrong with the exchange at ``root`` for this course, each with its fixing command."""
    root = Path(root)
    if not root.is_dir():
        return [Problem(root, "the exchange folder does not exist",
                        f"mkdir -p {root} && chmod {ROOT_MODE:o} {root}")]
    found = []
    if _mode(root) & (stat.S_IWOTH | stat.S_IXOTH) != stat.S_IWOTH | stat.S_IXOTH:
        found.append(Problem(root, f"mode {_mode(root):04o}: students cannot write to the exchange, so "
                             "nobody can fetch or submit", f"chmod {ROOT_MODE:o} {root}"))
    course = root / course_id
    if not course.is_dir():
        return found
    owner = pwd.getpwuid(course.stat().st_uid).pw_name if _known_uid(course) else str(course.stat().st_uid)
    if owner != instructor:
        found.append(Problem(course, f"belongs to {owner}, not to the instructor {instructor}: nbgrader "
                             "refuses to release or collect", f"chown -R {instructor}: {course}"))
    if not _mode(course) & stat.S_IXOTH:
        found.append(Problem(course, f"mode {_mode(course):04o}: students cannot reach the course",
                             f"chmod {COURSE_MODE:o} {course}"))
    for name, (mode, needed, forbidden) in FOLDERS.items():
        folder = course / name
        if not folder.is_dir():
            continue
        have = _mode(folder)
        if have & needed != needed:
            found.append(Problem(folder, f"mode {have:04o}: {WHY[name]}", f"chmod {mode:o} {folder}"))
        elif have & forbidden:
            found.append(Problem(folder, f"mode {have:04o}: {WHY_NOT[name]}", f"chmod {mode:o} {folder}"))
    return found


def _known_uid(path: Path) -> bool:
    try:
        pwd.getpwuid(path.stat().st_uid)
    except KeyError:
        return False
    return True


def prepare(root: Path, course_id: str, instructor: str) -> Path:
    """The exchange and the course's folders in it, created where missing (as root) with nbgrader's
    modes; an existing one that is wrong is left as it is and reported (:class:`ExchangeError`)."""
    root = Path(root)
    if not root.exists():
        root.mkdir(parents=True)
        root.chmod(ROOT_MODE)
    course = root / course_id
    account = pwd.getpwnam(instructor)
    modes = {course: COURSE_MODE, **{course / name: spec[0] for name, spec in FOLDERS.items()}}
    for folder, mode in modes.items():
        if not folder.exists():
            folder.mkdir()
            os.chown(folder, account.pw_uid, account.pw_gid)
            folder.chmod(mode)
    found = problems(root, course_id, instructor)
    if found:
        raise ExchangeError("The exchange would lose or leak students' work:\n"
                            + "\n".join(f"  {problem}" for problem in found))
    return course
