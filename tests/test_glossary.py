"""Spanish texts use the glossary's term for each idea, and write numbers as the code prints them
(docs/glossary.md)."""

import re
import tomllib

import nbformat
import pytest

from graders.lessons import ROOT, SOLUTIONS, available_lessons, solution_path
from graders.release.editions import cell_language

GLOSSARY = ROOT / "docs" / "glossary.md"


def avoided_forms() -> dict:
    """``form to avoid`` → the term to write instead, from the glossary's tables."""
    forms, in_table = {}, False
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if set(line.strip()) <= set("|-"):  # the rule under a table's header starts its rows
            in_table = bool(line.strip())
            continue
        if in_table and len(cells) == 3 and cells[2]:
            for form in cells[2].split(";"):
                forms[form.strip()] = cells[1]
    return forms


def spanish_texts() -> dict:
    """Where Spanish is written → its text: prose cells, catalogues, messages of the Python side, hints
    and concept questions."""
    texts = {}
    for lesson in available_lessons():
        for cell in nbformat.read(solution_path(lesson), 4).cells:
            if cell_language(cell) == "es":
                texts[f"{lesson}, cell {cell.get('id')}"] = cell.source
    for path in sorted((SOLUTIONS / "translations" / "es").glob("*.json")):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for package in ("course", "graders"):
        for path in sorted((ROOT / package).rglob("*.py")):
            texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "graders" / "lesson_checks").glob("*/*.toml")):  # hints, questions
        spanish = [entry["es"] for table in tomllib.loads(path.read_text(encoding="utf-8")).values()
                   for entry in (table.values() if isinstance(table, dict) else ())
                   if isinstance(entry, dict) and "es" in entry]
        texts[str(path.relative_to(ROOT))] = "\n".join(spanish)
    return texts


def test_the_glossary_lists_forms_to_avoid():
    forms = avoided_forms()
    assert "paso hacia atrás" in forms and forms["paso hacia atrás"] == "pasada hacia atrás"


@pytest.mark.parametrize("form", sorted(avoided_forms()))
def test_spanish_texts_avoid(form):
    pattern = re.compile(rf"\b{re.escape(form)}\b", re.IGNORECASE)
    found = [where for where, text in spanish_texts().items() if pattern.search(text)]
    assert not found, f"{form!r} in {found}; the glossary (docs/glossary.md) says: {avoided_forms()[form]!r}"


# A decimal comma: digits, a comma, one or two digits; not a tuple, a list or a regex quantifier.
DECIMAL_COMMA = re.compile(r"(?<![\w.,(\[{])\d+,\d{1,2}(?![\d)\]}]|,\d)")


def test_spanish_texts_write_decimals_with_a_point_as_the_code_prints_them():
    found = [f"{where}: {match.group(0)!r}" for where, text in spanish_texts().items()
             for match in DECIMAL_COMMA.finditer(text)]
    assert not found, f"decimal commas (docs/glossary.md: the edition writes 0.05, as its outputs): {found}"
