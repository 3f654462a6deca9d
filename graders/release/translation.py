"""The code text of an edition in its language: comments, docstrings and labels of shared code cells.

Code cells are shared by both editions and written in English. For another language, the release
replaces each comment, docstring and label string (an argument of ``print``, of a plot's title or
axis label, a ``label=``/``desc=`` keyword…) with its entry in a catalogue keyed by the English
text: ``solutions/translations/<lang>/NN_slug.json``, plus ``common.json`` beside it for texts that
several lessons share (the parameters cell). Code itself (names, dict keys, tags) is never
touched, and neither are grade cells, which stay identical so that both editions grade alike.

``python -m graders.release.translation [LESSON ...]`` lists what a catalogue lacks and what it
holds that no code uses.
"""

import argparse
import ast
import copy
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

from graders import nbgrader_adapter as adapter
from graders.lessons import SOLUTIONS, available_lessons, solution_path

CATALOGUES = SOLUTIONS / "translations"
COMMON = "common"
SOURCE_LANGUAGE = "en"
LABEL_CALLS = {"print", "title", "set_title", "suptitle", "xlabel", "ylabel", "set_xlabel",
               "set_ylabel", "text", "annotate", "legend", "set_xticklabels", "set_yticklabels",
               "record_function"}  # a profiler region's name is a row of the table it prints
LABEL_KEYWORDS = {"label", "labels", "tick_label", "title", "desc", "xlabel", "ylabel"}
# Python cell magics whose body is Python; any other (%%bash…) leaves the cell as written.
PYTHON_CELL_MAGICS = ("%%writefile", "%%time", "%%timeit", "%%capture")
NOT_PROSE = re.compile(r"^(noqa|type:|pragma|fmt:|#)")
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
FIELD = re.compile(r"(?<!\{)\{(?!\{)[^{}]*\}")


class TranslationError(ValueError):
    """A catalogue entry that cannot replace its text (fields changed, code broken)."""


@dataclass(frozen=True)
class CodeText:
    """A comment or string of a cell: its key in the catalogue and where it sits."""

    key: str
    start: int  # character offsets in the cell's source, of the part the translation replaces
    end: int
    is_comment: bool


def reads_as_prose(text: str) -> bool:
    """Whether a text holds a word to translate (three letters or more, outside ``{fields}``)."""
    return bool(re.search(r"\b[A-Za-z]{3,}\b", FIELD.sub("", text)))


def python_body(source: str) -> str | None:
    """The cell as Python the tokenizer can read, same offsets (magic lines blanked), or None."""
    lines = source.split("\n")
    first = lines[0].strip()
    if first.startswith("%%") and not first.startswith(PYTHON_CELL_MAGICS):
        return None
    return "\n".join(" " * len(line) if line.lstrip().startswith(("%", "!")) else line
                     for line in lines)


def _offsets(source: str) -> list[int]:
    """Character offset of the start of each line (1-based rows, as tokenize and ast count)."""
    starts, total = [0, 0], 0
    for line in source.split("\n"):
        total += len(line) + 1
        starts.append(total)
    return starts


def _solution_rows(source: str) -> set[int]:
    """Rows inside a solution region: the release replaces them, so they are never shown."""
    rows, inside = set(), False
    for row, line in enumerate(source.split("\n"), start=1):
        if line.strip() == SOLUTION_MARKERS[0]:
            inside = True
        if inside:
            rows.add(row)
        if line.strip() == SOLUTION_MARKERS[1]:
            inside = False
    return rows


def _label_nodes(node):
    """String literals that a label argument is made of (not those inside calls or subscripts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) or isinstance(node, ast.JoinedStr):
        yield node
    elif isinstance(node, ast.BinOp):
        yield from _label_nodes(node.left)
        yield from _label_nodes(node.right)
    elif isinstance(node, ast.IfExp):
        yield from _label_nodes(node.body)
        yield from _label_nodes(node.orelse)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _label_nodes(element)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        yield from _label_nodes(node.func.value)  # a label laid out: "loss".ljust(12)


def _called_name(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def _prose_nodes(tree):
    """Docstrings and label strings of a parsed cell."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].value
        if isinstance(node, ast.Call):
            if _called_name(node) in LABEL_CALLS:
                for argument in node.args:
                    yield from _label_nodes(argument)
            for keyword in node.keywords:
                if keyword.arg in LABEL_KEYWORDS:
                    yield from _label_nodes(keyword.value)


def _string_tokens(python: str):
    """``(start, end, text)`` of each string literal; f-string parts (Python 3.12+) merged."""
    opened = None
    for token in tokenize.generate_tokens(io.StringIO(python).readline):
        name = tokenize.tok_name[token.type]
        if name == "STRING":
            yield token.start, token.end, token.string
        elif name == "FSTRING_START":
            opened = token
        elif name == "FSTRING_END" and opened is not None:
            yield opened.start, token.end, None
            opened = None


def code_texts(source: str) -> list[CodeText]:
    """The comments, docstrings and label strings of a cell that read as prose."""
    python = python_body(source)
    if python is None:
        return []
    offsets, hidden = _offsets(python), _solution_rows(python)

    def at(position):
        return offsets[position[0]] + position[1]

    try:
        tree = ast.parse(python)
    except SyntaxError as error:
        raise TranslationError(f"a code cell does not parse as Python ({error}); "
                               "fix the cell or make it a cell magic other than %%writefile") from error
    byte_lines = python.split("\n")

    def character(row, byte_col):
        return offsets[row] + len(byte_lines[row - 1].encode()[:byte_col].decode())

    spans = {(character(n.lineno, n.col_offset), character(n.end_lineno, n.end_col_offset))
             for n in _prose_nodes(tree)}
    texts = []
    for token in tokenize.generate_tokens(io.StringIO(python).readline):
        if tokenize.tok_name[token.type] == "COMMENT" and token.start[0] not in hidden:
            text = token.string.lstrip("#").strip()
            if text and not NOT_PROSE.match(text) and reads_as_prose(text):
                begin = at(token.start) + token.string.index(text)
                texts.append(CodeText(text, begin, begin + len(text), True))
    for start, end, literal in _string_tokens(python):
        begin, finish = at(start), at(end)
        if start[0] in hidden or not any(lo <= begin and finish <= hi for lo, hi in spans):
            continue
        literal = literal or python[begin:finish]
        body = re.match(r"(?s)[A-Za-z]*('''|\"\"\"|'|\")(.*)\1$", literal)
        if body and reads_as_prose(body.group(2)):
            content_start = begin + body.start(2)
            texts.append(CodeText(body.group(2), content_start, content_start + len(body.group(2)), False))
    return sorted(texts, key=lambda t: t.start)


def translate_source(source: str, catalogue: dict) -> str:
    """``source`` with every text the catalogue knows replaced by its translation."""
    translated = source
    for text in reversed(code_texts(source)):
        if not catalogue.get(text.key):
            continue
        replacement = catalogue[text.key]
        if sorted(FIELD.findall(replacement)) != sorted(FIELD.findall(text.key)):
            raise TranslationError(f"the translation of {text.key!r} must keep its fields "
                                   f"{FIELD.findall(text.key)}; it has {FIELD.findall(replacement)}")
        if text.is_comment and "\n" in replacement:
            raise TranslationError(f"the translation of the comment {text.key!r} must be one line")
        translated = translated[:text.start] + replacement + translated[text.end:]
    if python_body(translated) is not None:
        try:
            ast.parse(python_body(translated))
        except SyntaxError as error:
            raise TranslationError(f"a translation breaks the code of this cell ({error}); "
                                   "check its quotes and line breaks") from error
    return translated


def translatable_cells(nb) -> list:
    """Shared code cells other than grade cells: the ones whose text follows the edition."""
    return [cell for cell in nb.cells if cell.cell_type == "code" and not adapter.is_grade_cell(cell)
            and not any(tag.startswith("lang:") for tag in cell.get("metadata", {}).get("tags", []))]


def catalogue_path(lesson: str, language: str) -> Path:
    return CATALOGUES / language / f"{lesson}.json"


def _read_catalogue(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise TranslationError(f"{path} is not valid JSON ({error}); it maps English texts "
                               "to their translation: {\"English\": \"traducción\"}") from error


def load_catalogue(lesson: str, language: str) -> dict:
    """The shared and the lesson's entries for ``language`` (none for the source language)."""
    if language == SOURCE_LANGUAGE:
        return {}
    shared = _read_catalogue(catalogue_path(COMMON, language))
    return shared | _read_catalogue(catalogue_path(lesson, language))


def translate_notebook(nb, lesson: str, language: str):
    """A copy of ``nb`` whose shared code cells speak ``language``."""
    catalogue = load_catalogue(lesson, language)
    translated = copy.deepcopy(nb)
    for cell in translatable_cells(translated):
        try:
            cell.source = translate_source(cell.source, catalogue)
        except TranslationError as error:
            raise TranslationError(f"{lesson}, cell {cell.get('id')}: {error}") from error
    return translated


def code_text_keys(lesson: str) -> list[str]:
    """The keys of every code text (a comment, a printed label) of a lesson that its other editions
    translate."""
    nb = nbformat.read(solution_path(lesson), 4)
    return list(dict.fromkeys(text.key for cell in translatable_cells(nb)
                              for text in code_texts(cell.source)))


def catalogue_gaps(lesson: str, language: str) -> tuple[list[str], list[str]]:
    """``(missing, unused)``: texts the catalogue lacks, and the lesson's entries no code uses.

    For ``common``, unused means used by no lesson.
    """
    if lesson == COMMON:
        used = {key for name in available_lessons() for key in code_text_keys(name)}
        return [], [key for key in _read_catalogue(catalogue_path(COMMON, language)) if key not in used]
    keys = code_text_keys(lesson)
    catalogue = load_catalogue(lesson, language)
    missing = [key for key in keys if not catalogue.get(key)]
    unused = [key for key in _read_catalogue(catalogue_path(lesson, language)) if key not in keys]
    return missing, unused


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lessons", nargs="*", help=f"NN_slug or {COMMON} (default: all of them)")
    parser.add_argument("--language", default="es")
    args = parser.parse_args(argv)
    complete = True
    for lesson in args.lessons or [*available_lessons(), COMMON]:
        missing, unused = catalogue_gaps(lesson, args.language)
        if missing or unused:
            complete = False
            print(f"{catalogue_path(lesson, args.language)}:")
        if missing:
            print(f"  {len(missing)} texts to translate (fill in and add):")
            print(json.dumps(dict.fromkeys(missing, ""), ensure_ascii=False, indent=2))
        if unused:
            print(f"  {len(unused)} entries no code cell uses (remove them):")
            print(json.dumps(unused, ensure_ascii=False, indent=2))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
