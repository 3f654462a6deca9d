"""graders/grade/submissions.py's check of a file before any code runs: whatever the file holds, it
gets a verdict and a reason, and no file stops the class (a fuzz of malformed notebooks)."""

import copy
import json
import random

import pytest
from lesson_files import solved_edition

from graders.grade.submissions import MAX_DEPTH, Verdict, validate_notebook
from graders.nbgrader_adapter import grade_id, is_grade_cell

LESSON = "01_tensors"


@pytest.fixture(scope="module")
def honest():
    return json.loads(json.dumps(solved_edition(LESSON, "en")))


@pytest.fixture(scope="module")
def grade_ids(honest):
    return {grade_id(cell) for cell in honest["cells"] if is_grade_cell(cell)}


def _verdict(tmp_path, content, grade_ids) -> Verdict:
    path = tmp_path / "submission.ipynb"
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return validate_notebook(path, LESSON, grade_ids)


def test_an_honest_notebook_is_ok(tmp_path, honest, grade_ids):
    assert _verdict(tmp_path, honest, grade_ids) == Verdict("ok")


def test_json_nested_far_too_deep_is_refused_not_raised(tmp_path, honest, grade_ids):
    deep = b'{"cells": [], "nbformat": 4, "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    verdict = _verdict(tmp_path, deep, grade_ids)
    assert verdict.status == "invalid" and "nests deeper" in verdict.reason
    nested = copy.deepcopy(honest)
    nested["metadata"]["x"] = json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert "nests deeper" in _verdict(tmp_path, nested, grade_ids).reason


@pytest.mark.parametrize(("value", "said"), [(["grade"], "metadata is a list"), ("x", "metadata is a str"),
                                             ({"grade": True, "grade_id": 7}, "'grade_id' is 7"),
                                             ({"grade": True, "points": "all"}, "'points' is 'all'"),
                                             ({"grade": "yes"}, "'grade' is 'yes'"),
                                             ({"grade": True, "points": True}, "'points' is True")])
def test_nbgrader_metadata_of_the_wrong_type_names_the_cell(tmp_path, honest, grade_ids, value, said):
    broken = copy.deepcopy(honest)
    number = next(n for n, cell in enumerate(broken["cells"], start=1) if is_grade_cell(cell))
    broken["cells"][number - 1]["metadata"]["nbgrader"] = value
    verdict = _verdict(tmp_path, broken, grade_ids)
    assert verdict.status == "invalid" and f"cell {number}'s nbgrader" in verdict.reason
    assert said in verdict.reason and "download the lesson again" in verdict.reason


JUNK = [None, True, 0, -1, 1e308, "", "x" * 10_000, "\ud800", [], {}, [[[]]], {"cells": None},
        {"nbgrader": None}, {"grade_id": None}, [None, 1, "a"]]


def _mutated(honest, generator: random.Random):
    """``honest`` with one value somewhere in it replaced by junk, or one key removed."""
    nb = copy.deepcopy(honest)
    parent, key = None, None
    node = nb
    for _ in range(generator.randint(1, 6)):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) \
            if isinstance(node, list) else []
        if not children:
            break
        key, child = generator.choice(children)
        parent, node = node, child
    if parent is None:
        return generator.choice(JUNK)
    if isinstance(parent, dict) and generator.random() < 0.3:
        del parent[key]
    else:
        parent[key] = copy.deepcopy(generator.choice(JUNK))
    return nb


def _mangled_bytes(honest, generator: random.Random) -> bytes:
    """The file's bytes cut short, with invalid UTF-8 or a byte-order mark, or a byte flipped."""
    data = bytearray(json.dumps(honest).encode())
    choice = generator.randrange(4)
    if choice == 0:
        return bytes(data[:generator.randrange(1, len(data))])
    if choice == 1:
        return b"\xff\xfe" + bytes(data)
    if choice == 2:
        return "\ufeff".encode() + bytes(data)
    data[generator.randrange(len(data))] = generator.randrange(256)
    return bytes(data)


def test_no_malformed_file_raises_and_each_refusal_says_why(tmp_path, honest, grade_ids):
    generator = random.Random(20261204)
    seen = set()
    for attempt in range(300):
        content = _mangled_bytes(honest, generator) if attempt % 3 == 0 else _mutated(honest, generator)
        verdict = _verdict(tmp_path, content, grade_ids)
        assert verdict.status in ("ok", "invalid", "wrong_lesson"), (attempt, verdict)
        assert verdict.status == "ok" or verdict.reason, (attempt, verdict)
        verdict.reason.encode("utf-8")  # it goes into grades.csv and the instructor's pages
        seen.add(verdict.status)
    assert seen == {"ok", "invalid"}  # the fuzz reaches both sides of the check
