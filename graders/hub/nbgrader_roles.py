"""What nbgrader runs with on the hub, per role: one course id, the exchange, enrolment from the
roster, each lesson as two assignments, one per edition, and a collect that takes only what each
student submitted.

Each role's configuration is a folder that the hub puts on its users' ``JUPYTER_CONFIG_PATH``
(nothing is written to the machine's or the environment's own Jupyter configuration, which other
uses of this environment read): ``nbgrader_config.py``, the server extensions it enables, and the
JupyterLab plugins it disables. Students get the assignment list and no formgrader, course list or
assignment creation; the instructor gets everything, with the course directory in their home.
"""

import json
import shutil
import tempfile
from pathlib import Path

from nbgrader.auth.base import BaseAuthPlugin
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.list import ExchangeList
from nbgrader.preprocessors import ClearSolutions
from nbgrader.utils import get_username
from traitlets import Unicode

from graders.hub import exchange
from graders.hub.roster import member
from graders.lessons import LANGUAGES, available_lessons, edition_of_assignment, lesson_names, solution_path
from graders.nbgrader_settings import CODE_STUBS, COURSE_ID, TEXT_STUBS, apply

# Students' nbgrader loads this module at every command: it imports neither torch (the course's
# helpers) nor the release's modules, which the instructor's side imports where it uses them.

SETTINGS_FILE = "nbgrader_settings.json"
# What a student's JupyterLab leaves out (nbgrader's table for students, its JupyterHub page).
STUDENT_DISABLED_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
                            "@jupyter/nbgrader:create-assignment")
STUDENT_DISABLED_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader",
                                      "nbgrader.server_extensions.course_list")
ROLE_CONFIG_PY = '''\
# Written by `make hub` (graders/hub/nbgrader_roles.py); edit that file, not this one.
from graders.hub.nbgrader_roles import configure_{role}

configure_{role}(get_config(), {settings!r})
'''


# ------------------------------------------------------------------------- nbgrader plugins
class RosterAuthPlugin(BaseAuthPlugin):
    """Enrolment from the hub's roster: a user on it has the course, anyone else has none, and is
    told so in nbgrader's log (what the assignment list and the command line show)."""

    roster = Unicode("", help="the hub's roster file (user,role,language)").tag(config=True)

    def get_student_courses(self, student_id: str) -> list:
        user = get_username() if student_id in ("", "*") else student_id
        if member(Path(self.roster), user) is not None:
            return [COURSE_ID]
        self.log.error("%s is not enrolled in the course %s: ask its instructor to add %s to the "
                       "roster (%s) and run `make hub` again. Nothing of yours was changed.",
                       user, COURSE_ID, user, self.roster)
        return []

    def add_student_to_course(self, student_id: str, course_id: str) -> None:
        """The roster, not the gradebook, says who is enrolled."""

    def remove_student_from_course(self, student_id: str, course_id: str) -> None:
        """The roster, not the gradebook, says who is enrolled."""


class EditionList(ExchangeList):
    """nbgrader's listing, with released lessons shown in the student's edition only (what they
    have fetched or submitted is always shown)."""

    roster = Unicode("", help="the hub's roster file (user,role,language)").tag(config=True)

    def init_dest(self):
        super().init_dest()
        if self.inbound or self.cached:
            return
        person = member(Path(self.roster), get_username())
        if person is None or person.role != "student":
            return
        self.assignments = [path for path in self.assignments
                            if self._language(path) in (None, person.language)]

    def _language(self, path) -> str | None:
        """The edition's language of a released assignment, ``None`` for one of no edition."""
        return (edition_of_assignment(self.parse_assignment(path)["assignment_id"]) or (None, None))[1]


class OwnCollect(ExchangeCollect):
    """nbgrader's collect, taking a submission only when its folder, and everything in it, belongs to
    the student its name gives, and holds no link (:func:`graders.hub.exchange.take`). nbgrader takes
    the student and the time from the name and only warns about the owner: a folder named for a
    classmate, with a later time, would replace that classmate's submission, and its links would be
    followed with the instructor's rights. Each folder refused is reported (its owner, why), and a
    student's latest submission that is their own is collected."""

    def init_src(self):
        self.refusals = []
        super().init_src()
        self.src_records = [record for record in self.src_records if "refused" not in record]

    def _path_to_record(self, path):
        record = super()._path_to_record(path)
        try:
            exchange.take(Path(path))
        except exchange.Refused as refused:
            record["refused"] = refused
            self.refusals.append(refused)
        return record

    def _sort_by_timestamp(self, records):
        """The student's own submissions, latest first (nbgrader collects the first)."""
        taken = [record for record in records if "refused" not in record]
        return super()._sort_by_timestamp(taken or records)

    def copy_files(self):
        for refused in self.refusals:
            self.log.error("Not collected: %s", refused)
        super().copy_files()

    def do_copy(self, src, dest, log=None):
        """nbgrader's copy, from a private copy made without following any link (a link swapped in
        since the check is refused there)."""
        with tempfile.TemporaryDirectory(prefix="nbgrader-collect-") as private:
            try:
                exchange.take(Path(src), Path(private) / "submission")
            except exchange.Refused as refused:
                self.log.error("Not collected: %s", refused)
                return
            super().do_copy(str(Path(private) / "submission"), dest, log)


class EditionClearSolutions(ClearSolutions):
    """nbgrader's ClearSolutions with the stubs of the notebook's edition (``# ESCRIBE TU CÓDIGO
    AQUÍ`` in Spanish): one course directory releases both editions."""

    def preprocess(self, nb, resources):
        from graders.release.editions import edition_language

        language = edition_language(nb)
        self.code_stub = {**self.code_stub, "python": CODE_STUBS[language]}
        self.text_stub = TEXT_STUBS[language]
        return super().preprocess(nb, resources)


# ------------------------------------------------------------------------- configurations
def _settings(path) -> dict:
    return json.loads(Path(path).read_text())


def _common(c, settings: dict) -> None:
    c.CourseDirectory.course_id = COURSE_ID
    c.Exchange.root = settings["exchange"]
    c.Authenticator.plugin_class = RosterAuthPlugin
    c.RosterAuthPlugin.roster = settings["roster"]
    c.ExchangeFactory.list = EditionList
    c.EditionList.roster = settings["roster"]


def configure_student(c, settings_path) -> None:
    """A student's nbgrader: the course and its exchange, nothing of the instructor's."""
    _common(c, _settings(settings_path))


def configure_instructor(c, settings_path) -> None:
    """The instructor's nbgrader: the course's own settings, its directory, both editions' stubs."""
    from nbgrader.converters import GenerateAssignment

    settings = _settings(settings_path)
    apply(c, "en", root=settings["course_root"])
    _common(c, settings)
    steps = GenerateAssignment.class_traits()["preprocessors"].default()
    c.GenerateAssignment.preprocessors = [EditionClearSolutions if step is ClearSolutions else step
                                          for step in steps]
    c.ExchangeFactory.collect = OwnCollect


def write_role_configs(hub_dir: Path, settings: dict) -> dict[str, Path]:
    """``<hub_dir>/jupyter/<role>/``, one Jupyter configuration folder per role; returns them."""
    settings_path = Path(hub_dir) / SETTINGS_FILE
    settings_path.write_text(json.dumps(settings, indent=1))
    settings_path.chmod(0o644)
    folders = {}
    for role in ("student", "instructor"):
        folder = folders[role] = Path(hub_dir) / "jupyter" / role
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "labconfig").mkdir(parents=True)
        (folder / "nbgrader_config.py").write_text(
            ROLE_CONFIG_PY.format(role=role, settings=str(settings_path)))
        disabled_plugins = STUDENT_DISABLED_PLUGINS if role == "student" else ()
        disabled_extensions = STUDENT_DISABLED_SERVER_EXTENSIONS if role == "student" else ()
        (folder / "labconfig" / "page_config.json").write_text(json.dumps(
            {"disabledExtensions": {plugin: True for plugin in disabled_plugins}}, indent=1))
        (folder / "jupyter_server_config.json").write_text(json.dumps(
            {"ServerApp": {"jpserver_extensions": {name: False for name in disabled_extensions}}}, indent=1))
    for path in [Path(hub_dir) / "jupyter", *Path(hub_dir, "jupyter").rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folders


def populate_course(course_root: Path, settings_path: Path, lessons=None) -> Path:
    """The instructor's nbgrader course directory: its ``nbgrader_config.py`` and, in ``source/``,
    both editions of every lesson as assignments (``source/NN_slug_<lang>/NN_slug.ipynb``). An
    existing source is left as the instructor edited it."""
    import nbformat

    from graders.release.editions import filter_language, strip_outputs
    from graders.release.translation import translate_notebook

    course_root = Path(course_root)
    course_root.mkdir(parents=True, exist_ok=True)
    (course_root / "nbgrader_config.py").write_text(
        ROLE_CONFIG_PY.format(role="instructor", settings=str(settings_path)))
    for lesson in lessons or available_lessons():
        source = nbformat.read(solution_path(lesson), 4)
        for language in LANGUAGES:
            target = course_root / "source" / lesson_names(lesson).assignments[language] / f"{lesson}.ipynb"
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(strip_outputs(translate_notebook(filter_language(source, language), lesson,
                                                            language)), target)
    return course_root
