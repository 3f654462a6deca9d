"""Exercises that teach: no answer in sight, short grade cells, hints that resolve, partial credit.

- No line of a reference solution (whitespace ignored; comments and lines under 12 characters
  aside) appears in a grade cell of either edition, in the per-lesson check modules the students
  receive, or in any hint.
- The visible part of every grade cell is at most 15 lines.
- Every exercise has a first hint in its lesson's module; second hints exist only for exercises.
- Read against its solution, no hint quotes one of the solution's calls or names three of them in
  the order the solution makes them, and a first hint says where the lesson teaches the idea.
- Every concept check scores each question (partial credit).
- Copy-work stays rare: the solution cells with a quarter or more of their answer lines printed
  elsewhere in their edition (the idioms every training loop has aside) are exactly those named in
  COPIED_FROM_THE_LESSON (at most 4, as issue 34 asks); one that stops copying leaves the list.
- Every library call a check switches off while the answer runs is named in the exercise's text,
  in both editions: a student learns it from the task, not from a failure.
"""

import ast
import builtins
import inspect
import os
import re

import pytest
import torch
from lesson_files import LESSONS, read_edition, read_solution
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from course import training
from course.settings import LANGUAGES, set_language
from graders import lesson_checks
from graders.lesson_checks import hint, more_hints
from graders.lessons import lesson_names
from graders.nbgrader_adapter import grade_id, is_grade_cell, is_solution_cell

SHORTEST_ANSWER_LINE = 12
LONGEST_VISIBLE_GRADE_CELL = 15
# The lab's two scripts with unnamed faults, repaired by design, and first_bad_step, whose one shown
# line is the call of the training step it is given.
COPIED_FROM_THE_LESSON = {f"05_debugging_lab {exercise}" for exercise in (
    "first_bad_step", "fit_regressor_fixed", "train_and_evaluate_fixed")}
# Lines every training loop writes: shown everywhere, they give no exercise away (squeezed).
IDIOMS = {"optimizer.zero_grad()", "loss.backward()", "optimizer.step()", "model.train()", "model.eval()",
          "withtorch.no_grad():", "x,y=x.to(device),y.to(device)", "returnloss.item()",
          "loss=loss_fn(model(x),y)", "loss=F.cross_entropy(model(x),y)", "forx,yinbatches:",
          "losses.append(loss.item())"}


def _without_comment(line: str) -> str:
    """The line up to its first ``#`` that is outside a string literal."""
    quote = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:position]
    return line


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def answer_lines(source: str) -> list[str]:
    """The lines of a solution cell's answer, squeezed, long enough to give something away."""
    lines = source.splitlines()
    if any("### BEGIN SOLUTION" in line for line in lines):  # every block of the cell, not the first only
        inside, kept = False, []
        for line in lines:
            if "### BEGIN SOLUTION" in line or "### END SOLUTION" in line:
                inside = "### BEGIN SOLUTION" in line
            elif inside:
                kept.append(line)
        lines = kept
    squeezed = (squeeze(_without_comment(line)) for line in lines)
    return [line for line in squeezed if len(line) >= SHORTEST_ANSWER_LINE]


def module_for(lesson: str):
    module = lesson_names(lesson).check_module
    return getattr(lesson_checks, module, None) or pytest.fail(
        f"graders/lesson_checks/{module}.py is missing")


def hint_texts(module) -> list[str]:
    hints = [*getattr(module, "HINTS", {}).values(), *getattr(module, "MORE_HINTS", {}).values()]
    return [hint[language] for hint in hints for language in LANGUAGES]


def exercises(lesson: str) -> dict[str, str]:
    """Exercise id → source of its solution cell, concept check included."""
    return {grade_id(cell): cell.source for cell in read_solution(lesson).cells
            if is_solution_cell(cell) and cell.cell_type == "code"}


def _solution_calls(source: str) -> tuple[list[str], list[str]]:
    """The functions and methods the answer calls, in the order it first calls them (built-ins, the
    function's own parameters and names as short as English words aside: calling what one is given is
    the task, not a step), and each call's text, squeezed."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    given = {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
             for arg in [*node.args.args, *node.args.kwonlyargs]}
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call)),
                   key=lambda node: (node.end_lineno, node.end_col_offset))  # inner calls end first
    names = []
    for call in calls:
        function = call.func
        name = getattr(function, "attr", None) or getattr(function, "id", None)
        if name and len(name) > 2 and name not in names and name not in given and not hasattr(builtins, name):
            names.append(name)
    return names, [squeeze(ast.get_source_segment(code, call)) for call in calls]


def _longest_in_order(names: list[str], text: str) -> list[str]:
    """The longest run of ``names`` (in their order) that ``text`` names in the same order."""
    where = {name: found.start() for name in names if (found := re.search(rf"\b{re.escape(name)}\b", text))}
    best: dict[str, list[str]] = {}
    for name in (n for n in names if n in where):
        before = [best[other] for other in best if where[other] < where[name]]
        best[name] = [*max(before, key=len, default=[]), name]
    return max(best.values(), key=len, default=[])


def hints_with_solutions(lesson: str):
    """``(kind, hint id, language, text, solution source)`` for every hint of the lesson: a hint
    belongs to the exercise whose id begins as its own does (``adamw_decay``: ``adamw_step``)."""
    module, solutions = module_for(lesson), exercises(lesson)
    tables = (("first", getattr(module, "HINTS", {})), ("second", getattr(module, "MORE_HINTS", {})))
    for kind, table in tables:
        for hint_id, texts in table.items():
            exercise = max(solutions, key=lambda e: len(os.path.commonprefix([e, hint_id])))
            for language in LANGUAGES:
                yield kind, hint_id, language, texts[language], solutions[exercise]


def library_calls(targets) -> set[str]:
    """The names of the library calls among ``targets`` (``(owner, attribute)`` pairs switched off) as
    a student writes them: a method, a function, or for a class's special methods the class itself.
    Internals (one leading underscore) and the course's own helpers are not the student's to avoid."""
    names = set()
    for owner, attribute in targets:
        home = owner.__name__ if inspect.ismodule(owner) else getattr(owner, "__module__", "")
        if home.split(".")[0] not in ("torch", "torchvision") or (
                attribute.startswith("_") and not attribute.startswith("__")):
            continue
        special = attribute.startswith("__") or attribute in ("forward", "__call__")
        names.add(owner.__name__ if special else attribute)
    return names


def exercise_text(nb, grade_cell_index: int) -> str:
    """The text of the exercise a grade cell of a student edition belongs to: from the exercise's
    heading (the last one before the cell) to the cell."""
    heading = re.compile(r"^#+ (Exercise|Ejercicio)\b.*", re.MULTILINE)
    parts = []
    for cell in reversed(nb.cells[:grade_cell_index]):
        if cell.cell_type != "markdown":
            continue
        found = list(heading.finditer(cell.source))
        parts.append(cell.source[found[-1].start():] if found else cell.source)
        if found:
            return "\n".join(reversed(parts))
    return ""


WHERE = {"es": r"\b(secci[oó]n|ejercicio|celda)", "en": r"\b(section|exercise|cell)"}


lesson_checks.lesson_modules()


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_answer_line_is_readable_by_a_student(lesson):
    places = {f"{language} edition, {grade_id(cell)}": squeeze(cell.source)
              for language in LANGUAGES for cell in read_edition(lesson, language).cells
              if is_grade_cell(cell)}
    module = module_for(lesson)
    places[f"{module.__name__} (source)"] = squeeze(inspect.getsource(module))
    places.update({f"hint {text[:40]!r}": squeeze(text) for text in hint_texts(module)})
    leaks = [f"{exercise}: {line!r} in {place}" for exercise, source in exercises(lesson).items()
             for line in answer_lines(source) for place, text in places.items() if line in text]
    assert not leaks, "\n".join(leaks)


def shown_elsewhere(lesson: str, language: str) -> dict[str, float]:
    """Exercise id → the share of its answer lines (idioms aside) that a cell of the student edition
    other than the answer cells prints, for the exercises with such lines."""
    edition = read_edition(lesson, language)
    shown = "\n".join(squeeze(cell.source) for cell in edition.cells if not is_solution_cell(cell))
    shares = {}
    for exercise, source in exercises(lesson).items():
        lines = [line for line in answer_lines(source) if line not in IDIOMS]
        if lines and (share := sum(line in shown for line in lines) / len(lines)):
            shares[exercise] = share
    return shares


@pytest.mark.parametrize("language", LANGUAGES)
def test_few_exercises_can_be_answered_from_lines_the_lesson_prints(language):
    copied = {f"{lesson} {exercise}": f"{share:.0%}" for lesson in LESSONS
              for exercise, share in shown_elsewhere(lesson, language).items() if share >= 0.25}
    assert set(copied) == COPIED_FROM_THE_LESSON, copied
    assert len(COPIED_FROM_THE_LESSON) <= 4, "issue 34: at most 4 such cells in the course"


@pytest.mark.parametrize("lesson", LESSONS)
def test_visible_grade_cells_read_like_a_specification(lesson):
    long_cells = {grade_id(cell): len(cell.source.rstrip().splitlines())
                  for language in LANGUAGES for cell in read_edition(lesson, language).cells
                  if is_grade_cell(cell)}
    assert {cell: lines for cell, lines in long_cells.items()
            if lines > LONGEST_VISIBLE_GRADE_CELL} == {}


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_exercise_has_a_first_hint_in_both_languages(lesson):
    module = module_for(lesson)
    hints = getattr(module, "HINTS", {})
    graded = [exercise for exercise in exercises(lesson) if exercise != "concept_check"]
    assert [exercise for exercise in graded if exercise not in hints] == []
    for exercise, texts in hints.items():
        assert all(texts.get(language, "").strip() for language in LANGUAGES), exercise
        assert texts.get("more") in (None, *more_hints()), f"{exercise}: no second hint to point at"


def test_second_hints_belong_to_exercises_and_speak_both_languages():
    every_exercise = {exercise for lesson in LESSONS for exercise in exercises(lesson)}
    assert set(more_hints()) <= every_exercise
    for exercise, texts in more_hints().items():
        assert all(texts.get(language, "").strip() for language in LANGUAGES), exercise


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_hint_gives_the_answers_calls_and_a_first_hint_says_where_the_lesson_teaches_it(lesson):
    problems = []
    for kind, hint_id, language, text, solution in hints_with_solutions(lesson):
        names, calls = _solution_calls(solution)
        if len(in_order := _longest_in_order(names, text)) >= 3:
            problems.append(f"{kind} hint {hint_id} ({language}) names the answer's calls in order: "
                            f"{in_order}")
        if quoted := [call for call in calls if len(call) >= 8 and call in squeeze(text)]:
            problems.append(f"{kind} hint {hint_id} ({language}) quotes the answer: {quoted}")
        if kind == "first" and not re.search(WHERE[language], text, re.IGNORECASE):
            problems.append(f"first hint {hint_id} ({language}) does not say where the lesson teaches it")
    assert not problems, "\n".join(problems)


def test_the_hint_reader_finds_calls_in_order_and_quotes():
    names, calls = _solution_calls("def f(model, x):\n    y = model(x)\n    torch.nn.functional.relu(y)\n"
                                   "    loss = y.mean().backward()\n    opt.step()\n    print(len(y))\n")
    assert names == ["relu", "mean", "backward", "step"]
    assert "opt.step()" in calls
    assert _longest_in_order(names, "call backward, then step, after relu") == ["backward", "step"]
    assert _longest_in_order(names, "relu, then mean, backward, step") == ["relu", "mean", "backward", "step"]


def test_hint_prints_the_second_hint_in_the_editions_language(capsys, english):
    exercise, texts = next(iter(more_hints().items()))
    for language in LANGUAGES:
        set_language(language)
        hint(exercise)
        assert capsys.readouterr().out.strip() == texts[language].strip()


def test_hint_for_an_unknown_exercise_names_the_ones_that_have_one():
    with pytest.raises(KeyError) as raised:
        hint("no_such_exercise")
    assert "no_such_exercise" in str(raised.value)
    assert next(iter(more_hints())) in str(raised.value)


@pytest.mark.parametrize("lesson", LESSONS)
def test_concept_checks_give_partial_credit(lesson):
    cell = next(c for c in read_solution(lesson).cells if grade_id(c) == "test_concept_check")
    hidden = cell.source.split("### BEGIN HIDDEN TESTS")[-1]
    last_line = hidden.split("### END HIDDEN TESTS")[0].strip().splitlines()[-1]
    assert last_line.startswith("lesson.grade_concepts("), last_line


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_task_names_every_library_call_its_checks_switch_off(lesson):
    shortcuts = getattr(module_for(lesson), "SHORTCUTS", {})
    unnamed = []
    for language in LANGUAGES:
        nb = read_edition(lesson, language)
        for check, targets in shortcuts.items():
            at = next((i for i, cell in enumerate(nb.cells) if is_grade_cell(cell)
                       and re.search(rf"\b{check}\(", cell.source)), None)
            if at is None:
                continue  # a check that runs inside another check: named where that one is
            text = exercise_text(nb, at)
            missing = sorted(name for name in library_calls(targets)
                             if not re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE))
            if missing:
                unnamed.append(f"{language}: {grade_id(nb.cells[at])} ({check}) switches off {missing}, "
                               "which the exercise's text does not name")
    assert not unnamed, "\n".join(unnamed)


def test_the_task_reader_names_library_calls_as_a_student_writes_them():
    targets = [(torch, "cdist"), (torch.Tensor, "flatten"), (torch.nn.Flatten, "forward"),
               (torch, "_fused_adam_"), (training, "run_epoch")]
    assert library_calls(targets) == {"cdist", "flatten", "Flatten"}
    nb = new_notebook(cells=[new_markdown_cell("## 3. Distances\n\nUse `torch.cdist` freely."),
                             new_markdown_cell("Intro.\n\n### Exercise 2 · Pairs\n\nWrite it."),
                             new_markdown_cell("Not with `cdist`."), new_code_cell("check(f)")])
    assert exercise_text(nb, 3) == "### Exercise 2 · Pairs\n\nWrite it.\nNot with `cdist`."


def test_the_leak_measure_finds_an_answer_line_and_ignores_short_lines_and_comments():
    source = ("def f(x):\n    ### BEGIN SOLUTION\n    y = x.sum(dim=0)  # along rows\n"
              "    # a long explanatory comment\n    return y\n    ### END SOLUTION\n")
    assert answer_lines(source) == ["y=x.sum(dim=0)"]
