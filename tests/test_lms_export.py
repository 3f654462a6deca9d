"""Grades as Moodle and Canvas import them, and the platform's identifier recovered from its export."""

import csv
import zipfile
from datetime import datetime

import pytest

from graders.grade.lms_export import export
from graders.grade.results import Row
from graders.grade.submissions import find_submissions, platform_identity

LESSON = "01_tensors"
CELLS = {"test_a": 2.0, "test_b": 1.0}


@pytest.mark.parametrize("name, expected", [
    ("José Núñez_123456_assignsubmission_file_", ("José Núñez", "123456", "moodle")),
    ("Ana_María_77_assignsubmission_onlinetext_", ("Ana_María", "77", "moodle")),
    ("Ana_1234_assignsubmission_file_01_tensors", ("Ana", "1234", "moodle")),  # flat Moodle export
    ("Ana_assignsubmission_file_", ("Ana", "", "")),  # an old Moodle export without participant ids
    ("nunezjose_4321_998877_01_tensors", ("nunezjose", "4321", "canvas")),
    ("nunezjose_LATE_4321_998877_01_tensors-1", ("nunezjose", "4321", "canvas")),
    ("student 07", ("student 07", "", "")),
    ("a_b_c", ("a_b_c", "", "")),
])
def test_the_identifier_is_read_from_the_platforms_names(name, expected):
    who = platform_identity(name)
    assert (who.name, who.platform_id, who.platform) == expected


def _notebook(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')


def test_a_moodle_zip_keeps_participant_ids_and_a_loose_file_has_none(tmp_path):
    archive = tmp_path / "moodle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for folder in ("María García_101_assignsubmission_file_", "María García_102_assignsubmission_file_",
                       "Li Wei_103_assignsubmission_file_"):
            zf.writestr(f"{folder}/{LESSON}.ipynb", "{}")
        zf.writestr("Lost Student.ipynb", "{}")
    found = {s.student: (s.platform_id, s.platform) for s in find_submissions(archive, LESSON, tmp_path)}
    # two students of one name stay two, told apart by the platform's id
    assert found == {"María García (101)": ("101", "moodle"), "María García (102)": ("102", "moodle"),
                     "Li Wei": ("103", "moodle"), "Lost Student": ("", "")}


def test_a_canvas_download_is_one_flat_folder_of_named_files(tmp_path):
    for name in ("garciamaria_5501_90001_01_tensors.ipynb", "weili_LATE_5502_90002_01_tensors.ipynb"):
        _notebook(tmp_path / "canvas" / name)
    _notebook(tmp_path / "canvas" / "nbgrader" / "Zoe" / LESSON / f"{LESSON}.ipynb")
    found = {s.student: (s.platform_id, s.platform) for s in find_submissions(tmp_path / "canvas", LESSON,
                                                                            tmp_path)}
    assert found == {"garciamaria": ("5501", "canvas"), "weili": ("5502", "canvas"), "Zoe": ("", "")}


def _rows() -> list[Row]:
    def row(name, platform_id, platform, scores, status="graded"):
        return Row(name, name.lower().replace(" ", "-"), "d", status, "", {k: [v, CELLS[k]] for k, v in
                                                                        zip(CELLS, scores, strict=True)},
                   platform_id, platform)
    return [row("Ana García", "101", "moodle", [2, 0.5]), row("Ben, Jr.", "102", "moodle", [0, 0]),
            row("No Id", "", "", [2, 1]), row("Canvas Kid", "5501", "canvas", [2, 1]),
            row("Broke", "104", "moodle", [0, 0], status="failed")]


def _read(path):
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return list(csv.reader(handle))


def test_moodle_gets_its_grading_worksheet(tmp_path):
    done = export(_rows(), CELLS, LESSON, "moodle", tmp_path, now=datetime(2026, 3, 1, 9, 30))
    table = _read(done.path)
    assert table == [["Identifier", "Full name", "Grade", "Maximum grade", "Last modified (grade)"],
                     ["Participant 101", "Ana García", "2.5", "3", "2026-03-01 09:30:00"],
                     ["Participant 102", "Ben, Jr.", "0", "3", "2026-03-01 09:30:00"]]
    unmatched = {line[0]: line[-1] for line in _read(done.unmatched_path)[1:]}
    assert list(unmatched) == ["No Id", "Canvas Kid", "Broke"]  # listed, not dropped
    assert "no Moodle identifier" in unmatched["No Id"]
    assert "Canvas export" in unmatched["Canvas Kid"]
    assert "not graded" in unmatched["Broke"]


def test_a_spanish_moodle_reads_its_own_column_names_and_decimal_comma(tmp_path):
    table = _read(export(_rows(), CELLS, LESSON, "moodle", tmp_path, language="es").path)
    assert table[0][:3] == ["Identificador", "Nombre completo", "Calificación"]
    assert table[1][:3] == ["Participante101", "Ana García", "2,5"]


def test_canvas_gets_a_gradebook_import(tmp_path):
    done = export(_rows(), CELLS, LESSON, "canvas", tmp_path, assignment="Tensors (4242)")
    assert _read(done.path) == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Tensors (4242)"],
                                ["Canvas Kid", "5501", "", "", "", "3"]]
    assert done.exported == 1 and len(done.unmatched) == 4


def test_plain_csv_keeps_everyone_it_can(tmp_path):
    table = _read(export(_rows(), CELLS, LESSON, "csv", tmp_path).path)
    assert [line[:3] for line in table] == [["student", "identifier", "points"], ["Ana García", "101", "2.5"],
                                            ["Ben, Jr.", "102", "0"], ["No Id", "", "3"],
                                            ["Canvas Kid", "5501", "3"]]


def test_an_unknown_platform_or_language_is_refused(tmp_path):
    with pytest.raises(ValueError, match="moodle, canvas, csv"):
        export(_rows(), CELLS, LESSON, "blackboard", tmp_path)
    with pytest.raises(ValueError, match="interface"):
        export(_rows(), CELLS, LESSON, "moodle", tmp_path, language="fr")
