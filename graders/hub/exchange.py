"""nbgrader's exchange folder on one machine: created with the modes nbgrader itself uses, checked,
and, where it is wrong, the one command that fixes it said.

Every user writes to the exchange (``<root>``: others need write and search); the course's folder
belongs to its instructor. Students list and fetch from ``outbound/``, drop submissions into
``inbound/`` without seeing each other's, and fetch their own feedback from ``feedback/`` by a name
only they can compute (nbgrader's ``release_assignment`` and ``release_feedback`` modes).

Anyone may make a folder in ``inbound/``, named for anyone, and nbgrader's collect takes the student
and the time from the name. So what the instructor collects is checked by :func:`take`: a folder is
taken only when it, and everything in it, belongs to the student it names, and holds nothing but
files and folders (no link, which the copy would follow with the instructor's rights).
"""

import errno
import os
import pwd
import shutil
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


class Refused(Exception):
    """An inbound folder that collect must not take: the folder, its owner, why."""

    def __init__(self, folder: Path, owner: str, why: str):
        super().__init__(f"{folder} (owner {owner}): {why}")
        self.folder, self.owner, self.why = folder, owner, why


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


def account_name(uid: int) -> str:
    """The account of ``uid``, or the number where no account has it."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _owner(name: str, parent: int | None) -> str:
    """Who owns ``name`` in the open folder ``parent``, as far as can be told (it may be gone)."""
    try:
        return account_name(os.lstat(name, dir_fd=parent).st_uid)
    except OSError:
        return "unknown"


def submitter(folder: Path) -> str:
    """The student an inbound folder's name says submitted it (``student+assignment+time+random``)."""
    return Path(folder).name.rsplit("+", 3)[0]


def take(folder: Path, target: Path | None = None) -> None:
    """Check that the inbound ``folder``, and everything in it, is its submitter's own and holds only
    files and folders; copy it to ``target`` on the way when one is given. Raises :class:`Refused`
    (``target`` then may hold part of the copy). Each entry is opened without following a link and
    checked on what was opened, so a link swapped in during the copy is refused, never read."""
    folder, student = Path(folder), submitter(folder)
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(folder, _owner(str(folder), None), f"no account is called {student}") from None
    descriptor = _open(folder, str(folder), None, "it", uid)
    try:
        if not stat.S_ISDIR(os.fstat(descriptor).st_mode):
            raise Refused(folder, student, "it is a file, not a folder")
        _take_folder(folder, descriptor, Path(), target, uid)
    finally:
        os.close(descriptor)


def _open(folder: Path, name: str, parent: int | None, shown: str, uid: int) -> int:
    """``name`` (in the open folder ``parent``) opened without following a link, once it is a file or
    a folder of the account ``uid``'s; ``shown``: what the refusal calls it."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
    except OSError as error:
        what = "a symbolic link" if error.errno == errno.ELOOP else f"unreadable ({error.strerror})"
        raise Refused(folder, _owner(name, parent), f"{shown} is {what}") from None
    found = os.fstat(descriptor)
    if found.st_uid != uid:
        why = f"{shown} belongs to {account_name(found.st_uid)}, not to {account_name(uid)}, whom its name " \
              "says submitted it"
    elif not (stat.S_ISDIR(found.st_mode) or stat.S_ISREG(found.st_mode)):
        why = f"{shown} is neither a file nor a folder"
    else:
        return descriptor
    os.close(descriptor)
    raise Refused(folder, account_name(found.st_uid), why)


def _take_folder(folder: Path, descriptor: int, relative: Path, target: Path | None, uid: int) -> None:
    """Every entry of the open folder ``descriptor`` checked, and copied into ``target``."""
    if target is not None:
        target.mkdir(mode=0o700)
    for name in sorted(os.listdir(descriptor)):
        entry = _open(folder, name, descriptor, str(relative / name), uid)
        try:
            if stat.S_ISDIR(os.fstat(entry).st_mode):
                _take_folder(folder, entry, relative / name, target and target / name, uid)
            elif target is not None:
                with os.fdopen(os.dup(entry), "rb") as source, open(target / name, "wb") as copy:
                    shutil.copyfileobj(source, copy)
        finally:
            os.close(entry)


def inbound_problems(root: Path, course_id: str) -> list[Problem]:
    """Each folder in the course's ``inbound/`` that collect refuses (:func:`take`), with the command
    that removes it."""
    inbound = Path(root) / course_id / "inbound"
    if not os.access(inbound, os.R_OK | os.X_OK):  # only root and the instructor see the submissions
        return []
    found = []
    for folder in sorted(inbound.iterdir()):
        try:
            take(folder)
        except Refused as refused:
            found.append(Problem(folder, f"owner {refused.owner}: {refused.why}; collect does not take it",
                                 f"rm -rf '{folder}'"))
    return found
