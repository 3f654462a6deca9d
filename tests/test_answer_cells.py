"""Every answer cell of every lesson, in both editions, tried as students would answer it, in one
grading kernel per lesson and edition (forked for each try, :mod:`forked_kernel`). The kernel runs
the student edition as nbgrader runs it (:func:`lesson_files.graded_edition`): its own code cells,
Spanish ones included, with the grade cells restored from the source.

- the reference answer earns every point of every grade cell, hidden tests included, in both
  editions alike; every code cell runs without an error, and stock nbgrader's autograde gives the
  notebook the walk executed full marks;
- the student edition's stub in place of any one answer loses points, and an exercise left as the
  student edition has it (every answer its stub) earns 0 in every grade cell: the untouched edition
  scores nothing, hidden tests included;
- an answer that does nothing (:mod:`do_nothing`) earns 0 in every grade cell of its exercise;
- a plausible wrong answer (:mod:`wrong_answers`) fails its check with what was expected, what was
  got and a hint, in the edition's language and without terminal colour codes, and the call to
  ``hint(...)`` that the message offers prints the exercise's second hint.

Stubs, untouched exercises and answers that do nothing are tried in the English edition only: they
are the same code in both editions (``test_both_editions_answer_with_the_same_code`` and
``test_both_editions_stub_with_the_same_code``) and scored by the same checks. The Spanish walk tries
the wrong answers, for their Spanish messages.

An exercise is one or more answer cells and the grade cells after them, up to the next answer cell.
"""

import ast
import re

import pytest
from do_nothing import do_nothing_answers
from forked_kernel import ForkedKernel, error_text, loses_points, printed, score
from lesson_files import LESSONS, graded_edition, read_edition, write
from nbformat.v4 import new_code_cell
from wrong_answers import WRONG_ANSWERS

from course.settings import LANGUAGES
from graders.checks import WORDS
from graders.lesson_checks import more_hints
from graders.nbgrader_adapter import grade_id, is_grade_cell, is_solution_cell
from graders.notebook_grading.autograde import autograde, submit
from graders.run.runner import LessonFailed, check_execution

pytestmark = pytest.mark.kernel

# The edition walked with every try; the other is walked with the wrong answers only.
EVERY_TRY_IN = "en"
_CHECK_IMPORT = re.compile(r"from graders\.lesson_checks import (\w+) as lesson")
_HINT_CALL = re.compile(r"hint\((['\"])[\w-]+\1\)")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _is_test(cell) -> bool:
    return is_grade_cell(cell) and not is_solution_cell(cell)


def exercises(nb) -> list[list[int]]:
    """The notebook's exercises, each as the indices of its cells: answer cells first (with the cells
    between them), then its grade cells, up to the next answer cell after them."""
    groups, current = [], None
    for index, cell in enumerate(nb.cells):
        if is_solution_cell(cell) and (current is None or any(_is_test(nb.cells[i]) for i in current)):
            current = []
            groups.append(current)
        if current is not None:
            current.append(index)
    return groups


def _tests(cells) -> list:
    return [c for c in cells if _is_test(c)]


def _with(cells, answers: dict[int, str]) -> list:
    """``cells`` with the answers at the given positions replaced."""
    return [new_code_cell(answers[i]) if i in answers else cell for i, cell in enumerate(cells)]


class Walk:
    """One lesson in one edition, walked cell by cell; ``problems`` is what any try found wrong."""

    def __init__(self, lesson: str, language: str, kernel: ForkedKernel):
        self.lesson, self.language, self.kernel = lesson, language, kernel
        self.nb = kernel.nb
        edition = read_edition(lesson, language)
        self.stubs = {grade_id(c): c.source for c in edition.cells if is_solution_cell(c)}
        self.problems: list[str] = []
        self._forks: dict[tuple, list] = {}  # the same cells from the same kernel state run once
        self.tries_everything = language == EVERY_TRY_IN

    def fork(self, cells) -> list:
        """``cells`` run in a copy of the kernel as it is now."""
        key = tuple(cell.source for cell in cells)
        if key not in self._forks:
            self._forks[key] = self.kernel.fork(cells)
        return self._forks[key]

    def say(self, problem: str) -> None:
        self.problems.append(f"{self.lesson} ({self.language}): {problem}")

    def run(self) -> list[str]:
        starts = {group[0]: group for group in exercises(self.nb)}
        for index, cell in enumerate(self.nb.cells):
            if index in starts:
                if self.tries_everything:
                    self.try_doing_nothing(starts[index])
                self.try_wrong_answers(starts[index])
            if is_solution_cell(cell) and self.tries_everything:
                self.try_stub(index, next(g for g in starts.values() if index in g))
            ran = self.kernel.run(index)
            self._forks.clear()
            if loses_points(ran):
                self.say(f"the reference loses points in {grade_id(ran)}: {error_text(ran)[:300]}")
        return self.problems

    def try_stub(self, index: int, group: list[int]) -> None:
        answer = grade_id(self.nb.cells[index])
        stub = {0: self.stubs[answer]}
        rest_of_group = self.nb.cells[index:self.last_test(group) + 1]
        if any(loses_points(c) for c in self.fork(_with(rest_of_group, stub))):
            return
        if not any(loses_points(c) for c in self.fork(_with(self.nb.cells[index:], stub))):
            self.say(f"the stub of {answer} loses no points")

    def last_test(self, group: list[int]) -> int:
        """The index of the exercise's last grade cell: a try runs no further, since the cells after
        it (a demo, a plot) cannot change its grade cells' scores."""
        return max(i for i in group if _is_test(self.nb.cells[i]))

    def try_doing_nothing(self, group: list[int]) -> None:
        cells = self.nb.cells[group[0]:self.last_test(group) + 1]
        variants = {i: do_nothing_answers(c.source) for i, c in enumerate(cells) if is_solution_cell(c)}
        tries = {name: {i: answers[name] for i, answers in variants.items() if name in answers}
                 for name in sorted({name for answers in variants.values() for name in answers})}
        tries["is left as the student edition has it"] = {i: self.stubs[grade_id(cells[i])] for i in variants}
        for name, answers in tries.items():
            ran = self.fork(_with(cells, answers))
            earned = [f"{grade_id(c)} ({score(c)[0]:g} of {score(c)[1]:g})"
                      for c in _tests(ran) if score(c)[0] > 0]
            if len(_tests(ran)) < len(_tests(cells)):
                self.say(f"an answer to {grade_id(cells[0])} that {name} did not finish its grade cells")
            if earned:
                self.say(f"an answer to {grade_id(cells[0])} that {name} earns points in {', '.join(earned)}")

    def try_wrong_answers(self, group: list[int]) -> None:
        cells = self.nb.cells[group[0]:self.last_test(group) + 1]
        for i, cell in enumerate(cells):
            wrong = WRONG_ANSWERS.get(self.lesson, {}).get(grade_id(cell)) if is_solution_cell(cell) else None
            if wrong is not None:
                self.check_message(grade_id(cell), self.fork(_with(cells, {i: wrong})))

    def check_message(self, answer: str, ran: list) -> None:
        failed = next((c for c in _tests(ran) if loses_points(c)), None)
        if failed is None:
            self.say(f"the wrong answer to {answer} earns every point")
            return
        message, words = error_text(failed), WORDS[self.language]
        labels = [f"{words[label]}:" for label in ("expected", "got", "hint")]
        if missing := [label for label in labels if label not in message]:
            self.say(f"{grade_id(failed)}'s message lacks {missing}: {message[:300]!r}")
        if _COLOUR.search(message):
            self.say(f"{grade_id(failed)}'s message has terminal colour codes: {message[:300]!r}")
        if answer not in more_hints():
            return
        call = _HINT_CALL.search(message)
        if call is None:
            self.say(f"{grade_id(failed)}'s message offers no hint(...) call: {message[:300]!r}")
            return
        (asked,) = self.kernel.fork([new_code_cell(call.group(0))])
        second = more_hints()[answer][self.language]
        if " ".join(second.split()) not in " ".join(printed(asked).split()):
            self.say(f"{call.group(0)} printed {printed(asked)[:200]!r}{error_text(asked)[:200]}, "
                     "not the second hint")


def check_modules(nb) -> list[str]:
    """The lesson check modules that the notebook's grade cells import."""
    names = {name for cell in nb.cells if _is_test(cell) for name in _CHECK_IMPORT.findall(cell.source)}
    return [f"graders.lesson_checks.{name}" for name in sorted(names)]


@pytest.mark.parametrize(("lesson", "language"), [(lesson, lang) for lesson in LESSONS for lang in LANGUAGES])
def test_every_answer_cell_is_graded_fairly(lesson, language, course_dir, tmp_path):
    nb = graded_edition(lesson, language)
    # imported once before the walk: the copies of the first exercise would each import it again
    with ForkedKernel(nb, tmp_path, preload=check_modules(nb)) as kernel:
        problems = Walk(lesson, language, kernel).run()
        executed = write(kernel.nb, tmp_path / "executed.ipynb")
    try:
        check_execution(kernel.nb, lesson)
    except LessonFailed as failure:
        problems.append(str(failure))
    submit(course_dir, lesson, f"walk-{language}", executed)
    graded = autograde(course_dir, lesson, f"walk-{language}", execute=False)
    if graded.score < graded.max_score:
        problems.append(f"stock nbgrader gives the walk's notebook {graded.score:g} of {graded.max_score:g}: "
                        f"{graded.cells}")
    assert not problems, "\n".join(problems)


def test_an_exercise_is_its_answers_and_the_grade_cells_after_them(make_notebook, grade_cell):
    answer = new_code_cell("def f(): ...")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "f", "locked": False}
    nb = make_notebook("import torch", answer, "x = 1", answer, grade_cell("f()", "t1"),
                       grade_cell("f()", "t2"), "y = 2", answer, grade_cell("f()", "t3"))
    assert exercises(nb) == [[1, 2, 3, 4, 5, 6], [7, 8]]


def _as_code(source: str, docstrings: bool = True) -> str:
    """A cell as Python reads it (comments and layout aside, and docstrings unless ``docstrings``);
    a cell magic's line as written, and its body as Python reads it."""
    magic, body = source.partition("\n")[::2] if source.startswith("%%") else ("", source)
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return source
    if not docstrings:
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and \
                    ast.get_docstring(node, clean=False) is not None:
                node.body = node.body[1:]
    return magic + ast.dump(tree)


@pytest.mark.parametrize("lesson", LESSONS)
def test_both_editions_answer_with_the_same_code(lesson):
    """What lets the Spanish walk leave the answers that do nothing to the English one."""
    answers = {language: [_as_code(c.source) for c in graded_edition(lesson, language).cells
                          if is_solution_cell(c)] for language in LANGUAGES}
    assert answers["es"] == answers["en"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_both_editions_stub_with_the_same_code(lesson):
    """What lets the Spanish walk leave the stubs and the untouched exercises to the English one:
    the stubs differ in their comments and docstrings only."""
    stubs = {language: [_as_code(c.source, docstrings=False) for c in read_edition(lesson, language).cells
                        if is_solution_cell(c)] for language in LANGUAGES}
    assert stubs["es"] == stubs["en"]
