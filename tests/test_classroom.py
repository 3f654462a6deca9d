"""The class grader, proven with real submissions: hostile ones, a killed run, serial vs parallel."""

import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import zipfile
from html import escape
from pathlib import Path

import nbformat
import pytest
from hostile import (
    CASES,
    FULL,
    HTML_NAME,
    IDENTITY_CASES,
    LESSON,
    QUESTIONS,
    QUOTED_MARKERS,
    QUOTED_NOTE,
    TO_UNIT_FLOAT,
    solved,
    write_class,
)
from lesson_files import replace_cell, write

from graders.grade.classroom import FEEDBACK_MISSING, Classroom, Options, grade_class
from graders.grade.results import CSV_DRAW, CSV_LEADS, identity_notes
from graders.lesson_checks.questions import draw
from graders.lessons import ROOT, solution_path
from graders.nbgrader_adapter import grade_id as grade_id_of
from graders.nbgrader_adapter import submission_path
from graders.notebook_grading.redacted_feedback import hidden_lines

# The class grader runs its own parallel workers, which mostly wait on their kernels: `make test`
# runs these tests beside the others, the ones sharing `hostile_class` on one worker (graded once).
pytestmark = [pytest.mark.kernel, pytest.mark.classroom]
MARKER = f"pwned-{os.getpid()}"
QUOTER = "quotes nbgrader's marker lines"


def _listener():
    """A TCP server on loopback that counts the connections it receives."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    seen, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                seen.append(server.accept()[0])
            except (TimeoutError, OSError):
                continue

    threading.Thread(target=accept, daemon=True).start()
    return server, seen, stop


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    out = root / "out"
    server, seen, stop = _listener()
    targets = [str(out / "nbgrader" / "gradebook.db"), str(root / MARKER), str(ROOT / MARKER)]
    private = [f"/tmp/{MARKER}"]
    context = {"port": server.getsockname()[1], "targets": targets, "private": private, "paths": [
        "../../solutions/01_tensors.ipynb", str(ROOT / "solutions" / "01_tensors.ipynb"),
        str(out / "nbgrader" / "gradebook.db"), str(root / "submissions" / "correct.ipynb"),
        "/etc/shadow"]}
    cases = write_class(root / "submissions", context)
    # Short, since two cases loop until it; the lesson's slowest cell takes 0.8 s on an idle 2-core
    # machine (2026-12-05), 20 s leaves room for a busy one.
    options = Options(LESSON, root / "submissions", out, workers=2, cell_timeout=20,
                      notebook_timeout=300, progress=False)
    rows, csv_path = grade_class(options)
    stop.set()
    server.close()
    yield {"rows": {r.student: r for r in rows}, "csv": csv_path, "cases": cases, "out": out,
           "seen": seen, "targets": [*targets[1:], *private]}
    for target in [*targets[1:], *private]:
        if os.path.exists(target):
            os.remove(target)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_submission_gets_the_score_and_reason_it_deserves(hostile_class, case):
    row = hostile_class["rows"][case.name]
    assert row.status == case.status, row.reason
    assert case.reason in row.reason
    assert {name: pair[1] for name, pair in row.cells.items()} == FULL  # max points never change
    for grade_id, score in case.cells.items():
        assert row.cells[grade_id][0] == score, f"{grade_id}: {row.cells[grade_id]}"
    assert row.total == case.expected_total(), row.cells


def test_the_sandbox_let_nothing_out(hostile_class):
    assert hostile_class["seen"] == [], "a kernel reached the network"
    for target in hostile_class["targets"]:
        assert not os.path.exists(target), f"a kernel wrote {target}"
    assert b"pwned" not in (hostile_class["out"] / "nbgrader" / "gradebook.db").read_bytes()


def test_grades_csv_lists_every_student(hostile_class):
    with open(hostile_class["csv"], encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["student"] for r in rows] == sorted(c.name for c in CASES)
    assert list(rows[0]) == ["student", "student_id", *FULL, "total", "max", "status", "reason", *CSV_DRAW,
                             *CSV_LEADS]
    assert {r["max"] for r in rows} == {"11"}


def test_code_that_reaches_for_the_machinery_is_a_lead_beside_its_grade(hostile_class):
    rows = hostile_class["rows"]
    for name in ("monkeypatches the checks", "every hook at once, blank", "every hook at once, answered",
                 "__eq__ always True"):
        assert rows[name].tampering, f"{name}: no lead"
    assert "a module rewritten: torch.testing.assert_close = …" in rows["monkeypatches the checks"].tampering
    assert rows["correct"].tampering == [] and rows["blank"].tampering == []


def test_feedback_exists_for_everyone_and_hides_hidden_tests(hostile_class):
    feedback = hostile_class["out"] / "feedback"
    secrets = hidden_lines(nbformat.read(solution_path(LESSON), 4), "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    assert secrets
    for row in hostile_class["rows"].values():
        html = (feedback / f"{row.student_id}.html").read_text()
        # (a student who quoted the marker sees their own quote: test_marker_text_a_student_quotes…)
        assert "BEGIN HIDDEN TESTS" not in html or row.student == QUOTER
        assert "torch.cdist(a, b)" not in html
        leaked = [line for line in secrets if line in html or escape(line) in html]
        assert not leaked, f"{row.student}: hidden test lines in the feedback: {leaked[:2]}"
    blank = (feedback / f"{hostile_class['rows']['blank'].student_id}.html").read_text()
    assert "ESCRIBE TU CÓDIGO AQUÍ" in blank  # the Spanish edition's own feedback
    notice = (feedback / f"{hostile_class['rows'][HTML_NAME].student_id}.html").read_text()
    assert escape(HTML_NAME) in notice
    assert not [page.name for page in hostile_class["out"].rglob("*.html") if HTML_NAME in page.read_text()]


def test_marker_text_a_student_quotes_costs_neither_grade_nor_feedback(hostile_class):
    """nbgrader's feedback step raised on marker text in a student's cells: the submission was
    recorded as failed with 0 points and retried on every run (issue 23)."""
    row = hostile_class["rows"][QUOTER]
    assert (row.status, row.reason, row.total) == ("graded", "", 11)
    html = (hostile_class["out"] / "feedback" / f"{row.student_id}.html").read_text()
    assert "Score: 11.0 / 11.0" in html and FEEDBACK_MISSING not in html  # nbgrader's own page
    for quote in [*"\n".join(QUOTED_MARKERS.values()).splitlines(), QUOTED_NOTE]:
        assert escape(quote, quote=False) in html  # the student's cells as they wrote them


def test_stock_nbgrader_export_reads_the_gradebook(hostile_class):
    course = hostile_class["out"] / "nbgrader"
    subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=course, check=True,
                   capture_output=True)
    with open(course / "grades.csv", encoding="utf-8") as handle:
        exported = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(handle)}
    for row in hostile_class["rows"].values():
        assert exported[row.student_id] == row.total


def _small_class(folder, names):
    folder.mkdir(parents=True)
    for name in names:
        nbformat.write(solved(), folder / f"{name}.ipynb")
    return folder


def test_parallel_grading_equals_serial(tmp_path):
    # A long name in a deep class folder: kernel sockets must not inherit the length of either.
    long_name = "María de los Ángeles Fernández-Villaverde y Rodríguez de la Concepción"
    submissions = _small_class(tmp_path / "in", ["Ana", "Bea", long_name])
    nbformat.write(next(c for c in CASES if c.name == "os._exit").make({}), submissions / "Bea.ipynb")
    deep = tmp_path / ("a-class-folder-with-a-long-name-" * 3)
    serial, _ = grade_class(Options(LESSON, submissions, deep / "serial", workers=1, progress=False))
    parallel, _ = grade_class(Options(LESSON, submissions, deep / "parallel", workers=2,
                                      progress=False))
    assert [r.status for r in serial] == ["graded", "partial", "graded"], [r.reason for r in serial]
    assert [(r.student, r.cells, r.status) for r in serial] == \
        [(r.student, r.cells, r.status) for r in parallel]


def test_a_killed_run_resumes_with_what_is_missing(tmp_path):
    names = ["Ana", "José Núñez", "Zoë"]
    zip_path = tmp_path / "export.zip"
    folder = _small_class(tmp_path / "in", names)
    with zipfile.ZipFile(zip_path, "w") as archive:  # as a platform exports: a folder per student
        for name in names:
            archive.write(folder / f"{name}.ipynb", f"{name}_1234_assignsubmission_file_/{LESSON}.ipynb")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "graders.cli", "grade", str(zip_path), "--lesson", LESSON,
               "--workers", "1", "--out-dir", str(out)]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    for line in first.stdout:
        if line.startswith("[1/3]"):
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.wait()
    second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    progress = [line for line in second.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 2 and progress[0].startswith("[2/3]"), second.stdout
    assert not list(Path(tempfile.gettempdir()).glob(f"course-grader-{first.pid}-*")), "not swept"
    with open(out / "grades.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["student"] for r in rows) == sorted(names)
    assert {r["total"] for r in rows} == {"11"}

    changed = nbformat.read(folder / "Zoë.ipynb", 4)
    changed.cells[-1].source += "\n"
    nbformat.write(changed, folder / "Zoë.ipynb")
    with zipfile.ZipFile(zip_path, "w") as archive:
        for name in names:
            archive.write(folder / f"{name}.ipynb", f"{name}_1234_assignsubmission_file_/{LESSON}.ipynb")
    third = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    progress = [line for line in third.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 1 and "Zoë" in progress[0], third.stdout


def test_without_root_a_user_namespace_still_isolates(tmp_path, monkeypatch):
    """The mode used where switching users is impossible, forced here."""
    monkeypatch.setattr("graders.grade.classroom.detect_mode", lambda: "userns")
    submissions = tmp_path / "in"
    submissions.mkdir()
    written = [str(ROOT / f"{MARKER}-userns"), f"/tmp/{MARKER}-userns"]
    context = {"port": 9, "targets": [], "private": written,
               "paths": [str(ROOT / "solutions" / "01_tensors.ipynb")]}
    nbformat.write(next(c for c in CASES if c.name.startswith("reads")).make(context),
                   submissions / "snoop.ipynb")
    rows, _ = grade_class(Options(LESSON, submissions, tmp_path / "out", workers=1, progress=False))
    assert rows[0].total == 11 and rows[0].status == "graded", rows[0].reason
    assert not any(os.path.exists(path) for path in written)


HOGS = {
    "processes": ("import subprocess\nheld = []\ntry:\n    for _ in range(2000):\n"
                  "        held.append(subprocess.Popen(['sleep', '120']))\nexcept OSError:\n    pass\n"),
    "threads": ("import threading\nheld = []\ntry:\n    for _ in range(5000):\n"
                "        held.append(threading.Thread(target=time.sleep, args=(120,), daemon=True))\n"
                "        held[-1].start()\nexcept RuntimeError:\n    pass\n"),
}


def test_a_submission_that_exhausts_processes_or_threads_costs_its_neighbours_nothing(tmp_path):
    """Each hog holds every process (or thread) its user may have while an honest submission is
    graded beside it; the honest ones get full marks, first time."""
    submissions = _small_class(tmp_path / "in", ["Ana", "Cy", "Eve"])
    for name, hog in (("Bea hogs processes", HOGS["processes"]), ("Dan hogs threads", HOGS["threads"])):
        code = f"import time\n{hog}time.sleep(25)\n{TO_UNIT_FLOAT}"
        nbformat.write(replace_cell(solved(), "to_unit_float", code), submissions / f"{name}.ipynb")
    rows, _ = grade_class(Options(LESSON, submissions, tmp_path / "out", workers=2, cell_timeout=90,
                                  progress=False))
    by_name = {row.student: row for row in rows}
    for name in ("Ana", "Cy", "Eve"):
        assert (by_name[name].status, by_name[name].total) == ("graded", 11), by_name[name].reason
    for name in ("Bea hogs processes", "Dan hogs threads"):
        assert by_name[name].status in ("graded", "partial"), by_name[name].reason


def test_a_grader_fault_is_logged_in_full_named_in_one_line_and_graded_next_run(tmp_path):
    """The template gradebook every job copies is broken after preparation: a fault of the grader."""
    submissions = _small_class(tmp_path / "in", ["Ana"])
    options = Options(LESSON, submissions, tmp_path / "out", workers=1, progress=False)
    room = Classroom(options)
    found = room.prepare()
    room.template_db.write_bytes(b"not a database")
    room.grade(room.to_grade(found), len(found))
    (row,) = room.rows(found)
    assert row.status == "failed"
    assert row.reason.startswith("grader error: nbgrader autograde failed for ") and "\n" not in row.reason
    assert "not a database" in row.reason and "Please see the" not in row.reason
    log = (options.out_dir / "logs" / f"{row.student_id}.log").read_text()
    assert "Traceback (most recent call last)" in log and "nbgrader's log:" in log
    rows, csv_path = grade_class(options)
    assert (rows[0].status, rows[0].total) == ("graded", 11)
    assert csv_path.read_text().count("grader error") == 0


def test_a_copied_notebook_is_graded_on_its_submitters_questions_and_named(hostile_class):
    """ben handed in ana's notebook: he is graded on his own questions, and named; ana keeps full
    marks; cruz's STUDENT_ID names no one in the class: graded on it, and listed."""
    rows = hostile_class["rows"]
    assert rows["ana"].draw == {"identity": "ana", "status": "own", "named": "",
                                "questions": draw(QUESTIONS, "ana")}
    assert rows["ben"].draw["status"] == "another_student" and rows["ben"].draw["named"] == "ana"
    assert rows["cruz"].draw["status"] == "unknown" and rows["cruz"].draw["named"] == "Cruzz"
    table = {r["student"]: r for r in csv.DictReader(open(hostile_class["csv"], encoding="utf-8"))}
    assert table["ben"]["questions_status"] == "another_student"
    assert table["ben"]["questions"] == " ".join(draw(QUESTIONS, "ben"))
    notes = identity_notes(list(rows.values()))
    assert any(note.startswith("ben: answered another student's questions (ana's)") for note in notes)
    assert any(note.startswith("cruz: its STUDENT_ID names no one in the class") for note in notes)
    assert rows["dan"].draw == {"identity": "dan", "status": "another_student", "named": "ana",
                                "questions": draw(QUESTIONS, "dan")}
    assert len(notes) == 3, notes


def test_no_classmate_reaches_a_kernel_and_no_printed_draw_is_recorded(hostile_class):
    """dan told his kernel he was ana and printed what it knew of the class: nothing."""
    course = hostile_class["out"] / "nbgrader"
    dan = hostile_class["rows"]["dan"].student_id
    autograded = nbformat.read(submission_path(course, "autograded", dan, LESSON), 4)
    printed = "".join(output.get("text", "") for cell in autograded.cells
                      for output in cell.get("outputs", []))
    assert "roster: None" in printed
    concept = next(cell for cell in autograded.cells if grade_id_of(cell) == "test_concept_check")
    assert "Graded by the course's judge" in concept.outputs[0]["text"]


def test_stock_nbgrader_gives_the_copier_the_same_scores(hostile_class, course_dir, tmp_path):
    """The same three notebooks, autograded by stock nbgrader in a course directory."""
    from graders.notebook_grading.autograde import autograde, submit

    for case in IDENTITY_CASES:
        submit(course_dir, LESSON, case.name, write(case.make({}), tmp_path / f"{case.name}.ipynb"))
    for case in IDENTITY_CASES:
        ours = hostile_class["rows"][case.name].cells
        assert autograde(course_dir, LESSON, case.name).cells == {cell: tuple(p) for cell, p in ours.items()}
