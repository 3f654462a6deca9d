"""After `course grade`: item analysis, similarity and the Moodle export, on a class graded for real.

The class, exported from Moodle as a zip, each notebook handed in without the lesson's
demonstrations (what these tests read lies in the answers and grade cells): two honest students, two
who copied the first (one renaming everything) and fitted an answer to the inputs the visible check
draws (it fails with a single point), a third who fitted it too, a blank Spanish edition, and a loose
file without Moodle's id whose one answer kills the kernel.
"""

import csv
import statistics
import subprocess
import sys
import zipfile

import nbformat
import pytest
from lesson_files import without_demonstrations
from solution_styles import HARD_CODED, LESSON, STYLES, WRONG_DTYPE, notebook, renamed

from graders.lessons import ROOT

pytestmark = [pytest.mark.kernel, pytest.mark.subprocess, pytest.mark.classroom]

ANA = STYLES["step_by_step"]
CLASS = {  # Moodle participant id ("" for a file outside Moodle's folders), notebook, total
    "Ana García": ("101", lambda: notebook(ANA), 11),
    "Ben Okafor": ("102", lambda: notebook(STYLES["library_calls"], "es"), 11),
    "Chen Li": ("103", lambda: notebook({**ANA, "pairwise_distances": HARD_CODED[0]}), 9),
    "Dana Roth": ("104", lambda: notebook({**renamed(ANA), "pairwise_distances": HARD_CODED[1]}, "es"), 9),
    "Eve Adams": ("105", lambda: notebook({**STYLES["terse"], "pairwise_distances": HARD_CODED[0],
                                           "to_unit_float": WRONG_DTYPE}), 8),
    "Femi Bello": ("106", lambda: notebook({}, "es"), 0),
    "Lost Student": ("", lambda: notebook({"flatten_per_image": "import os\nos._exit(1)"}, "es"), 0),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("after-grading")
    archive = root / "moodle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, (moodle_id, make, _) in CLASS.items():
            member = (f"{name}_{moodle_id}_assignsubmission_file_/{LESSON}.ipynb" if moodle_id
                      else f"{name}.ipynb")
            zf.writestr(member, nbformat.writes(without_demonstrations(make())))
    out = root / "out"
    run = subprocess.run([sys.executable, "-m", "graders.cli", "grade", str(archive), "--lesson", LESSON,
                          "--workers", "2", "--cell-timeout", "60", "--out-dir", str(out),
                          "--export", "moodle", "--export", "csv"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return {"out": out, "stdout": run.stdout, "grades": _read(out / "grades.csv"),
            "items": {r["exercise"]: r for r in _read(out / "item_analysis.csv")}}


def _read(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_class_earned_what_it_was_built_to_earn(graded):
    assert {r["student"]: float(r["total"]) for r in graded["grades"]} == \
        {name: total for name, (_, _, total) in CLASS.items()}


def test_the_exercise_whose_visible_check_is_beaten_is_flagged(graded):
    items = graded["items"]
    pairwise = items["test_pairwise_distances"]
    assert (pairwise["failed_hidden_only"], pairwise["flagged"]) == ("3", "1")
    assert (pairwise["kind_1"], pairwise["count_1"]) == ("hidden", "3")  # the three fitted answers
    assert "the shape is not the expected one" in pairwise["message_1"]
    assert [name for name, item in items.items() if item["flagged"] == "1"] == ["test_pairwise_distances"]
    flagged = [line for line in graded["stdout"].splitlines() if line.startswith("flagged:")]
    assert flagged == ["flagged: test_pairwise_distances: 3 of 7 students passed its visible checks and "
                       "failed its hidden tests; the visible checks do not describe the task"]


def test_failures_are_told_apart_and_the_same_error_counts_once(graded):
    items = graded["items"]
    unit = items["test_to_unit_float"]
    # Femi and Lost left the stub (in Spanish), Eve returned the wrong dtype
    assert (unit["failed_visible"], unit["kind_1"], unit["count_1"]) == ("3", "visible", "2")
    # the stub's exception comes through the check, which names the call and gives the hint
    assert unit["message_1"].startswith("CheckFailed: to_unit_float(images uint8")
    assert "got: NotImplementedError" in unit["message_1"] and "dtype" in unit["message_2"]
    flatten = items["test_flatten_per_image"]
    # Lost's kernel died in that answer: an incident, not a misunderstanding
    assert (flatten["incidents"], flatten["failed_visible"]) == ("1", "1")
    assert any(flatten[f"kind_{k}"] == "incident" and "killed the kernel" in flatten[f"message_{k}"]
               for k in (1, 2))
    # after that rerun, Lost's missing ANSWERS is still Lost's own: another exercise's answer
    concept = items["test_concept_check"]
    assert (concept["failed_visible"], concept["incidents"], concept["count_1"]) == ("2", "0", "2")


def test_the_statistics_are_those_of_the_grades_csv(graded):
    grades = graded["grades"]
    totals = [float(r["total"]) for r in grades]
    for name, item in graded["items"].items():
        points = float(item["points"])
        scores = [float(r[name]) for r in grades]
        rest = [t - s for s, t in zip(scores, totals, strict=True)]
        assert float(item["mean"]) == pytest.approx(statistics.mean(scores), abs=1e-3)
        assert float(item["full_marks_share"]) == pytest.approx(scores.count(points) / 7, abs=1e-3)
        assert float(item["zero_share"]) == pytest.approx(scores.count(0.0) / 7, abs=1e-3)
        expected = statistics.correlation(scores, rest) if len(set(scores)) > 1 else None
        assert (item["discrimination"] or None) == (None if expected is None else f"{expected:.3f}")


def test_the_item_pages_are_written(graded):
    out = graded["out"]
    page = (out / "item_analysis.html").read_text()
    assert "⚑ test_pairwise_distances" in page and "item_analysis.png" in page
    assert (out / "item_analysis.png").read_bytes()[:4] == b"\x89PNG"
    assert "item_analysis.html" in graded["stdout"]


def test_similarity_lists_the_copies_and_no_honest_pair(graded):
    page = (graded["out"] / "similarity.html").read_text()
    headings = page.split("<h3 id='pair-")[1:]
    pairs = {frozenset(name for name in CLASS if name in heading.split("</h3>")[0]) for heading in headings}
    assert pairs == {frozenset(("Ana García", "Chen Li")), frozenset(("Ana García", "Dana Roth")),
                     frozenset(("Chen Li", "Dana Roth"))}
    assert "A lead for a human, not a verdict" in page
    assert "6 submissions with code of their own" in page  # Femi's blank template is not compared
    assert "Copies of the reference solution" in page and "0 submission(s) like the reference" in page


def test_the_moodle_worksheet_has_every_identified_student_and_lists_the_other(graded):
    out, totals = graded["out"], {r["student"]: r["total"] for r in graded["grades"]}
    with open(out / "export-moodle.csv", encoding="utf-8-sig", newline="") as handle:
        worksheet = list(csv.reader(handle))
    assert worksheet[0][:3] == ["Identifier", "Full name", "Grade"]
    assert {line[0]: (line[1], line[2]) for line in worksheet[1:]} == {
        f"Participant {moodle_id}": (name, totals[name]) for name, (moodle_id, _, _) in CLASS.items()
        if moodle_id}
    unmatched = _read(out / "export-moodle-unmatched.csv")
    assert [(r["student"], r["points"]) for r in unmatched] == [("Lost Student", "0")]
    assert any("NOT in it, 1: Lost Student" in line for line in graded["stdout"].splitlines())
    plain = _read(out / "export-csv.csv")
    assert len(plain) == 7 and {r["identifier"] for r in plain if r["student"] == "Lost Student"} == {""}
