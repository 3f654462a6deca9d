"""What keeps each account of the hub to its own files: applied by ``course hub serve`` (as root),
checked by ``course hub check``, each problem with the command that fixes it.

- Every home of the roster is its user's alone (mode 700): no student reads another's work, nor the
  instructor's course directory (itself 700: where several instructors grade one course, nbgrader's
  ``CourseDirectory.groupshared`` shares it with their group instead).
- The repository (every lesson's solutions and hidden tests, the builds, grading's output) is closed
  to everyone but its owner and the instructors' group (750): users import the course from its wheel
  (:mod:`graders.hub.environment`); instructors' commands read the repository, whose solutions
  ``course grade`` needs.
- The grader's slots (:func:`graders.grade.sandbox.slots_folder`) are in a folder of root's under
  ``/run`` that only the instructors' group may enter (2770): nobody else can hold or plant a lock.
"""

import grp
import os
import pwd
import stat
import subprocess
from pathlib import Path

from graders.grade.sandbox import SLOTS_FOLDER
from graders.hub import environment, roster
from graders.hub.exchange import Problem, account_name
from graders.lessons import ROOT

HOME_MODE = 0o700
SLOTS_MODE = 0o2770  # setgid: every lock file made there belongs to the instructors' group
LOCK_MODE = 0o640


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _instructors(members) -> list[str]:
    return [person.user for person in members if person.role == "instructor"]


def apply(settings, members) -> None:
    """Close what the hub's users must not reach (as root); what exists is changed to what it must be."""
    group = settings.instructors_group
    if _gid(group) is None:
        subprocess.run(["groupadd", "--system", group], check=True, capture_output=True)
    subprocess.run(["gpasswd", "--members", ",".join(_instructors(members)), group], check=True,
                   capture_output=True)
    gid = _gid(group)
    for person in members:
        roster.home(person.user).chmod(HOME_MODE)
    Path(settings.course_root).chmod(HOME_MODE)
    os.chown(ROOT, -1, gid)
    ROOT.chmod(_mode(ROOT) & ~0o077 | 0o050)
    SLOTS_FOLDER.mkdir(mode=0o700, exist_ok=True)
    os.chown(SLOTS_FOLDER, 0, gid)
    SLOTS_FOLDER.chmod(SLOTS_MODE)
    for lock in SLOTS_FOLDER.iterdir():  # root's graders made them before the group could enter
        os.chown(lock, -1, gid)
        lock.chmod(LOCK_MODE)


def problems(settings, members) -> list[Problem]:
    """What lets an account reach what is not theirs, or stops the instructors' work, with the fixes."""
    return [*_group(settings, members), *_homes(settings, members), *_repository(settings),
            *_slots(settings, members)]


def _group(settings, members) -> list[Problem]:
    group, users = settings.instructors_group, ",".join(_instructors(members))
    if _gid(group) is None:
        return [Problem(Path("/etc/group"), f"no group {group}: the instructors cannot read the "
                        "repository nor take grading slots",
                        f"groupadd --system {group} && gpasswd --members {users} {group}")]
    held = grp.getgrnam(group).gr_mem
    if set(held) != set(_instructors(members)):
        return [Problem(Path("/etc/group"), f"the group {group} holds {', '.join(held) or 'nobody'}, not "
                        "the roster's instructors", f"gpasswd --members {users} {group}")]
    return []


def _homes(settings, members) -> list[Problem]:
    found = []
    for person in members:
        if not roster.exists(person.user):
            continue  # said by `course hub check` with the accounts
        home = roster.home(person.user)
        if not home.is_dir():
            found.append(Problem(home, f"{person.user} has no home", f"mkhomedir_helper {person.user} 0077"))
        elif home.stat().st_uid != pwd.getpwnam(person.user).pw_uid:
            found.append(Problem(home, f"belongs to uid {home.stat().st_uid}, not to {person.user}",
                                 f"chown {person.user}: {home}"))
        elif _mode(home) & 0o077:
            found.append(Problem(home, f"mode {_mode(home):04o}: other accounts can read "
                                 f"{person.user}'s files", f"chmod 700 {home}"))
    course = Path(settings.course_root)
    if course.is_dir() and _mode(course) & 0o077:
        found.append(Problem(course, f"mode {_mode(course):04o}: the course directory (sources with "
                             "solutions and hidden tests, the gradebook, every submission) is open to "
                             "other accounts", f"chmod 700 {course}"))
    return found


def _repository(settings) -> list[Problem]:
    group, found = settings.instructors_group, []
    mode, gid = _mode(ROOT), ROOT.stat().st_gid
    if mode & 0o007 or (mode & 0o070 and gid not in (0, _gid(group))):
        found.append(Problem(ROOT, f"mode {mode:04o}, group {_group_name(gid)}: accounts other than the "
                             "instructors can read every lesson's solutions and hidden tests",
                             f"chgrp {group} {ROOT} && chmod g=rx,o= {ROOT}"))
    closed = [folder for folder in ROOT.parents if not _mode(folder) & stat.S_IXOTH]
    if closed:
        found.append(Problem(ROOT, "the instructors cannot reach the repository, whose solutions "
                             "`course grade` needs", f"chmod o+x {' '.join(map(str, closed))}"))
    python = Path(settings.bin_dir) / "python"
    if environment.imports_from(python, ROOT):
        found.append(Problem(python, "the users' Python imports the course from the repository",
                             "make hub (it installs the course's wheel there)"))
    return found


def _slots(settings, members) -> list[Problem]:
    group, folder = settings.instructors_group, SLOTS_FOLDER
    if not folder.is_dir():
        return [Problem(folder, "missing: the instructors' graders cannot take grading slots",
                        f"install -d -o root -g {group} -m {SLOTS_MODE:o} {folder}")]
    found = []
    info = folder.stat()
    if (info.st_uid, info.st_gid, _mode(folder)) != (0, _gid(group), SLOTS_MODE):
        found.append(Problem(folder, f"owner {account_name(info.st_uid)}:{_group_name(info.st_gid)}, mode "
                             f"{_mode(folder):04o}: only root and the instructors' group may enter it",
                             f"chown root:{group} {folder} && chmod {SLOTS_MODE:o} {folder}"))
    graders = {0, *(pwd.getpwnam(user).pw_uid for user in _instructors(members) if roster.exists(user))}
    for lock in sorted(folder.iterdir()) if os.access(folder, os.R_OK | os.X_OK) else []:
        if lock.lstat().st_uid not in graders:
            found.append(Problem(lock, f"made by {account_name(lock.lstat().st_uid)}, who is no grader",
                                 f"rm -f {lock}"))
    return found


def _gid(group: str) -> int | None:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


