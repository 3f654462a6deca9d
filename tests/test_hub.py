"""The course on a real JupyterHub (``make hub``), and the parts it is made of.

The parts first, with no process started: the exchange's modes and the fixes said for wrong ones,
the roster, the two editions of a lesson as two assignments, each role's configuration, feedback
put where nbgrader releases it.

Then the whole loop, on a JupyterHub with real local accounts (``make test-hub``, as root): the
instructor releases lesson 01 in both editions with nbgrader's commands; two students log in, each
sees the edition of their language; one fetches it from JupyterLab's assignment list in headless
Chromium and answers it right in the hub's kernel, the other fetches it on the command line and
leaves it blank; both submit (one twice, one after the instructor collected), the instructor
collects, grades with ``course grade`` in its sandbox and releases feedback; each student fetches
their own. Then the bad input: a user who is not enrolled, an exchange with wrong permissions.

And the hub locked down, tried as its students: none reads the solutions, the hidden tests, the
instructor's course directory or another student's home (their Python imports the course from its
wheel); a folder forged in the exchange is not collected and is reported; a student holding or
planting grading slots' locks does not stop ``course grade``; a server over its memory limit is
stopped without touching anyone else's; ``course hub check`` says each opening with its fix.
"""

import contextlib
import csv
import getpass
import hashlib
import html
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from lab_browser import CHROMIUM, FINISHED, KERNEL_READY, MODEL, free_port
from lesson_files import read_solution
from student_machine import build_wheel
from traitlets.config import Config

from graders.grade import cgroups
from graders.grade.sandbox import SLOTS_DIR, SLOTS_FOLDER
from graders.grade.submissions import student_id
from graders.hub import environment, exchange, feedback, hub_config, limits, lockdown, nbgrader_roles, roster
from graders.lessons import BUILD, ROOT, edition_of_assignment, lesson_names
from graders.nbgrader_settings import CODE_STUBS, COURSE_ID
from graders.notebook_grading.redacted_feedback import hidden_lines
from graders.release.editions import fill_solutions, solution_sources

LESSON = "01_tensors"
SHOTS = BUILD / "hub-test"  # screenshots, grading output, feedback and the hub's log


# ------------------------------------------------------------------------------ the parts
@pytest.fixture
def me():
    """This process's user, as the instructor of an exchange it can own."""
    return getpass.getuser()


def _exchange(tmp_path):
    """An exchange as :func:`exchange.prepare` makes it, without root: the caller owns it all."""
    root = tmp_path / "exchange"
    root.mkdir()
    root.chmod(exchange.ROOT_MODE)
    course = root / COURSE_ID
    course.mkdir()
    for name, (mode, _, _) in exchange.FOLDERS.items():
        (course / name).mkdir()
        (course / name).chmod(mode)
    return root


def test_an_exchange_with_nbgraders_modes_has_no_problem(tmp_path, me):
    assert exchange.problems(_exchange(tmp_path), COURSE_ID, me) == []


def test_a_missing_exchange_is_said_with_the_command_that_makes_it(tmp_path, me):
    [problem] = exchange.problems(tmp_path / "nowhere", COURSE_ID, me)
    assert problem.fix == f"mkdir -p {tmp_path / 'nowhere'} && chmod 1777 {tmp_path / 'nowhere'}"


@pytest.mark.parametrize(("folder", "mode", "said", "fix"), [
    ("", 0o755, "nobody can fetch or submit", "chmod 1777"),
    ("inbound", 0o700, "students could not submit", "chmod 2733"),
    ("inbound", 0o2777, "could list everyone's submissions", "chmod 2733"),
    ("outbound", 0o700, "could not list or fetch", "chmod 755"),
    ("feedback", 0o755, "could list everyone's feedback", "chmod 711"),
], ids=["root-not-writable", "inbound-closed", "inbound-readable", "outbound-closed", "feedback-readable"])
def test_wrong_modes_are_said_with_the_command_that_fixes_them(tmp_path, me, folder, mode, said, fix):
    root = _exchange(tmp_path)
    path = root / COURSE_ID / folder if folder else root
    path.chmod(mode)
    [problem] = exchange.problems(root, COURSE_ID, me)
    assert said in problem.what and problem.fix == f"{fix} {path}"
    assert str(problem).startswith(f"{path}: mode {mode:04o}")


def test_a_course_folder_of_someone_else_is_said_with_the_chown_that_fixes_it(tmp_path, me):
    [problem] = exchange.problems(_exchange(tmp_path), COURSE_ID, "someone-else")
    assert "not to the instructor someone-else" in problem.what
    assert problem.fix == f"chown -R someone-else: {tmp_path / 'exchange' / COURSE_ID}"


def test_prepare_refuses_an_exchange_that_would_lose_work_and_changes_nothing(tmp_path, me):
    root = _exchange(tmp_path)
    (root / COURSE_ID / "inbound").chmod(0o700)
    with pytest.raises(exchange.ExchangeError, match="chmod 2733"):
        exchange.prepare(root, COURSE_ID, me)
    assert exchange._mode(root / COURSE_ID / "inbound") == 0o700


def _roster(tmp_path, text):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    return path


def test_a_roster_is_read_and_checked(tmp_path):
    path = _roster(tmp_path, "user,role,language\nprof,instructor,en\nana,student,es\n")
    assert roster.read_roster(path) == [roster.Member("prof", "instructor", "en"),
                                        roster.Member("ana", "student", "es")]
    assert roster.member(path, "ana").language == "es" and roster.member(path, "eve") is None


@pytest.mark.parametrize(("text", "said"), [
    ("user,role,language\nana,student,es\n", "names no instructor"),
    ("user,role,language\nprof,instructor,en\nAna Pérez,student,es\n", "line 2 ('Ana Pérez')"),
    ("user,role,language\nprof,instructor,en\nana,student,fr\n", "language 'fr'"),
    ("user,role,language\nprof,instructor,en\nana,teacher,es\n", "role 'teacher'"),
    ("user,role,language\nprof,instructor,en\nprof,student,es\n", "on the roster twice"),
    ("name,role\nprof,instructor\n", "header user,role,language"),
], ids=["no-instructor", "not-a-user-name", "language", "role", "twice", "header"])
def test_a_roster_that_cannot_run_a_course_says_why(tmp_path, text, said):
    with pytest.raises(roster.RosterError, match=re.escape(said)):
        roster.read_roster(_roster(tmp_path, text))


def test_a_lessons_editions_are_two_assignments():
    assert lesson_names(LESSON).assignments == {"es": "01_tensors_es", "en": "01_tensors_en"}
    assert edition_of_assignment("01_tensors_es") == (LESSON, "es")
    assert edition_of_assignment(LESSON) is None and edition_of_assignment("01_tensors_fr") is None


@pytest.mark.parametrize("language", ["es", "en"])
def test_one_course_directory_releases_each_edition_with_its_own_stubs(language):
    cell = nbformat.v4.new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION",
                                     metadata={"nbgrader": {"solution": True, "grade": False,
                                                            "grade_id": "x", "locked": False}})
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(cells=[cell], metadata={"course": {"language": language},
                                                          "kernelspec": kernelspec})
    released, _ = nbgrader_roles.EditionClearSolutions().preprocess(nb, {})
    assert released.cells[0].source == CODE_STUBS[language]


def test_make_hub_installs_debians_proxy_alone(monkeypatch):
    """``tools/system_packages.py --hub``: JupyterHub's proxy, and what it is for."""
    import importlib.util

    from graders.lessons import ROOT

    spec = importlib.util.spec_from_file_location("system_packages", ROOT / "tools" / "system_packages.py")
    system_packages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(system_packages)
    asked = []
    monkeypatch.setattr(system_packages, "plan", lambda packages, **_: asked.append(packages)
                        or system_packages.Plan("nothing", [], []))
    assert system_packages.main(["--hub"]) == 0
    assert asked == [["node-configurable-http-proxy"]]
    assert "JupyterHub" in system_packages.WHY["node-configurable-http-proxy"]


def test_an_interpreter_in_a_private_folder_is_one_other_users_cannot_run(tmp_path):
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    (private / "bin" / "python").write_text("")
    (private / "bin" / "python").chmod(0o755)
    private.chmod(0o700)
    assert not environment.reachable_by_everyone(private / "bin" / "python")
    assert environment.reachable_by_everyone(Path("/bin/sh"))


def _settings(tmp_path, members=roster.DEFAULT_ROSTER, **extra):
    hub_dir = tmp_path / "hub"
    (hub_dir / "state").mkdir(parents=True)
    roster.write_roster(members, hub_dir / "roster.csv")
    (hub_dir / "state" / "admin_token").write_text("token")
    settings = hub_config.HubSettings(str(hub_dir), str(tmp_path / "exchange"), str(tmp_path / "course"),
                                      **extra)
    nbgrader_roles.write_role_configs(hub_dir, {"exchange": settings.exchange, "roster": str(settings.roster),
                                                "course_root": settings.course_root})
    return settings


def test_the_hub_lets_in_the_roster_runs_each_user_as_themselves_with_their_roles_configuration(tmp_path):
    settings = _settings(tmp_path, fast=True)
    c = Config()
    hub_config.configure(c, settings.save())
    assert c.Authenticator.allowed_users == {"instructor", "alumna", "student"}
    assert c.Authenticator.admin_users == {"instructor"}
    assert c.Spawner.cmd == [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
    assert c.Spawner.env_keep == ["LANG", "LC_ALL"]  # no PYTHONPATH of root's reaches a user
    for user, role in (("alumna", "student"), ("instructor", "instructor")):
        spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment={"PATH": "p"})
        c.Spawner.pre_spawn_hook(spawner)
        assert spawner.environment == hub_config.role_environment(settings, role)
        assert spawner.environment["JUPYTER_CONFIG_PATH"] == f"{settings.hub_dir}/jupyter/{role}"
        assert spawner.environment["PATH"].startswith(f"{Path(sys.executable).parent}:")
        assert spawner.environment["COURSE_FAST"] == "1"
    with pytest.raises(PermissionError, match="not on the course's roster"):
        c.Spawner.pre_spawn_hook(SimpleNamespace(user=SimpleNamespace(name="eve"), environment={}))


def test_only_instructors_import_the_course_from_the_repository_students_from_the_wheel(tmp_path):
    settings = _settings(tmp_path)
    assert hub_config.role_environment(settings, "instructor")["PYTHONPATH"] == str(ROOT)
    assert "PYTHONPATH" not in hub_config.role_environment(settings, "student")


CGROUPS, SYSTEMD = "graders.hub.spawner.CgroupSpawner", "systemdspawner.SystemdSpawner"


@pytest.mark.parametrize(("spawner", "systemd", "expected"), [
    ("auto", False, CGROUPS), ("auto", True, SYSTEMD), ("cgroups", True, CGROUPS),
    ("systemd", False, SYSTEMD),
], ids=["no-systemd", "systemd", "cgroups-asked", "systemd-asked"])
def test_each_users_server_has_its_limits_and_idle_servers_are_culled_by_default(tmp_path, monkeypatch,
                                                                                spawner, systemd, expected):
    monkeypatch.setattr(limits, "systemd_runs", lambda: systemd)
    settings = _settings(tmp_path, memory="3G", cpus=1.5, spawner=spawner)
    c = Config()
    hub_config.configure(c, settings.save())
    assert (c.Spawner.mem_limit, c.Spawner.cpu_limit) == ("3G", 1.5)
    assert c.JupyterHub.spawner_class == expected
    [culler] = [service for service in c.JupyterHub.services if service["name"] == limits.CULLER]
    assert culler["command"][1:] == ["-m", "jupyterhub_idle_culler", "--timeout=3600"]
    assert any(role["services"] == [limits.CULLER] and "delete:servers" in role["scopes"]
               for role in c.JupyterHub.load_roles)


def test_a_hub_without_the_idle_culler_is_said_with_the_fix(tmp_path):
    settings = _settings(tmp_path, cull_idle_s=0)
    c = Config()
    hub_config.configure(c, settings.save())
    assert [service["name"] for service in c.JupyterHub.services] == [hub_config.ADMIN_SERVICE]
    assert [problem.fix for problem in limits.problems(settings) if "culler" in problem.what] == \
        ["make hub HUB_CULL=3600"]


@pytest.mark.parametrize("ip", ["0.0.0.0", "192.0.2.7", ""])
def test_the_dummy_authenticator_serves_the_loopback_address_only_and_make_hub_says_why(tmp_path, ip,
                                                                                       capsys):
    from graders.hub import commands

    assert hub_config.on_loopback("127.0.0.1") and hub_config.on_loopback("::1")
    args = SimpleNamespace(authenticator="dummy", ip=ip)
    assert commands.serve(args) == 1  # before anything is made, root or not
    said = capsys.readouterr().err
    assert "log in as anyone, the instructor included" in said and "--authenticator pam" in said
    settings = _settings(tmp_path, authenticator="dummy", ip=ip)
    with pytest.raises(ValueError, match="loopback address"):
        hub_config.configure(Config(), settings.save())


def test_accounts_the_hub_creates_each_get_a_password_of_their_own(monkeypatch):
    given = []
    monkeypatch.setattr(roster, "exists", lambda user: False)
    monkeypatch.setattr(roster.subprocess, "run", lambda command, **kwargs: given.append(kwargs.get("input")))
    created = roster.create_users(roster.DEFAULT_ROSTER)
    assert len(set(created.values())) == len(roster.DEFAULT_ROSTER)
    assert given[-1] == "".join(f"{user}:{password}\n" for user, password in created.items())


def _inbound_folder(tmp_path, student: str, *files: str) -> Path:
    """A folder in an inbound/ as ``nbgrader submit`` names it, made by this process's user."""
    folder = tmp_path / "inbound" / f"{student}+{LESSON}_en+2026-12-01 10:00:00.000000 UTC+abc"
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(f"{name} of {student}")
    return folder


def test_collect_takes_a_students_own_folder_and_copies_it_whole(tmp_path, me):
    folder = _inbound_folder(tmp_path, me, f"{LESSON}.ipynb", "timestamp.txt", "data/extra.txt")
    exchange.take(folder, tmp_path / "copy")
    assert (tmp_path / "copy" / "data" / "extra.txt").read_text() == f"data/extra.txt of {me}"
    copied = sorted(path.name for path in (tmp_path / "copy").iterdir())
    assert copied == [f"{LESSON}.ipynb", "data", "timestamp.txt"]


def _someone_else(me: str) -> str:
    return "nobody" if me == "root" else "root"


def test_collect_refuses_a_folder_named_for_someone_else_saying_whose_it_is(tmp_path, me):
    other = _someone_else(me)
    folder = _inbound_folder(tmp_path, other, f"{LESSON}.ipynb")
    with pytest.raises(exchange.Refused) as refused:
        exchange.take(folder)
    assert (refused.value.folder, refused.value.owner) == (folder, me)
    assert refused.value.why == f"it belongs to {me}, not to {other}, whom its name says submitted it"


@pytest.mark.parametrize("plant", ["link", "folder-link", "fifo"])
def test_collect_refuses_a_link_or_anything_but_files_and_folders_and_follows_none(tmp_path, me, plant):
    secret = tmp_path / "instructor-only.ipynb"
    secret.write_text("the solutions")
    folder = _inbound_folder(tmp_path, me, "timestamp.txt", "sub/notes.txt")
    planted = folder / "sub" / f"{LESSON}.ipynb"
    if plant == "link":
        planted.symlink_to(secret)
    elif plant == "folder-link":
        planted.symlink_to(tmp_path, target_is_directory=True)
    else:
        os.mkfifo(planted)  # a copy would wait on it for ever
    with pytest.raises(exchange.Refused) as refused:
        exchange.take(folder, tmp_path / "copy")
    assert refused.value.why == f"sub/{LESSON}.ipynb is " + ("neither a file nor a folder" if plant == "fifo"
                                                             else "a symbolic link")
    copied = [path.read_text() for path in (tmp_path / "copy").rglob("*") if path.is_file()]
    assert "the solutions" not in "".join(copied)


def test_check_refuses_a_file_where_a_submission_folder_should_be(tmp_path, me):
    planted = tmp_path / f"{me}+{LESSON}_en+2026-12-01 10:00:00.000000 UTC+abc"
    planted.write_text("not a submission")
    with pytest.raises(exchange.Refused, match="it is a file, not a folder"):
        exchange.take(planted)


@pytest.mark.subprocess  # a new gradebook runs alembic
@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another account's takes root to make")
def test_nbgraders_collect_takes_the_latest_folder_of_the_student_and_reports_the_forged_one(tmp_path, me,
                                                                                            caplog):
    """A folder named for a classmate, later than theirs, is left where it is and reported; the
    classmate's own is collected."""
    from nbgrader.coursedir import CourseDirectory

    other = _someone_else(me)
    course = tmp_path / "course"
    inbound = tmp_path / "exchange" / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    own = inbound / f"{me}+{LESSON}_en+2026-12-01 10:00:00.000000 UTC+own"
    forged = inbound / f"{me}+{LESSON}_en+2026-12-02 10:00:00.000000 UTC+forged"
    for folder, text in ((own, "mine"), (forged, "forged")):
        folder.mkdir()
        (folder / f"{LESSON}.ipynb").write_text(text)
        (folder / "timestamp.txt").write_text(folder.name.split("+")[2])
    os.chown(forged, pwd.getpwnam(other).pw_uid, -1)
    course.mkdir()
    collect = nbgrader_roles.OwnCollect(coursedir=CourseDirectory(root=str(course), course_id=COURSE_ID),
                                        root=str(tmp_path / "exchange"), update=True)
    collect.coursedir.assignment_id = f"{LESSON}_en"
    collect.start()
    assert (course / "submitted" / me / f"{LESSON}_en" / f"{LESSON}.ipynb").read_text() == "mine"
    [said] = [record.getMessage() for record in caplog.records if "Not collected" in record.getMessage()]
    assert said == f"Not collected: {forged} (owner {other}): it belongs to {other}, not to {me}, whom its " \
                   "name says submitted it"


def test_students_get_the_assignment_list_and_no_formgrader_the_instructor_everything(tmp_path):
    settings = _settings(tmp_path)
    folders = Path(settings.hub_dir) / "jupyter"
    student_lab = json.loads((folders / "student" / "labconfig" / "page_config.json").read_text())
    student_server = json.loads((folders / "student" / "jupyter_server_config.json").read_text())
    assert student_lab["disabledExtensions"] == {"@jupyter/nbgrader:formgrader": True,
                                                 "@jupyter/nbgrader:course-list": True,
                                                 "@jupyter/nbgrader:create-assignment": True}
    extensions = student_server["ServerApp"]["jpserver_extensions"]
    assert extensions["nbgrader.server_extensions.formgrader"] is False
    assert "assignment_list" not in json.dumps(student_server)
    instructor_lab = json.loads((folders / "instructor" / "labconfig" / "page_config.json").read_text())
    assert instructor_lab["disabledExtensions"] == {}


def test_students_nbgrader_has_the_course_its_exchange_and_the_roster_as_enrolment(tmp_path):
    settings = _settings(tmp_path)
    c = Config()
    nbgrader_roles.configure_student(c, Path(settings.hub_dir) / nbgrader_roles.SETTINGS_FILE)
    assert (c.CourseDirectory.course_id, c.Exchange.root) == (COURSE_ID, settings.exchange)
    assert c.Authenticator.plugin_class is nbgrader_roles.RosterAuthPlugin
    plugin = nbgrader_roles.RosterAuthPlugin(roster=str(settings.roster))
    assert plugin.get_student_courses("alumna") == [COURSE_ID]
    assert plugin.get_student_courses("eve") == []


def _graded_course(tmp_path, users=("ana", "ben")):
    """A course directory with collected submissions, and a grading folder whose state says
    which notebook was graded."""
    course, grading = tmp_path / "course", tmp_path / "grading"
    (grading / "feedback").mkdir(parents=True)
    state = {}
    for user in users:
        folder = course / "submitted" / user / f"{LESSON}_es"
        folder.mkdir(parents=True)
        (folder / f"{LESSON}.ipynb").write_text(f"{user}'s notebook")
        (folder / "timestamp.txt").write_text("2026-12-01 10:00:00.000000 UTC")
        (folder / "submission_secret.txt").write_text(f"{user}-secret")
        (grading / "feedback" / f"{student_id(user)}.html").write_text(f"{user}'s feedback")
        state[student_id(user)] = {"digest": hashlib.sha256(f"{user}'s notebook".encode()).hexdigest()}
    (grading / "state.json").write_text(json.dumps(state))
    return course, grading


def test_feedback_goes_where_nbgrader_releases_it_with_the_submissions_secret(tmp_path):
    course, grading = _graded_course(tmp_path)
    placed = feedback.place(course, LESSON, grading)
    assert [(p.user, p.assignment, p.released) for p in placed] == [("ana", "01_tensors_es", True),
                                                                    ("ben", "01_tensors_es", True)]
    target = course / "feedback" / "ana" / "01_tensors_es"
    assert (target / f"{LESSON}.html").read_text() == "ana's feedback"
    assert (target / "submission_secret.txt").read_text() == "ana-secret"


def test_a_submission_collected_after_grading_waits_for_its_own_feedback(tmp_path):
    course, grading = _graded_course(tmp_path)
    (course / "submitted" / "ben" / "01_tensors_es" / f"{LESSON}.ipynb").write_text("ben's newer notebook")
    placed = {p.user: p for p in feedback.place(course, LESSON, grading)}
    assert placed["ana"].released and not placed["ben"].released
    assert "run `course grade` again" in placed["ben"].why
    assert not (course / "feedback" / "ben").exists()


# ---------------------------------------------------------------------- the hub, end to end
TAG = secrets.token_hex(2)
PROF, ANA, BEN, EVE = (f"hub{TAG}-{name}" for name in ("prof", "ana", "ben", "eve"))
STAFF = f"hub{TAG}-staff"  # the instructors' group
MEMORY = 2 * 1024**3  # each user's server's (--memory 2G): a lesson's kernel and JupyterLab fit
BIN = Path(sys.executable).parent
COURSE = str(BIN / "course")
MODULE = f"graders.lesson_checks.{lesson_names(LESSON).check_module}"


def _missing() -> str:
    if os.geteuid() != 0:
        return "creates local accounts and starts servers as them: run as root (make test-hub)"
    if not (BIN / "jupyterhub").exists():
        return "JupyterHub is not installed here (make test-hub installs pyproject's hub extra)"
    if not shutil.which("configurable-http-proxy"):
        return "configurable-http-proxy is missing (make test-hub installs it)"
    if not CHROMIUM:
        return "no Chromium (make test-packages installs it)"
    return ""


@pytest.fixture(scope="module")
def hub():
    """A JupyterHub for one course: an instructor and two students on the roster (Spanish and
    English editions), one local user who is not, an exchange, an instructors' group and a wheel of
    the course of its own; all removed after, and what the hub closed of the machine's (the
    repository, the grader's slots) reopened as it was."""
    if _missing():  # asked for by name (-m hub): what is missing fails, never skips
        pytest.fail(_missing(), pytrace=False)
    base = Path(tempfile.mkdtemp(prefix="course-hub-", dir="/srv"))
    base.chmod(0o755)  # the accounts reach the exchange and the hub's configuration through it
    build_wheel(base / "dist")  # users import the course from it, as from `make wheel`'s
    [wheel] = (base / "dist").glob("pytorch_course-*.whl")
    members = [roster.Member(PROF, "instructor", "en"), roster.Member(ANA, "student", "es"),
               roster.Member(BEN, "student", "en")]
    roster_file = roster.write_roster(members, base / "roster.csv")
    outsider = roster.create_users([roster.Member(EVE, "student", "en")])
    port = free_port()
    log = open(base / "hub.log", "w")
    closed = _closed_folders()
    process = subprocess.Popen(
        [COURSE, "hub", "serve", "--hub-dir", str(base / "hub"),
         "--roster", str(roster_file), "--exchange", str(base / "exchange"), "--port", str(port),
         "--hub-port", str(free_port()), "--proxy-api-port", str(free_port()), "--fast",
         "--wheel", str(wheel), "--instructors-group", STAFF, "--memory", "2G", "--spawner", "cgroups",
         "--singleuser-arg=--LabApp.expose_app_in_browser=True"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        settings = _wait_for_hub(process, base, port)
        state = Path(settings.hub_dir) / "state"
        yield SimpleNamespace(
            base=base, settings=settings, url=settings.url, log=base / "hub.log",
            token=hub_config.secret(state / "admin_token"),
            passwords={**json.loads((state / "passwords.json").read_text()), **outsider},
            exchange=Path(settings.exchange), course=Path(settings.course_root))
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()
        _end_processes_of([PROF, ANA, BEN, EVE])
        roster.remove_users([PROF, ANA, BEN, EVE])
        _reopen(closed)
        subprocess.run(["groupdel", STAFF], capture_output=True)
        if SHOTS.exists():
            shutil.copyfile(base / "hub.log", SHOTS / "hub.log")
        shutil.rmtree(base, ignore_errors=True)


def _closed_folders() -> dict:
    """The owner, group and mode of what the hub closes and belongs to this machine, not to the test:
    the repository, and the grader's slots' folder and locks."""
    return {path: (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))
            for path in [ROOT, SLOTS_FOLDER, *(SLOTS_FOLDER.iterdir() if SLOTS_FOLDER.is_dir() else [])]
            for info in [path.stat()]}


def _reopen(closed: dict) -> None:
    """What the hub closed as it was before (the test's group goes): the slots' folder as root's
    graders make it where it was not there yet."""
    for path in [SLOTS_FOLDER, *SLOTS_FOLDER.iterdir()] if SLOTS_FOLDER.is_dir() else []:
        uid, gid, mode = closed.get(path, (0, 0, 0o700 if path.is_dir() else 0o640))
        os.chown(path, uid, gid)
        path.chmod(mode)
    uid, gid, mode = closed[ROOT]
    os.chown(ROOT, uid, gid)
    ROOT.chmod(mode)


def _wait_for_hub(process, base: Path, port: int, timeout: float = 300) -> hub_config.HubSettings:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the hub exited with {process.returncode}:\n"
                               f"{(base / 'hub.log').read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/hub/api/", timeout=2)
            return hub_config.HubSettings.load(base / "hub" / "state" / "hub_settings.json")
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the hub did not answer in {timeout} s:\n{(base / 'hub.log').read_text()[-3000:]}")


def _end_processes_of(users) -> None:
    """What the hub started as the test's accounts and left running (their servers, kernels)."""
    uids = {pwd.getpwnam(user).pw_uid for user in users if roster.exists(user)}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid in uids:
                os.kill(int(entry.name), 9)
        except (OSError, ProcessLookupError):
            pass


def api(hub, method: str, path: str, expected=(200,)):
    """The hub's REST API with the course's service token; returns the JSON answer."""
    request = urllib.request.Request(f"{hub.url}/hub/api/{path}", method=method,
                                     headers={"Authorization": f"token {hub.token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    assert status in expected, f"{method} {path}: {status} {body[:300]!r}"
    return json.loads(body) if body else None


def _as(user: str) -> list[str]:
    """The command prefix that runs what follows as ``user``, with their groups."""
    account = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups"]


def _terminal(hub, user: str, role: str) -> dict:
    """The environment of a terminal on the hub: what the hub gives ``user``'s server."""
    return {"HOME": str(roster.home(user)), "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
            "JUPYTERHUB_USER": user, **hub_config.role_environment(hub.settings, role)}


def as_user(hub, user: str, *command, cwd=None, check=True, role="student"):
    """``command`` run as ``user`` in their home, with the environment of a terminal on the hub."""
    done = subprocess.run([*_as(user), *map(str, command)], cwd=cwd or roster.home(user),
                          env=_terminal(hub, user, role), capture_output=True, text=True, timeout=900)
    if check:
        assert done.returncode == 0, f"{' '.join(map(str, command))} as {user}:\n{done.stdout}\n{done.stderr}"
    return done


def instructor(hub, *command, check=True):
    return as_user(hub, PROF, *command, cwd=hub.course, check=check, role="instructor")


def _start_server(hub, user: str) -> int:
    """Start ``user``'s server through the REST API; returns its process id once it is ready."""
    api(hub, "POST", f"users/{user}/server", expected=(201, 202, 400))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        server = api(hub, "GET", f"users/{user}")["servers"].get("", {})
        if server.get("ready"):
            return server["state"]["pid"]
        time.sleep(1)
    raise TimeoutError(f"{user}'s server did not start:\n{hub.log.read_text()[-3000:]}")


def server_api(hub, user: str, method: str, path: str, body=None, expected=(200,)):
    """``user``'s server's REST API (Jupyter Server's), through the hub, with the service token."""
    request = urllib.request.Request(f"{hub.url}/user/{user}/api/{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {hub.token}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, text = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read()
    assert status in expected, f"{method} {user}'s {path}: {status} {text[:300]!r}"
    return json.loads(text) if text else None


def _log_in(browser, hub, user: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    page.click("#login_submit")
    return context, page


def _fetch_in_the_assignment_list(page, user: str, assignment: str) -> list[str]:
    """Open nbgrader's assignment list in JupyterLab and press Fetch; returns what it listed."""
    page.wait_for_url(f"**/user/{user}/lab**", timeout=240_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands"
                           ".hasCommand('nbgrader:open-assignment-list')", timeout=120_000, polling=250)
    page.evaluate("window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
    released = page.locator("#released_assignments_list .list_item")
    released.first.wait_for(timeout=120_000)
    listed = [text.split()[0] for text in released.all_inner_texts()]
    released.filter(has_text=assignment).get_by_role("button", name="Fetch").click()
    page.locator("#fetched_assignments_list .list_item", has_text=assignment).wait_for(timeout=120_000)
    return listed


def _run_and_save(page, hub, user: str, path: str) -> list[dict]:
    """Open the notebook at ``path`` in the user's JupyterLab, run every cell in the hub's kernel,
    save; returns the notebook's cells as the page's model holds them."""
    page.goto(f"{hub.url}/user/{user}/lab/tree/{path}?reset")
    page.wait_for_function(KERNEL_READY, arg=path, timeout=180_000, polling=250)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(FINISHED, timeout=900_000, polling=500)
    cells = page.evaluate(MODEL)
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                           timeout=60_000, polling=250)
    return cells


def _text(cell: dict) -> str:
    """What a cell printed (a stream's text may come as one string or as lines)."""
    return "".join("".join(output.get("text", "")) for output in cell["outputs"])


def _score(feedback_html: str) -> tuple[float, float]:
    found = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", re.sub(r"<[^>]+>", " ", feedback_html))
    assert found, "the feedback shows no score"
    return float(found[1]), float(found[2])


def _grades(path: Path) -> dict:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def _fetched(user: str, language: str) -> Path:
    return roster.home(user) / f"{LESSON}_{language}" / f"{LESSON}.ipynb"


# A student after the grader's slots: what she can do in the slots' folder, said as JSON; then she
# plants and locks every lock file where the instructor's grader would keep its slots without that
# folder (a folder of the instructor's in /tmp), and holds them.
SQUAT = """import fcntl, json, os, sys, time
from pathlib import Path
run, planted = Path(sys.argv[1]), Path(sys.argv[2])
reached = {}
for what, act in (("list", lambda: os.listdir(run)), ("open", lambda: open(run / "0.lock", "rb")),
                  ("create", lambda: open(run / "planted.lock", "x"))):
    try:
        act()
        reached[what] = "done"
    except OSError as error:
        reached[what] = type(error).__name__
planted.mkdir(mode=0o755)
held = [open(planted / f"{number}.lock", "w") for number in range(500)]
for handle in held:
    fcntl.flock(handle, fcntl.LOCK_EX)
print(json.dumps(reached), flush=True)
time.sleep(3600)
"""


@contextlib.contextmanager
def _squatting(hub, user: str):
    """``user`` holding every grading slot's lock she can reach, for the length of the block; yields
    what she could do in the slots' folder."""
    planted = Path(tempfile.gettempdir()) / f"{SLOTS_DIR}-{pwd.getpwnam(PROF).pw_uid}"
    shutil.rmtree(planted, ignore_errors=True)
    squatter = subprocess.Popen([*_as(user), f"{hub.settings.bin_dir}/python", "-c", SQUAT, str(SLOTS_FOLDER),
                                 str(planted)], cwd="/", stdout=subprocess.PIPE, text=True)
    try:
        reached = json.loads(squatter.stdout.readline())
        yield reached
    finally:
        squatter.kill()
        squatter.wait()
        shutil.rmtree(planted, ignore_errors=True)


@pytest.mark.hub
@pytest.mark.browser
def test_a_lesson_goes_round_the_hub_release_fetch_submit_collect_grade_feedback(hub):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    assert "Still wrong" not in hub.log.read_text()  # serve closed all it should
    # The instructor releases both editions, with nbgrader's commands, from their course directory.
    for language in ("es", "en"):
        instructor(hub, "nbgrader", "generate_assignment", f"{LESSON}_{language}", "--force")
        instructor(hub, "nbgrader", "release_assignment", f"{LESSON}_{language}", "--force")
    outbound = hub.exchange / COURSE_ID / "outbound"
    assert "ESCRIBE TU CÓDIGO AQUÍ" in (outbound / f"{LESSON}_es" / f"{LESSON}.ipynb").read_text()
    assert "YOUR CODE HERE" in (outbound / f"{LESSON}_en" / f"{LESSON}.ipynb").read_text()

    # The hub starts each student's JupyterLab (REST API) as that student's own local account.
    for user in (ANA, BEN):
        assert Path(f"/proc/{_start_server(hub, user)}").stat().st_uid == pwd.getpwnam(user).pw_uid

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            # Ana logs in and fetches the Spanish edition from the assignment list: the only one it shows her.
            context, page = _log_in(browser, hub, ANA)
            listed = _fetch_in_the_assignment_list(page, ANA, f"{LESSON}_es")
            page.screenshot(path=str(SHOTS / "assignment-list.png"))
            assert listed == [f"{LESSON}_es"]
            fetched = nbformat.read(_fetched(ANA, "es"), 4)
            assert fetched.metadata["course"]["language"] == "es"
            # She submits it blank first, then answers it right in the hub's kernel and submits again.
            as_user(hub, ANA, "nbgrader", "submit", f"{LESSON}_es")
            solved = fill_solutions(fetched, solution_sources(read_solution(LESSON)))
            nbformat.write(solved, _fetched(ANA, "es"))
            shutil.chown(_fetched(ANA, "es"), ANA, ANA)
            cells = _run_and_save(page, hub, ANA, f"{LESSON}_es/{LESSON}.ipynb")
            page.screenshot(path=str(SHOTS / "lesson-run.png"))
            context.close()
        finally:
            browser.close()
    errors = [cell["source"][:60] for cell in cells for output in cell["outputs"]
              if output["output_type"] == "error"]
    assert errors == []
    # Her identity is the hub user's: the questions drawn for her, with nothing typed.
    from graders.lesson_checks.questions import draw

    shown = next(_text(cell) for cell in cells if "show_questions" in cell["source"])
    assert repr(ANA) in shown and all(f"[{qid}]" in shown for qid in draw(MODULE, ANA))
    as_user(hub, ANA, "nbgrader", "submit", f"{LESSON}_es")

    # Ben fetches the English edition on the command line; it is the only one listed for him.
    listing = as_user(hub, BEN, "nbgrader", "list")
    listed = listing.stdout + listing.stderr
    assert f"{LESSON}_en" in listed and f"{LESSON}_es" not in listed
    as_user(hub, BEN, "nbgrader", "fetch_assignment", f"{LESSON}_en")
    assert nbformat.read(_fetched(BEN, "en"), 4).metadata["course"]["language"] == "en"

    # The instructor collects: Ana's latest submission counts; Ben has not submitted yet.
    for language in ("es", "en"):
        instructor(hub, "nbgrader", "collect", "--update", f"{LESSON}_{language}")
    submitted = hub.course / "submitted"
    collected = submitted / ANA / f"{LESSON}_es" / f"{LESSON}.ipynb"
    assert collected.read_bytes() == _fetched(ANA, "es").read_bytes()
    assert not (submitted / BEN).exists()
    # Ben submits his blank notebook after the collection: the next collection takes it.
    as_user(hub, BEN, "nbgrader", "submit", f"{LESSON}_en")
    instructor(hub, "nbgrader", "collect", "--update", f"{LESSON}_en")
    assert (submitted / BEN / f"{LESSON}_en" / f"{LESSON}.ipynb").exists()

    # The instructor grades both editions at once, sandboxed, from the collected folder, while Ana
    # holds every grading slot's lock she can reach.
    out = hub.course / "grading" / LESSON
    with _squatting(hub, ANA) as reached:
        graded = instructor(hub, "course", "grade", submitted, "--lesson", LESSON, "--out-dir", out,
                            "--workers", "2")
    assert reached == {"list": "PermissionError", "open": "PermissionError", "create": "PermissionError"}
    (SHOTS / "course-grade.txt").write_text(graded.stdout + graded.stderr)
    assert "Protections: runs as" in graded.stdout and "NO SANDBOX" not in graded.stdout
    grades = _grades(out / "grades.csv")
    assert grades[ANA]["total"] == grades[ANA]["max"], grades[ANA]
    assert float(grades[BEN]["total"]) == 0 and grades[BEN]["status"] == "graded"
    assert (grades[ANA]["questions_for"], grades[ANA]["questions_status"]) == (ANA, "submitter")

    # Feedback goes back through the exchange; each student fetches their own.
    released = instructor(hub, "course", "hub", "feedback", LESSON)
    assert released.stdout.count("feedback released") == 2, released.stdout
    secrets_of_the_tests = hidden_lines(read_solution(LESSON), "### BEGIN HIDDEN TESTS",
                                        "### END HIDDEN TESTS")
    assert secrets_of_the_tests
    maximum = float(grades[ANA]["max"])
    for user, language, expected in ((ANA, "es", maximum), (BEN, "en", 0.0)):
        as_user(hub, user, "nbgrader", "fetch_feedback", f"{LESSON}_{language}")
        folder = roster.home(user) / f"{LESSON}_{language}" / "feedback"
        [page_of_feedback] = folder.glob(f"*/{LESSON}.html")
        text = page_of_feedback.read_text()
        shutil.copyfile(page_of_feedback, SHOTS / f"feedback-{language}.html")
        assert _score(text) == (expected, maximum)
        assert "BEGIN HIDDEN TESTS" not in text
        assert not [line for line in secrets_of_the_tests if line in text or html.escape(line) in text]
    print(f"{LESSON}: {ANA} {grades[ANA]['total']}/{maximum:g}, {BEN} {grades[BEN]['total']}/{maximum:g}")


@pytest.mark.hub
@pytest.mark.browser
def test_a_user_who_is_not_enrolled_is_told_so_and_loses_nothing(hub):
    from playwright.sync_api import sync_playwright

    listing = as_user(hub, EVE, "nbgrader", "list")
    assert f"{LESSON}_" not in listing.stdout + listing.stderr
    refused = as_user(hub, EVE, "nbgrader", "fetch_assignment", f"{LESSON}_en", check=False)
    assert refused.returncode != 0
    said = refused.stdout + refused.stderr
    assert f"{EVE} is not enrolled in the course {COURSE_ID}" in said and str(hub.settings.roster) in said
    assert not (roster.home(EVE) / f"{LESSON}_en").exists()
    api(hub, "POST", f"users/{EVE}/server", expected=(404,))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            # her own system password, right: the hub still refuses her, saying no more than that
            context, page = _log_in(browser, hub, EVE)
            page.wait_for_load_state()
            assert "/hub/login" in page.url and "Invalid username or password" in page.inner_text("body")
            context.close()
        finally:
            browser.close()


def _check(hub):
    return subprocess.run([COURSE, "hub", "check", "--hub-dir", hub.settings.hub_dir],
                          capture_output=True, text=True)


@pytest.mark.hub
@pytest.mark.browser
def test_an_exchange_with_wrong_permissions_is_said_with_its_fix_and_loses_nothing(hub):
    root = hub.exchange
    root.chmod(0o755)
    checked = _check(hub)
    assert checked.returncode == 1
    [fix] = re.findall(r"Fix it \(as root\): (.+)", checked.stderr)
    assert fix == f"chmod 1777 {root}"
    if not _fetched(BEN, "en").exists():
        as_user(hub, BEN, "nbgrader", "fetch_assignment", f"{LESSON}_en")
    before = _fetched(BEN, "en").read_bytes()
    refused = as_user(hub, BEN, "nbgrader", "submit", f"{LESSON}_en", check=False)
    assert refused.returncode != 0 and "Unwritable directory" in refused.stdout + refused.stderr
    assert _fetched(BEN, "en").read_bytes() == before
    subprocess.run(fix, shell=True, check=True)
    assert _check(hub).returncode == 0
    as_user(hub, BEN, "nbgrader", "submit", f"{LESSON}_en")


# What a student tries to read: each path, and the error the attempt met (or "read").
PROBE = """import json, os, sys
reached = {}
for path in sys.argv[1:]:
    try:
        try:
            os.listdir(path)
        except NotADirectoryError:
            open(path, "rb").close()
        reached[path] = "read"
    except OSError as error:
        reached[path] = type(error).__name__
print(json.dumps(reached))
"""
WHERE_COURSE_IS = "import course, graders.lessons as l; print(course.__file__, l.ROOT, l.SOLUTIONS.exists())"


def _probe(hub, user: str, paths, role="student") -> dict:
    done = as_user(hub, user, f"{hub.settings.bin_dir}/python", "-c", PROBE, *paths, cwd="/", role=role)
    return json.loads(done.stdout)


@pytest.mark.hub
@pytest.mark.browser
def test_no_student_reads_the_solutions_the_hidden_tests_the_course_directory_or_another_students_home(hub):
    source = hub.course / "source" / f"{LESSON}_en" / f"{LESSON}.ipynb"
    assert "BEGIN HIDDEN TESTS" in source.read_text()
    closed = [ROOT, ROOT / "solutions", ROOT / "solutions" / f"{LESSON}.ipynb", hub.course, source,
              hub.course / "gradebook.db", hub.course / "submitted", hub.course / "grading"]
    for user, other, language in ((ANA, BEN, "en"), (BEN, ANA, "es")):
        theirs = [roster.home(PROF), roster.home(other), _fetched(other, language)]
        assert all(path.exists() for path in [*closed, *theirs])  # as root: nothing here is missing
        reached = _probe(hub, user, [*closed, *theirs])
        assert reached == {str(path): "PermissionError" for path in [*closed, *theirs]}
        # their Python imports the course from its wheel, which holds no solution
        where = as_user(hub, user, "python", "-c", WHERE_COURSE_IS, cwd="/").stdout.split()
        users_python = str(Path(hub.settings.bin_dir).parent)
        assert where[0].startswith(users_python) and where[1].startswith(users_python) and where[2] == "False"
    for person in (PROF, ANA, BEN):
        assert stat.S_IMODE(roster.home(person).stat().st_mode) == 0o700
    # the instructors' group reads the repository, whose solutions course grade needs
    assert _probe(hub, PROF, [ROOT / "solutions" / f"{LESSON}.ipynb"], role="instructor") == \
        {str(ROOT / "solutions" / f"{LESSON}.ipynb"): "read"}


# A student forging two submissions: one named for a classmate, later than hers; one of his own
# whose notebook is a link to the instructor's source of the lesson (its solutions, hidden tests).
FORGE = """import os, sys
from pathlib import Path
forged, linked, target = map(Path, sys.argv[1:4])
for folder in (forged, linked):
    folder.mkdir(mode=0o755)
    (folder / "timestamp.txt").write_text(sys.argv[4])
(forged / "01_tensors.ipynb").write_text("a forged notebook")
(linked / "01_tensors.ipynb").symlink_to(target)
"""


@pytest.mark.hub
@pytest.mark.browser
def test_a_folder_forged_in_the_exchange_is_not_collected_and_is_reported(hub):
    inbound = hub.exchange / COURSE_ID / "inbound"
    later = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    forged = inbound / f"{ANA}+{LESSON}_es+{later}+forged"
    linked = inbound / f"{BEN}+{LESSON}_en+{later}+linked"
    source = hub.course / "source" / f"{LESSON}_en" / f"{LESSON}.ipynb"
    as_user(hub, BEN, "python", "-c", FORGE, forged, linked, source, later)
    said = "".join(instructor(hub, "nbgrader", "collect", "--update", f"{LESSON}_{language}").stderr
                   for language in ("es", "en"))
    assert f"Not collected: {forged} (owner {BEN}): it belongs to {BEN}, not to {ANA}, whom its name says " \
           "submitted it" in said
    assert f"Not collected: {linked} (owner {BEN}): {LESSON}.ipynb is a symbolic link" in said
    # each student's latest own submission is what the instructor has
    for user, language in ((ANA, "es"), (BEN, "en")):
        collected = hub.course / "submitted" / user / f"{LESSON}_{language}" / f"{LESSON}.ipynb"
        assert collected.read_bytes() == _fetched(user, language).read_bytes()
    checked = _check(hub)
    fixes = re.findall(r"Fix it \(as root\): (.+)", checked.stderr)
    assert fixes == [f"rm -rf '{forged}'", f"rm -rf '{linked}'"], checked.stderr
    for fix in fixes:
        subprocess.run(fix, shell=True, check=True)
    assert _check(hub).returncode == 0


def _running(command: str) -> bool:
    """Whether a process of this machine runs ``command`` (a part of its NUL-separated command line)."""
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if command in path.read_text(errors="replace"):
                return True
        except OSError:  # it ended while we looked
            continue
    return False


def _oom_kills(folders: dict) -> int:
    """How many processes the kernel's OOM killer has stopped in a cgroup (v1's count, or v2's)."""
    for file in (folders["memory"] / "memory.oom_control", folders["memory"] / "memory.events"):
        if file.exists():
            return int(re.search(r"^oom_kill (\d+)$", file.read_text(), re.M)[1])
    raise AssertionError(f"no OOM count in {folders['memory']}")


def _limits_of(folders: dict) -> tuple[int, int]:
    """A cgroup's memory limit in bytes and its CPU quota in microseconds per 100 ms."""
    memory = folders["memory"]
    if (memory / "memory.limit_in_bytes").exists():
        return (int((memory / "memory.limit_in_bytes").read_text()),
                int((folders["cpu"] / "cpu.cfs_quota_us").read_text()))
    return int((memory / "memory.max").read_text()), int((folders["cpu"] / "cpu.max").read_text().split()[0])


# A kernel of Ben's that takes more memory than his server may have.
HOG = {"display_name": "hog", "language": "python",
       "argv": ["python", "-c", f"import time; held = b'x' * {MEMORY + 2**30}; time.sleep(600)",
                "{connection_file}"]}


@pytest.mark.hub
@pytest.mark.browser
def test_a_server_over_its_memory_limit_is_stopped_without_touching_anyone_elses(hub):
    """Past its user's limit, the OOM killer stops the largest process in that user's cgroup (the
    kernel that allocated); that user's JupyterLab, and everyone else's, go on."""
    found = cgroups.detect(group=limits.USERS_GROUP)
    assert found.version, found.reason
    servers = {user: _start_server(hub, user) for user in (ANA, BEN)}
    folders = {user: cgroups.folders_of(found, user) for user in servers}
    for user, pid in servers.items():  # each server, in its user's cgroup, with the hub's limits
        assert str(pid) in (folders[user]["memory"] / "cgroup.procs").read_text().split()
        assert _limits_of(folders[user]) == (MEMORY, int(hub.settings.cpus * cgroups.PERIOD_US))
    assert _running("jupyterhub_idle_culler\0--timeout=3600"), "the idle culler is not running"
    before = {user: _oom_kills(folders[user]) for user in servers}
    kernels = Path(roster.home(BEN)) / ".local" / "share" / "jupyter" / "kernels" / "hog"
    spec = {**HOG, "argv": [f"{hub.settings.bin_dir}/python", *HOG["argv"][1:]]}
    as_user(hub, BEN, "python", "-c", f"import json, pathlib; p = pathlib.Path({str(kernels)!r}); "
            f"p.mkdir(parents=True); (p / 'kernel.json').write_text(json.dumps({spec!r}))")
    kernel = server_api(hub, BEN, "POST", "kernels", {"name": "hog"}, expected=(201,))
    try:
        deadline = time.monotonic() + 120
        while _oom_kills(folders[BEN]) == before[BEN] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _oom_kills(folders[BEN]) > before[BEN], "Ben's kernel outgrew his server's memory unstopped"
    finally:
        server_api(hub, BEN, "DELETE", f"kernels/{kernel['id']}", expected=(204, 404))
    assert _oom_kills(folders[ANA]) == before[ANA]
    for user, pid in servers.items():  # what was stopped is the kernel that took too much, alone
        assert Path(f"/proc/{pid}").exists(), f"{user}'s server was stopped"
        server_api(hub, user, "GET", "status")  # and it answers


@pytest.mark.hub
@pytest.mark.browser
def test_check_names_each_way_into_what_is_not_a_users_with_the_command_that_closes_it(hub):
    home, mode = roster.home(ANA), stat.S_IMODE(ROOT.stat().st_mode)
    home.chmod(0o755)
    ROOT.chmod(mode | 0o005)
    SLOTS_FOLDER.chmod(0o1777)
    try:
        checked = _check(hub)
        fixes = re.findall(r"Fix it \(as root\): (.+)", checked.stderr)
        assert fixes == [f"chmod 700 {home}", f"chgrp {STAFF} {ROOT} && chmod g=rx,o= {ROOT}",
                         f"chown root:{STAFF} {SLOTS_FOLDER} && chmod 2770 {SLOTS_FOLDER}"], checked.stderr
        for fix in fixes:
            subprocess.run(fix, shell=True, check=True)
        assert _check(hub).returncode == 0
    finally:
        home.chmod(0o700)
        ROOT.chmod(mode)
        SLOTS_FOLDER.chmod(lockdown.SLOTS_MODE)
