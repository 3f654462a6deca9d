"""The student editions are generated, current, clean, and say the same thing in both languages."""

import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from lesson_files import LESSONS, read_edition, solved_edition, without_demonstrations

from course.settings import LANGUAGES
from graders.lessons import edition_path, solution_path
from graders.nbgrader_adapter import is_grade_cell, is_solution_cell
from graders.notebook_grading.redacted_feedback import hidden_lines
from graders.release.editions import EditionError, cell_language, filter_language, release

EDITION_CASES = [(lesson, lang) for lesson in LESSONS for lang in LANGUAGES]


def _canonical(path) -> str:
    return json.dumps(json.loads(path.read_text()), sort_keys=True, indent=1)


def test_every_lesson_has_both_editions():
    assert LESSONS, "no lesson in solutions/"
    for lesson, lang in EDITION_CASES:
        assert edition_path(lesson, lang).exists(), f"missing {edition_path(lesson, lang)}: run make release"


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """``make release`` once, into a temporary folder: the course directory of each language
    (``build/<language>``) and the editions (``editions/<language>``)."""
    root = tmp_path_factory.mktemp("release")
    release(root / "build", editions_dir=root / "editions", lessons=LESSONS)
    return root


def test_committed_editions_equal_what_release_generates(released):
    stale = [f"notebooks/{lang}/{lesson}.ipynb" for lesson, lang in EDITION_CASES
             if _canonical(released / "editions" / lang / f"{lesson}.ipynb")
             != _canonical(edition_path(lesson, lang))]
    assert not stale, f"stale student editions {stale}: run `make release` and commit them"


@pytest.mark.parametrize(("lesson", "lang"), EDITION_CASES)
def test_editions_hold_no_solution_and_no_hidden_test(lesson, lang):
    text = edition_path(lesson, lang).read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in text
    source = nbformat.read(solution_path(lesson), 4)
    edition_lines = {line.strip() for c in read_edition(lesson, lang).cells for line in c.source.splitlines()}
    leaked = hidden_lines(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS") & edition_lines
    assert not leaked, f"hidden test lines in the edition: {sorted(leaked)[:3]}"


@pytest.mark.parametrize(("lesson", "lang"), EDITION_CASES)
def test_edition_is_in_its_language_only(lesson, lang):
    edition = read_edition(lesson, lang)
    assert edition.metadata["course"]["language"] == lang
    assert {cell_language(c) for c in edition.cells} <= {None, lang}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_prose_cell_has_its_counterpart(lesson):
    """Same cells in the same order: each language's cells sit at the same places."""
    source = nbformat.read(solution_path(lesson), 4)
    shapes = {}
    for lang in LANGUAGES:
        cells = filter_language(source, lang).cells
        shapes[lang] = [(c.cell_type, c.source if cell_language(c) is None else "<prose>")
                        for c in cells]
    es, en = (shapes[lang] for lang in LANGUAGES)
    assert len(es) == len(en), f"{lesson}: {len(es)} cells in es, {len(en)} in en"
    for index, (a, b) in enumerate(zip(es, en, strict=True)):
        assert a == b, f"{lesson}: cell {index} differs between editions: {a[0]} vs {b[0]}"
    tagged = [c for c in source.cells if c.cell_type == "markdown"]
    assert all(cell_language(c) for c in tagged), f"{lesson}: a markdown cell has no lang: tag"


def test_a_wrong_language_tag_is_refused():
    cell = nbformat.v4.new_markdown_cell("hola", metadata={"tags": ["lang:fr"]})
    with pytest.raises(EditionError, match="use exactly one of lang:es, lang:en"):
        cell_language(cell)


@pytest.mark.subprocess
def test_stock_nbgrader_cli_works_in_a_released_course_directory(released, tmp_path):
    """An instructor's `nbgrader` commands, run as they would run them, in the course directory,
    pick up the course's settings (here: the Spanish edition's answer stub)."""
    course_dir = shutil.copytree(released / "build" / "es", tmp_path / "course")
    listed = subprocess.run([sys.executable, "-m", "nbgrader", "db", "assignment", "list"],
                            cwd=course_dir, capture_output=True, text=True, check=True)
    assert LESSONS[0] in listed.stdout + listed.stderr
    released = course_dir / "release" / LESSONS[0] / f"{LESSONS[0]}.ipynb"
    released.unlink()
    again = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", LESSONS[0],
                            "--force"], cwd=course_dir, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert "# ESCRIBE TU CÓDIGO AQUÍ" in released.read_text()


def test_a_lesson_without_its_demonstrations_keeps_its_set_up_answers_grade_cells_and_prose():
    whole = solved_edition(LESSONS[0], "en")
    lean = without_demonstrations(whole)
    graded = [c.source for c in whole.cells if is_grade_cell(c) or is_solution_cell(c)]
    first = next(i for i, c in enumerate(whole.cells) if is_grade_cell(c) or is_solution_cell(c))
    set_up = [c.source for c in whole.cells[:first] if c.cell_type == "code"]
    assert [c.source for c in lean.cells if c.cell_type == "code"] == set_up + graded
    assert [c.source for c in lean.cells if c.cell_type != "code"] == \
        [c.source for c in whole.cells if c.cell_type != "code"]
    assert len(lean.cells) < len(whole.cells) == len(solved_edition(LESSONS[0], "en").cells)
