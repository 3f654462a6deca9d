"""``course hub serve | check | feedback``: the course's JupyterHub (``make hub``).

``serve`` (as root) enrolls the roster's users (local accounts with homes, created where missing),
builds the users' Python with the course from its wheel, prepares the exchange and the instructor's
course directory, closes what students must not reach (:mod:`graders.hub.lockdown`), writes the
hub's configuration and runs JupyterHub in the foreground (Ctrl-C stops it and every user's server).
``check`` says what is wrong with a hub's set-up (modes, owners, the exchange, the slots, the
limits), each problem with the command that fixes it. ``feedback LESSON`` (as the instructor, after
``course grade``) releases each student's feedback through the exchange.
"""

import argparse
import importlib.metadata
import json
import os
import pwd
import re
import secrets
import sys
from pathlib import Path

from graders.hub import environment, exchange, hub_config, limits, lockdown, roster
from graders.hub.hub_config import HubSettings
from graders.lessons import ROOT
from graders.nbgrader_settings import COURSE_ID

# Outside the repository, which students may not enter: they read the roster, their role's
# configuration and the users' Python there.
HUB_DIR = Path("/srv/pytorch-course-hub")
MEMORY = re.compile(r"^[0-9]+(\.[0-9]+)?[KMGT]$")


def _state_secret(path: Path) -> str:
    """A secret of the state folder, made once."""
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return hub_config.secret(path)


def _passwords(state: Path, created: dict) -> dict:
    """The passwords of the accounts the hub created (kept root-only, to print them again)."""
    path = state / "passwords.json"
    known = json.loads(path.read_text()) if path.exists() else {}
    known.update(created)
    path.write_text(json.dumps(known, indent=1))
    path.chmod(0o600)
    return known


def _chown_tree(path: Path, user: str) -> None:
    account = pwd.getpwnam(user)
    for item in (path, *path.rglob("*")):
        os.chown(item, account.pw_uid, account.pw_gid)


def _wheel(given) -> Path:
    """The course's wheel users install: ``given``, else this version's in ``dist/`` (``make wheel``)."""
    version = importlib.metadata.version("pytorch-course")
    wheel = Path(given or ROOT / "dist" / f"pytorch_course-{version}-py3-none-any.whl")
    if not wheel.is_file():
        raise environment.EnvironmentProblem(f"{wheel} is missing: users install the course from its "
                                             "wheel; `make wheel` builds it (`make hub` does)")
    return wheel


def prepare(args) -> HubSettings:
    """Everything but the hub itself: accounts, the users' Python, exchange, configurations, the
    course directory, and what students must not reach closed."""
    from graders.hub import nbgrader_roles  # imports nbgrader: only this verb needs it

    os.umask(0o022)  # what the hub makes for its users they must read, whatever root's umask
    wheel = _wheel(args.wheel)
    hub_dir = Path(args.hub_dir).resolve()
    members = roster.read_roster(args.roster) if args.roster else list(roster.DEFAULT_ROSTER)
    hub_dir.mkdir(parents=True, exist_ok=True)
    hub_dir.chmod(0o755)
    (hub_dir / "state").mkdir(exist_ok=True)
    (hub_dir / "state").chmod(0o700)
    roster.write_roster(members, hub_dir / "roster.csv")
    if args.authenticator == "dummy":
        _state_secret(hub_dir / "state" / "dummy_password")
    created = roster.create_users(members)
    teacher = roster.instructor(members).user
    course_root = roster.home(teacher) / "course"
    settings = HubSettings(str(hub_dir), str(Path(args.exchange).resolve()), str(course_root), ip=args.ip,
                           port=args.port, hub_port=args.hub_port, proxy_api_port=args.proxy_api_port,
                           authenticator=args.authenticator, fast=args.fast,
                           singleuser_args=list(args.singleuser_arg or ()),
                           bin_dir=str(environment.users_bin(hub_dir, wheel)),
                           instructors_group=args.instructors_group, memory=args.memory, cpus=args.cpus,
                           cull_idle_s=args.cull_idle, spawner=args.spawner)
    _state_secret(settings.state / "admin_token")
    exchange.prepare(settings.exchange, COURSE_ID, teacher)
    nbgrader_settings = {"exchange": settings.exchange, "roster": str(settings.roster),
                         "course_root": settings.course_root}
    nbgrader_roles.write_role_configs(hub_dir, nbgrader_settings)
    nbgrader_roles.populate_course(course_root, hub_dir / nbgrader_roles.SETTINGS_FILE)
    _chown_tree(course_root, teacher)
    lockdown.apply(settings, members)
    hub_config.write_config(settings)
    _print_welcome(settings, members, _passwords(settings.state, created), limits.describe(settings))
    for problem in [*lockdown.problems(settings, members), *limits.problems(settings)]:
        print(f"Still wrong: {problem}", file=sys.stderr)
    return settings


def _print_welcome(settings: HubSettings, members, passwords: dict, limits_in_force: str) -> None:
    login = ("the shared password " + hub_config.secret(settings.state / "dummy_password")
             if settings.authenticator == "dummy" else "each account's own system password")
    print(f"\nThe course's JupyterHub: {settings.url}  (log in with {login})")
    for person in members:
        edition = f"edition {person.language}" if person.role == "student" else "formgrader, all lessons"
        password = passwords.get(person.user)
        print(f"  {person.user:<16} {person.role:<11} {edition:<24} "
              + (f"password {password}" if password and settings.authenticator == "pam" else ""))
    print(f"Exchange: {settings.exchange}  ·  course directory: {settings.course_root} (course id "
          f"{COURSE_ID})\nClosed to students: the repository ({ROOT}, group {settings.instructors_group}), "
          f"every home, the grader's slots  ·  {limits_in_force}\nThe instructor's recipe for a lesson, in a "
          "terminal on the hub: docs/instructors/jupyterhub.md\nStop the hub with Ctrl-C (it stops every "
          "user's server).\n", flush=True)


def serve(args) -> int:
    refusal = hub_config.authenticator_problem(args.authenticator, args.ip)
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    if os.geteuid() != 0:
        print("make hub creates local accounts and starts each user's server as that user: run it "
              "as root (sudo make hub)", file=sys.stderr)
        return 1
    proxy = hub_config.proxy_problem()
    if proxy:
        print(proxy, file=sys.stderr)
        return 1
    try:
        settings = prepare(args)
    except (exchange.ExchangeError, roster.RosterError, environment.EnvironmentProblem) as error:
        print(error, file=sys.stderr)
        return 1
    jupyterhub = str(Path(sys.executable).parent / "jupyterhub")
    os.chdir(settings.state)
    os.execv(jupyterhub, [jupyterhub, "-f", str(settings.state / "jupyterhub_config.py")])


def check(args) -> int:
    """Each problem of the hub in ``--hub-dir``, with its fix; 0 when there is none."""
    hub_dir = Path(args.hub_dir)
    settings_path = hub_dir / "state" / "hub_settings.json"
    if not settings_path.exists():
        print(f"no hub set up in {hub_dir}: run `make hub` (as root) first", file=sys.stderr)
        return 1
    settings = HubSettings.load(settings_path)
    members = roster.read_roster(settings.roster)
    found = [str(problem) for problem in
             [*exchange.problems(settings.exchange, COURSE_ID, roster.instructor(members).user),
              *exchange.inbound_problems(settings.exchange, COURSE_ID),
              *lockdown.problems(settings, members), *limits.problems(settings)]]
    found += [f"{person.user}: no local account; `make hub` (as root) creates it"
              for person in members if not roster.exists(person.user)]
    found += [problem for problem in [hub_config.proxy_problem(),
                                      hub_config.authenticator_problem(settings.authenticator, settings.ip)]
              if problem]
    print("\n".join(found) if found else f"The hub in {hub_dir} is ready.",
          file=sys.stderr if found else sys.stdout)
    return 1 if found else 0


def release_feedback(args) -> int:
    course_root = Path(args.course or Path.cwd())
    if not (course_root / "submitted").is_dir():
        print(f"{course_root} has no submitted/ folder: run this in the course directory, after "
              "`nbgrader collect --update` and `course grade`", file=sys.stderr)
        return 1
    from graders.hub import feedback  # imports nbgrader's exchange: only this verb needs it

    grading = Path(args.grading or course_root / "grading" / args.lesson)
    placed = feedback.release(course_root, args.lesson, grading)
    for item in placed:
        print(f"{item.user:<16} {item.assignment:<24} "
              + ("feedback released" if item.released else f"NOT released: {item.why}"))
    if not placed:
        print(f"no collected submission of {args.lesson} in {course_root / 'submitted'}")
    return 0 if all(item.released for item in placed) else 1


def _memory(text: str) -> str:
    """A memory limit as JupyterHub writes it (a number and K, M, G or T)."""
    if not MEMORY.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number followed by K, M, G or T (4G, 512M)")
    return text


def add_hub_command(commands) -> None:
    """``course hub`` and its three verbs, added to the ``course`` command's subparsers."""
    hub = commands.add_parser("hub", help="the course on a JupyterHub of its own: serve, check, feedback",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = hub.add_subparsers(dest="hub_command", required=True)
    start = verbs.add_parser("serve", help="set up and run the course's JupyterHub (as root)")
    start.add_argument("--hub-dir", default=HUB_DIR, help="the hub's configuration and state")
    start.add_argument("--roster", default=None, help="a CSV user,role,language (default: "
                       + ", ".join(f"{m.user} ({m.role}, {m.language})" for m in roster.DEFAULT_ROSTER) + ")")
    start.add_argument("--exchange", default=exchange.DEFAULT_ROOT)
    start.add_argument("--ip", default="127.0.0.1", help="0.0.0.0 to serve other machines (put TLS in front; "
                       "not with --authenticator dummy)")
    start.add_argument("--port", type=int, default=8000)
    start.add_argument("--hub-port", type=int, default=8081)
    start.add_argument("--proxy-api-port", type=int, default=8001)
    start.add_argument("--authenticator", choices=hub_config.AUTHENTICATORS, default="pam",
                       help="pam: the accounts' system passwords; dummy: one shared password (a demo on "
                       "the loopback address only)")
    start.add_argument("--fast", action="store_true", help="students' kernels run the quick version")
    start.add_argument("--wheel", default=None, help="the course's wheel users import it from (default: "
                       "this version's in dist/, which `make wheel` builds)")
    start.add_argument("--instructors-group", default=HubSettings.instructors_group,
                       help="the group that may read the repository and take grading slots")
    start.add_argument("--memory", type=_memory, default=HubSettings.memory,
                       help="memory of each user's server, all it starts included (512M, 4G)")
    start.add_argument("--cpus", type=float, default=HubSettings.cpus, help="CPUs of each user's server")
    start.add_argument("--cull-idle", type=int, default=HubSettings.cull_idle_s, metavar="SECONDS",
                       help="stop a server idle this long (0: never)")
    start.add_argument("--spawner", choices=limits.SPAWNERS, default=HubSettings.spawner,
                       help="each server a systemd unit, or in a cgroup of the course's (auto: systemd "
                       "where it runs)")
    start.add_argument("--singleuser-arg", action="append", help="an option for every JupyterLab")
    start.set_defaults(handler=serve)
    status = verbs.add_parser("check", help="what is wrong with the hub's set-up, and the fixes")
    status.add_argument("--hub-dir", default=HUB_DIR)
    status.set_defaults(handler=check)
    back = verbs.add_parser("feedback", help="release course grade's feedback through the exchange")
    back.add_argument("lesson")
    back.add_argument("--course", default=None, help="the course directory (default: here)")
    back.add_argument("--grading", default=None, help="course grade's --out-dir (default: grading/LESSON)")
    back.set_defaults(handler=release_feedback)
