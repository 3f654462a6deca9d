"""Who is in the course: a roster of local users, each with a role and the language of their edition.

The roster is a CSV file, ``user,role,language``, one line per person; ``make hub`` without one
uses :data:`DEFAULT_ROSTER`. The hub lets in only the people on it, nbgrader's exchange serves
only them (:mod:`graders.hub.nbgrader_roles`), and each is a real local user with a home of their own,
created here when missing (as root).
"""

import csv
import pwd
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROLES = ("instructor", "student")
# What useradd accepts on Debian, and nbgrader's exchange too (no "+" in a student id).
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


class RosterError(ValueError):
    """A roster that cannot run a course: says which line and why."""


@dataclass(frozen=True)
class Member:
    user: str
    role: str
    language: str


DEFAULT_ROSTER = (
    Member("instructor", "instructor", "en"),
    Member("alumna", "student", "es"),
    Member("student", "student", "en"),
)


def validate(members) -> list[Member]:
    """The roster as given, once it names one instructor at least and no one twice."""
    from course.settings import LANGUAGES  # imports torch: not for nbgrader's every call (parse)

    members = list(members)
    seen = set()
    for number, person in enumerate(members, start=1):
        where = f"roster line {number} ({person.user!r})"
        if not USER_NAME.match(person.user):
            raise RosterError(f"{where}: a user name is lower-case letters, digits, - or _ "
                              "(32 at most, starting with a letter)")
        if person.role not in ROLES:
            raise RosterError(f"{where}: role {person.role!r} is not one of {', '.join(ROLES)}")
        if person.language not in LANGUAGES:
            raise RosterError(f"{where}: language {person.language!r} is not one of {', '.join(LANGUAGES)}")
        if person.user in seen:
            raise RosterError(f"{where}: {person.user} is on the roster twice")
        seen.add(person.user)
    if not any(member.role == "instructor" for member in members):
        raise RosterError("the roster names no instructor: one line needs the role instructor")
    return members


def parse(path: Path) -> list[Member]:
    """The roster in ``path`` (``user,role,language`` with that header), as written."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames is None or set(reader.fieldnames) != {"user", "role", "language"}:
            raise RosterError(f"{path}: the first line must be the header user,role,language")
        return [Member(row["user"].strip(), row["role"].strip(), row["language"].strip())
                for row in reader]


def read_roster(path: Path) -> list[Member]:
    """The roster in ``path``, checked (:func:`validate`)."""
    return validate(parse(path))


def write_roster(members, path: Path) -> Path:
    """``members`` as a roster file every user can read (nbgrader reads it as each of them)."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["user", "role", "language"])
        writer.writerows([member.user, member.role, member.language] for member in members)
    path.chmod(0o644)
    return path


def member(path: Path, user: str) -> Member | None:
    """``user``'s line of the roster in ``path``, ``None`` when they are not enrolled."""
    return next((m for m in parse(path) if m.user == user), None)


def instructor(members) -> Member:
    return next(m for m in members if m.role == "instructor")


def exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def home(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def create_users(members) -> dict[str, str]:
    """A local account with a home for every member who has none (needs root); returns the
    password given to each account created, a fresh one each (never one the hub shares: with it,
    anyone could ``su`` to anyone)."""
    created = {}
    for person in members:
        if exists(person.user):
            continue
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", person.user],
                       check=True, capture_output=True)
        created[person.user] = secrets.token_urlsafe(9)
    if created:
        lines = "".join(f"{user}:{secret}\n" for user, secret in created.items())
        subprocess.run(["chpasswd"], input=lines, text=True, check=True, capture_output=True)
    return created


def remove_users(users) -> None:
    """Delete these local accounts and their homes (the tests' own, once they are done)."""
    for user in users:
        if exists(user):
            subprocess.run(["userdel", "--remove", user], capture_output=True)
