"""The Spanish edition's code text: what the release translates, what it leaves alone, and that
every lesson's catalogue is complete."""

import ast

import nbformat
import pytest

from graders import nbgrader_adapter as adapter
from graders.lessons import available_lessons, edition_path
from graders.release.translation import (
    COMMON,
    TranslationError,
    catalogue_gaps,
    code_texts,
    load_catalogue,
    translatable_cells,
    translate_source,
)

CELL = '''def describe(x):
    """Say what x holds."""
    # the mean of each row
    return x.mean(dim=1)  # one value per row


history = {"loss": [1.0]}
print("loss per epoch:", history["loss"], f"{len(history)} runs")
ax.set_title("training curve", fontsize=10)
ax.plot([1, 2], label="validation" if True else "training")
plt.show()  # noqa: E501
print("operation".ljust(16), ", ".join(["a", "b"]))
ax.barh(range(2), [1, 2], tick_label=["measured twice", "once"])
'''
CATALOGUE = {
    "Say what x holds.": "Dice qué contiene x.",
    "the mean of each row": "la media de cada fila",
    "one value per row": "un valor por fila",
    "loss per epoch:": "pérdida por época:",
    "{len(history)} runs": "{len(history)} ejecuciones",
    "training curve": "curva de entrenamiento",
    "validation": "validación",
    "training": "entrenamiento",
    "loss": "pérdida",
    "operation": "operación",
    "measured twice": "medido dos veces",
    "once": "una vez",
}


def test_comments_docstrings_and_labels_are_found():
    assert [t.key for t in code_texts(CELL)] == [
        "Say what x holds.", "the mean of each row", "one value per row", "loss per epoch:",
        "{len(history)} runs", "training curve", "validation", "training", "operation",
        "measured twice", "once"]


def test_translation_replaces_prose_and_leaves_code_alone():
    translated = translate_source(CELL, CATALOGUE)
    ast.parse(translated)
    for spanish in ("Dice qué contiene x.", "# la media de cada fila", "# un valor por fila",
                    '"pérdida por época:"', 'f"{len(history)} ejecuciones"',
                    '"curva de entrenamiento"', '"validación" if True else "entrenamiento"',
                    '"operación".ljust(16)', '["medido dos veces", "una vez"]'):
        assert spanish in translated
    # "loss" is in the catalogue, but as a dict key it is code, not a label
    assert '{"loss": [1.0]}' in translated and 'history["loss"]' in translated
    assert "# noqa: E501" in translated


def test_a_translation_must_keep_the_fields_of_an_f_string():
    with pytest.raises(TranslationError, match="fields"):
        translate_source(CELL, {"{len(history)} runs": "{n} ejecuciones"})


def test_a_translation_that_breaks_the_code_is_refused():
    with pytest.raises(TranslationError, match="quotes"):
        translate_source(CELL, {"training curve": 'curva "de entrenamiento"'})


def test_solution_regions_and_non_python_cell_magics_are_not_translated():
    solution = "def f(x):\n    ### BEGIN SOLUTION\n    return x  # the answer\n    ### END SOLUTION\n"
    assert code_texts(solution) == []
    assert code_texts("%%bash\necho hello  # a shell comment\n") == []
    magic = "%%time\n# time the whole loop\n!ls data\nprint('done here')\n"
    assert [t.key for t in code_texts(magic)] == ["time the whole loop", "done here"]
    assert "# mide todo el bucle" in translate_source(magic, {"time the whole loop": "mide todo el bucle"})


def test_grade_and_language_cells_are_left_as_they_are():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1  # shared text"),
        nbformat.v4.new_code_cell("check(x)  # grade",
                                  metadata={"nbgrader": {"grade": True, "grade_id": "t"}}),
        nbformat.v4.new_code_cell('course.set_language("es")', metadata={"tags": ["lang:es"]}),
    ])
    assert [cell.source for cell in translatable_cells(nb)] == ["x = 1  # shared text"]


@pytest.mark.parametrize("lesson", [*available_lessons(), COMMON])
def test_the_spanish_catalogue_is_complete(lesson):
    missing, unused = catalogue_gaps(lesson, "es")
    assert not missing, (f"{lesson}: code text the Spanish edition would show in English: {missing}. "
                         f"Run `python -m graders.release.translation {lesson}` and fill in the entries.")
    assert not unused, f"{lesson}: catalogue entries no code cell uses (remove them): {unused}"


@pytest.mark.parametrize("lesson", available_lessons())
def test_the_spanish_edition_shows_no_english_code_text(lesson):
    """The committed edition, not only the catalogue: it was released with the translations."""
    english = {t.key for cell in translatable_cells(nbformat.read(edition_path(lesson, "en"), 4))
               for t in code_texts(cell.source)}
    spanish = nbformat.read(edition_path(lesson, "es"), 4)
    left = [t.key for cell in translatable_cells(spanish) for t in code_texts(cell.source)
            if t.key in english and not _reads_the_same(t.key, lesson)]
    assert not left, f"{lesson}: the Spanish edition still shows {left}; run `make release`"


def _reads_the_same(key: str, lesson: str) -> bool:
    """A text the catalogue maps to itself (a name, a formula) is the same in both languages."""
    return load_catalogue(lesson, "es").get(key) == key


@pytest.mark.parametrize("lesson", available_lessons())
def test_visible_grade_cells_hold_no_prose(lesson):
    """Grade cells are the same in both editions, so the words a student reads live in the checks."""
    nb = nbformat.read(edition_path(lesson, "en"), 4)
    prose = {adapter.grade_id(cell): [t.key for t in code_texts(cell.source)]
             for cell in nb.cells if cell.cell_type == "code" and adapter.is_grade_cell(cell)}
    assert not {cell: texts for cell, texts in prose.items() if texts}
