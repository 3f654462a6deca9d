"""Every lesson helper (``course/``) says which lesson teaches it, a claim held to the lessons' own code."""

import ast
import functools
import json
import re

import pytest

from graders.lessons import LESSONS, ROOT, available_lessons, solution_path

# A course/ module's docstring says, in its first or second paragraph, which lesson teaches what it
# does, in one form (d2l's library says it of every function):
#
#     Taught in lesson 04 (training_loop), sections 1, 2, 4, 7 and 9; also used by lesson 07 (scale).
#     Used by every lesson; taught in lesson 01 (tensors), setup cell.
#
# and the lessons' code holds it to that: each lesson it names exists and uses the module, each
# section it names is a "## N." heading of that lesson (a "setup cell" uses the module before the
# first one), and the lessons it says use the module are exactly those whose code does.
COURSE_MODULES = {
    ".".join(parts[:-1] if parts[-1] == "__init__" else parts): path
    for path in sorted((ROOT / "course").rglob("*.py"))
    for parts in [path.relative_to(ROOT).with_suffix("").parts]}
_LESSON = r"\d\d \(\w+\)"
_PLACE = r"setup cell|section \d+|sections \d+(?:, \d+)* and \d+"
_LESSONS = rf"{_LESSON}(?:, {_LESSON})* and {_LESSON}"
STATEMENT = re.compile(
    rf"(?P<every>Used by every lesson; taught|Taught) in lesson (?P<taught>{_LESSON}), (?P<place>{_PLACE})"
    rf"(?:; also used by (?:lesson (?P<one>{_LESSON})|lessons (?P<many>{_LESSONS})))?\.(?:\s|$)")
MENTION = re.compile(rf"[Ll]essons? (?P<lesson>{_LESSON})(?:, (?P<place>{_PLACE}))?")
BARE_MENTION = re.compile(r"[Ll]esson (\d\d)\b(?! \()")


def _lesson(named: str) -> str:
    """``01_tensors`` from ``01 (tensors)``."""
    number, slug = re.fullmatch(r"(\d\d) \((\w+)\)", named).groups()
    return f"{number}_{slug}"


@functools.cache
def _course_imports() -> dict[tuple[str, str], str]:
    """``{(module, name): source}`` for every ``from <source> import name`` of a course module."""
    found = {}
    for module, path in COURSE_MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in COURSE_MODULES:
                found |= {(module, alias.asname or alias.name): node.module for alias in node.names}
    return found


def _reached(module: str, name: str) -> str | None:
    """The course module ``module.name`` leads to: the submodule ``name``, or the module that a name
    ``module`` imported comes from (``course.fashion_mnist`` → ``course.data``), else ``None``."""
    if f"{module}.{name}" in COURSE_MODULES:
        return f"{module}.{name}"
    source = _course_imports().get((module, name))
    return source and (_reached(source, name) or source)


def _code_cells(lesson: str):
    """``(place, tree)`` for each code cell of the solution: ``setup cell`` before its first ``## N.``
    heading, ``section N`` after it. Magics are left out: a cell magic's whole cell, a line magic's line."""
    place = "setup cell"
    for cell in json.loads(solution_path(lesson).read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and (heading := re.search(r"^## (\d+)\.", source, re.M)):
            place = f"section {heading[1]}"
        elif cell["cell_type"] == "code" and not source.lstrip().startswith("%%"):
            lines = [line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip()[:1] in ("%", "!")
                     else line for line in source.splitlines()]
            yield place, ast.parse("\n".join(lines))


@functools.cache
def _uses(lesson: str) -> dict[str, set[str]]:
    """``{course module: the places where the lesson's code uses it}``: imported (``import course``,
    ``from course import training``, ``from course.memory import ...``), reached through a module
    (``course.memory.saved_bytes``, ``amp.benchmark_median`` from ``course.timing``), or run as a part
    of a subpackage the lesson uses (``course.diagnose.observer``). The ``course`` package's own
    imports are no such parts: every lesson imports it, and that alone uses none of its modules."""
    uses, bound = {}, {}

    def use(module, place):
        uses.setdefault(module, set()).add(place)

    def module_of(node):
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute) and (base := module_of(node.value)):
            name = f"{base}.{node.attr}"
            return name if name in COURSE_MODULES else None
        return None

    for place, tree in _code_cells(lesson):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in COURSE_MODULES:
                        use(alias.name, place)
                        bound[alias.asname or "course"] = alias.name if alias.asname else "course"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in COURSE_MODULES:
                use(node.module, place)
                for alias in node.names:
                    if reached := _reached(node.module, alias.name):
                        use(reached, place)
                        if reached == f"{node.module}.{alias.name}":
                            bound[alias.asname or alias.name] = reached
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (base := module_of(node.value)):
                if reached := _reached(base, node.attr):
                    use(reached, place)
    for (package, _), part in _course_imports().items():
        if package != "course" and COURSE_MODULES[package].name == "__init__.py" \
                and part.startswith(f"{package}.") and package in uses:
            uses.setdefault(part, set()).update(uses[package])
    return uses


def _sections(lesson: str) -> set[str]:
    cells = json.loads(solution_path(lesson).read_text())["cells"]
    return {f"section {number}" for cell in cells if cell["cell_type"] == "markdown"
            for number in re.findall(r"^## (\d+)\.", "".join(cell["source"]), re.M)}


def _claim_problems(module: str, lesson: str, place: str | None) -> list[str]:
    """What is wrong with the docstring's claim that ``lesson`` (at ``place``) teaches or uses ``module``."""
    if lesson not in LESSONS or not solution_path(lesson).exists():
        return [f"names lesson {lesson}, which graders.lessons.LESSONS (or solutions/) does not have"]
    uses = _uses(lesson).get(module)
    if not uses:
        return [f"names lesson {lesson}, whose code neither imports nor uses {module}"]
    if place == "setup cell" and place not in uses:
        return [f"says lesson {lesson}'s setup cell uses it; it is used in {', '.join(sorted(uses))}"]
    if place and place != "setup cell":
        named = {f"section {number}" for number in re.findall(r"\d+", place)}
        if missing := sorted(named - _sections(lesson)):
            return [f"names {', '.join(missing)} of lesson {lesson}, which has no such '## N.' heading"]
    return []


@pytest.mark.parametrize("module", COURSE_MODULES)
def test_every_helper_module_says_which_lesson_teaches_it_and_the_lessons_agree(module):
    docstring = ast.get_docstring(ast.parse(COURSE_MODULES[module].read_text())) or ""
    paragraphs = [" ".join(paragraph.split()) for paragraph in re.split(r"\n\s*\n", docstring)]
    statement = next(filter(None, (STATEMENT.match(paragraph) for paragraph in paragraphs[:2])), None)
    assert statement, (
        f"{module}: neither of its docstring's first two paragraphs opens by saying which lesson teaches it, "
        "as 'Taught in lesson 04 (training_loop), sections 1 and 7; also used by lesson 07 (scale).' or "
        "'Used by every lesson; taught in lesson 01 (tensors), setup cell.'")
    text = " ".join(paragraphs)
    problems = [problem for mention in MENTION.finditer(text)
                for problem in _claim_problems(module, _lesson(mention["lesson"]), mention["place"])]
    problems += [f"names lesson {number}, and no lesson has that number"
                 for number in BARE_MENTION.findall(text) if not any(name[:2] == number for name in LESSONS)]
    also = [statement["one"]] if statement["one"] else re.findall(_LESSON, statement["many"] or "")
    problems += [problem for named in also for problem in _claim_problems(module, _lesson(named), None)]
    claimed = set(available_lessons()) if statement["every"].startswith("Used") else {
        _lesson(named) for named in [statement["taught"], *also]}
    actual = {lesson for lesson in available_lessons() if module in _uses(lesson)}
    if unnamed := sorted(actual - claimed):
        problems.append(f"does not name {', '.join(unnamed)}, whose code uses it")
    if unused := sorted(claimed - actual):
        problems.append(f"says it is used by {', '.join(unused)}, whose code does not use it")
    assert not problems, f"{module}'s docstring " + "; ".join(dict.fromkeys(problems))
