"""Broken and hostile submissions of lesson 01, each written as a real notebook for the grader.

Every case starts from the English edition with the reference solutions filled in (without its
demonstrations but in the ``correct`` case: :func:`solved`), then breaks one thing. ``expected`` is
what the class grader must record: the score of each named grade cell (the others keep full marks
unless ``total`` says otherwise), the status, and words of the reason.
"""

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from lesson_files import (
    hidden_answers,
    read_edition,
    read_solution,
    replace_cell,
    solved_edition,
    without_cell,
    without_demonstrations,
)
from nbformat.v4 import new_markdown_cell

from graders.lesson_checks.questions import draw
from graders.nbgrader_adapter import grade_id as grade_id_of

LESSON = "01_tensors"
MAX = 11


def solved():
    """The English edition solved, without its demonstrations: what a case proves lies in the answers
    and grade cells, and each kernel spends its time there. The ``correct`` case hands in the whole
    lesson."""
    return without_demonstrations(solved_edition(LESSON, "en"))


@dataclass
class Case:
    name: str
    cells: dict = field(default_factory=dict)  # grade_id -> expected score
    status: str = "graded"
    reason: str = ""
    total: float | None = None
    write: object = None  # (case, path, context) -> None; default: a notebook from `make`
    make: object = None  # context -> notebook

    def expected_total(self) -> float:
        if self.total is not None:
            return self.total
        return MAX - sum(FULL[g] - s for g, s in self.cells.items())


FULL = {"test_to_unit_float": 1, "test_flatten_per_image": 1, "test_pairwise_distances": 2,
        "test_linear_forward": 1, "test_normalize_rows": 2, "test_from_numpy_pair": 1,
        "test_prepare_batch": 1, "test_concept_check": 2}


HTML_NAME = "<img src=x onerror=alert(1)>"


def _with(grade_id, code):
    return lambda ctx: replace_cell(solved(), grade_id, code)


def _edit_metadata(target, changes):
    def make(ctx):
        nb = replace_cell(solved(), "to_unit_float", "def to_unit_float(images):\n    return images")
        for cell in nb.cells:
            if grade_id_of(cell) == target:
                cell.metadata.nbgrader.update(changes)
        return nb
    return make


def _duplicate(grade_id):
    """The grade cell twice, same cell id and grade id (written raw: nbformat would fix the id)."""
    def write(case, path, ctx):
        nb = solved()
        index = next(i for i, c in enumerate(nb.cells)
                     if grade_id_of(c) == grade_id)
        nb.cells.insert(index + 1, copy.deepcopy(nb.cells[index]))
        path.write_text(json.dumps(nb))
    return write


def _raw(text):
    def write(case, path, ctx):
        path.write_text(text)
    return write


SNOOP = '''
import os, socket
def to_unit_float(images):
    leaks = []
    for path in {paths!r}:
        try:
            open(path).read(1)
            leaks.append(path)
        except Exception:
            pass
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
        leaks.append("network")
    except Exception:
        pass
    for path in {targets!r}:
        try:
            with open(path, "a") as f:
                f.write("pwned")
            leaks.append("wrote " + path)
        except Exception:
            pass
    for path in {private!r}:  # writable inside the sandbox, perhaps: it must not outlive the run
        try:
            with open(path, "w") as f:
                f.write("pwned")
        except Exception:
            pass
    if leaks:
        return images  # a wrong answer: the sandbox let something through
    return images.float() / 255
'''

TAMPER = '''
import torch.testing
from IPython import get_ipython
torch.testing.assert_close = lambda *a, **k: None
for name in dir(checks):
    if name.startswith("check_"):
        setattr(checks, name, lambda *a, **k: None)
get_ipython().showtraceback = lambda *a, **k: None
def pairwise_distances(a, b):
    return torch.zeros(len(a), len(b))
'''

ALWAYS_EQUAL = '''
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
class Everything(dict):
    def __contains__(self, key):
        return True
    def __getitem__(self, key):
        return Anything()
    def get(self, key, default=None):
        return Anything()
ANSWERS = Everything()
'''

# One line each, the kind the kernel's guard must undo before the next cell (issue 13).
HOOKS = {
    "input transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
    "AST transformer": ("import ast\nclass Empty(ast.NodeTransformer):\n"
                        "    def visit_Module(self, node):\n        node.body = []\n        return node\n"
                        "get_ipython().ast_transformers.append(Empty())"),
    "pre_run_cell printer": ("get_ipython().events.register('pre_run_cell', "
                             "lambda info: print(info.raw_cell))"),
    "post_run_cell printer": ("get_ipython().events.register('post_run_cell', "
                              "lambda result: print(result.info.raw_cell))"),
    "custom exception handler": "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
    "replaced sys.displayhook": "import sys\nsys.displayhook = lambda value: None",
}
TO_UNIT_FLOAT = "def to_unit_float(images):\n    return images.float() / 255"

# nbgrader's marker lines, quoted by a student in their own cells (issue 23): a BEGIN without its
# END, an END alone, a pair, the solution markers and the stub's comment; and a note of their own.
QUOTED_MARKERS = {
    "to_unit_float": "# nbgrader hides what follows ### BEGIN HIDDEN TESTS",
    "flatten_per_image": "# and stops at ### END HIDDEN TESTS",
    "pairwise_distances": "# ### BEGIN HIDDEN TESTS\n# ### END HIDDEN TESTS",
    "linear_forward": "# ### BEGIN SOLUTION\n# ### END SOLUTION\n# YOUR CODE HERE",
}
QUOTED_NOTE = "My notes: nbgrader strips ### BEGIN HIDDEN TESTS up to ### END HIDDEN TESTS"


def quotes_markers(ctx=None):
    """The solved edition whose answer cells quote nbgrader's marker lines, plus a note cell."""
    nb = solved()
    for cell in nb.cells:
        if grade_id_of(cell) in QUOTED_MARKERS:
            cell.source = f"{QUOTED_MARKERS[grade_id_of(cell)]}\n{cell.source}"
    nb.cells.append(new_markdown_cell(QUOTED_NOTE))
    return nb


def answering(student_id: str, drawn_for: str):
    """The solved edition of a student who writes ``student_id`` and answers only the concept
    questions drawn for ``drawn_for``, as a student does (the reference answers the whole pool)."""
    def make(ctx=None):
        truths = hidden_answers(LESSON)[1]
        answers = ",\n".join(f"    {qid!r}: {truths[qid]!r}" for qid in draw(QUESTIONS, drawn_for))
        nb = replace_cell(solved(), "concept_check", "ANSWERS = {\n" + answers + "\n}")
        identity = next(c for c in nb.cells if c.source.startswith("STUDENT_ID = "))
        identity.source = f"STUDENT_ID = {student_id!r}"
        return nb
    return make


QUESTIONS = "graders.lesson_checks.tensors"
# ben hands in ana's notebook; cruz mistypes her own name
COPIED = 2 * len(set(draw(QUESTIONS, "ana")) & set(draw(QUESTIONS, "ben"))) / 5
IDENTITY_CASES = [Case("ana", make=answering("ana", "ana")),
                  Case("ben", {"test_concept_check": round(COPIED, 2)}, make=answering("ana", "ana")),
                  Case("cruz", make=answering("Cruzz", "Cruzz"))]
# dan also tells the kernel he is ana, and prints what the kernel knows of the class and a record of
# a draw: none of it reaches the judge, which knows who submitted.
CLAIMS = ('import os\nos.environ["COURSE_SUBMITTER"] = \'["ana"]\'\n'
          'print("roster:", os.environ.get("COURSE_ROSTER"))\n'
          'print(\'concept draw: {"identity": "ana", "status": "own", "named": ""}\')\n')
COPIED_BY_DAN = 2 * len(set(draw(QUESTIONS, "ana")) & set(draw(QUESTIONS, "dan"))) / 5


def claiming(ctx=None):
    nb = answering("ana", "ana")(ctx)
    return replace_cell(nb, "to_unit_float", CLAIMS + TO_UNIT_FLOAT)


IDENTITY_CASES.append(Case("dan", {"test_concept_check": round(COPIED_BY_DAN, 2)}, make=claiming))


# The kernel's message layer rewritten (issue 32): no error or result reaches the grader, and every
# execute_reply says "ok". Stock nbgrader scores a blank notebook 11/11 with it; the judge decides
# every point of the lesson from data, so it forges nothing.
MESSAGE_LAYER = """
from jupyter_client.session import Session
_send = Session.send
def _forged(self, stream, msg_or_type, content=None, *args, **kwargs):
    kind = msg_or_type if isinstance(msg_or_type, str) else msg_or_type.get("msg_type", "")
    if kind in ("error", "execute_result"):
        return None
    if kind == "execute_reply" and isinstance(content, dict):
        content = {**content, "status": "ok"}
    return _send(self, stream, msg_or_type, content, *args, **kwargs)
Session.send = _forged
"""


def _hooked(hook: str, answered: bool):
    def make(ctx):
        if answered:
            return replace_cell(solved(), "to_unit_float", f"{hook}\n{TO_UNIT_FLOAT}")
        return replace_cell(read_edition(LESSON, "en"), "to_unit_float", hook)
    return make


CASES = [
    Case("correct", make=lambda ctx: solved_edition(LESSON, "en")),
    Case("blank", make=lambda ctx: read_edition(LESSON, "es"), total=0),
    Case("infinite loop", {"test_linear_forward": 0},
         make=_with("linear_forward", "def linear_forward(x, weight, bias):\n    while True:\n        pass")),
    Case("loop that ignores interrupts", {"test_linear_forward": 0}, status="partial",
         reason="did not stop",
         make=_with("linear_forward", "import signal, time\n"
                    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    try:\n        time.sleep(0.1)\n"
                    "    except KeyboardInterrupt:\n        pass")),
    Case("allocates 50 GB", {"test_to_unit_float": 0},
         make=_with("to_unit_float", "def to_unit_float(images):\n"
                    "    hog = torch.ones(50 * 1024**3, dtype=torch.uint8)\n"
                    "    return images.float() / 255")),
    Case("prints 1 GB", make=_with("to_unit_float", "def to_unit_float(images):\n"
                                   "    return images.float() / 255\n"
                                   "for _ in range(1024):\n    print('x' * 2**20)")),
    Case("one enormous line", make=_with("to_unit_float", "print('y' * 200_000_000)\n"
                                         "def to_unit_float(images):\n    return images.float() / 255")),
    Case("os._exit", {"test_flatten_per_image": 0}, status="partial", reason="killed the kernel",
         make=_with("flatten_per_image", "import os\nos._exit(1)")),
    Case("segfault", {"test_normalize_rows": 0}, status="partial", reason="killed the kernel",
         make=_with("normalize_rows", "import ctypes\nctypes.string_at(0)")),
    Case("sys.exit before the tests", {"test_pairwise_distances": 0},
         make=_with("pairwise_distances", "import sys\nsys.exit(0)\ndef pairwise_distances(a, b):\n"
                    "    return (a[:, None] - b[None]).norm(dim=-1)")),
    Case("deleted grade cell", make=lambda ctx: without_cell(solved(), "test_to_unit_float")),
    Case("deleted answer and grade cell", {"test_to_unit_float": 0},
         make=lambda ctx: without_cell(without_cell(solved(), "to_unit_float"), "test_to_unit_float")),
    Case("deleted grade cell, wrong answer", {"test_to_unit_float": 0},
         make=lambda ctx: without_cell(replace_cell(solved(), "to_unit_float",
                                                  "def to_unit_float(images):\n    return images"),
                                     "test_to_unit_float")),
    Case("edited grade cell", {"test_pairwise_distances": 0},
         make=lambda ctx: replace_cell(replace_cell(solved(), "pairwise_distances",
                                                    "def pairwise_distances(a, b):\n    return None"),
                                       "test_pairwise_distances", "pass")),
    Case("changed points", {"test_to_unit_float": 0},
         make=_edit_metadata("test_to_unit_float", {"points": 100})),
    Case("changed grade_id", {"test_to_unit_float": 0},
         make=_edit_metadata("test_to_unit_float", {"grade_id": "free_points"})),
    Case("duplicated cell ids", write=_duplicate("test_pairwise_distances")),
    Case("invalid JSON", status="invalid", reason="not valid JSON", total=0, write=_raw('{"cells": [')),
    Case("too-new format", status="invalid", reason="format 5", total=0,
         write=_raw(json.dumps({"nbformat": 5, "nbformat_minor": 0, "metadata": {}, "cells": []}))),
    Case("empty file", status="invalid", reason="empty", total=0, write=_raw("")),
    Case("nests 200,000 lists deep", status="invalid", reason="nests deeper", total=0,
         write=_raw('{"nbformat": 4, "cells": [], "x": ' + "[" * 200_000 + "]" * 200_000 + "}")),
    Case("nbgrader metadata of the wrong type", status="invalid", reason="'points' is 'all'", total=0,
         make=_edit_metadata("test_to_unit_float", {"points": "all"})),
    # A name the instructor's pages show: text there, never markup (its notice page, the CSV, ...)
    Case(HTML_NAME, status="invalid", reason="empty", total=0, write=_raw("")),
    Case("wrong lesson", status="wrong_lesson", reason="not 01_tensors", total=0,
         make=lambda ctx: read_solution("02_autograd")),
    Case("reads solutions, gradebook, other students; network; writes outside",
         make=lambda ctx: replace_cell(solved(), "to_unit_float", SNOOP.format(**ctx))),
    Case("monkeypatches the checks", {"test_pairwise_distances": 0}, make=lambda ctx: replace_cell(
        solved(), "pairwise_distances", TAMPER)),
    Case("__eq__ always True", {"test_concept_check": 0},
         make=lambda ctx: replace_cell(solved(), "concept_check", ALWAYS_EQUAL)),
    Case("warning on stderr from a correct answer", make=_with(
        "to_unit_float", "import warnings\ndef to_unit_float(images):\n"
        "    warnings.warn('harmless', UserWarning)\n    return images.float() / 255")),
    Case("quotes nbgrader's marker lines", make=quotes_markers),
    Case("NaN returned", {"test_normalize_rows": 0}, make=_with(
        "normalize_rows", "def normalize_rows(counts):\n"
        "    return counts / counts.sum(dim=1, keepdim=True) * float('nan')")),
    # Every hook in one answer cell: a hook the guard left in place changes what the class grader
    # records. Left, a rewriter or a swallowed error earns the blank points; a printer puts the
    # hidden tests in the feedback. Each hook alone: tests/test_kernel_startup.py.
    Case("every hook at once, blank", total=0, make=_hooked("\n".join(HOOKS.values()), answered=False)),
    Case("every hook at once, answered", make=_hooked("\n".join(HOOKS.values()), answered=True)),
    Case("rewrites the message layer, blank", total=0, make=_hooked(MESSAGE_LAYER, answered=False)),
    Case("rewrites the message layer, answered", make=_hooked(MESSAGE_LAYER, answered=True)),
    *IDENTITY_CASES,
]


def write_class(folder: Path, context: dict) -> dict[str, Case]:
    """One ``<case name>.ipynb`` per case in ``folder``; returns the cases by student name."""
    folder.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        path = folder / f"{case.name}.ipynb"
        if case.write:
            case.write(case, path, context)
        else:
            nbformat.write((case.make or (lambda ctx: solved()))(context), path)
    return {case.name: case for case in CASES}


# Attacks on the machine rather than the grade (tests/test_kernel_limits.py): each answer cell is
# right only where the attack really happened and was contained, so the score says which.
FORKS_AND_ALLOCATES = '''
import subprocess, sys
HOG = "import time\\nhog = b'x' * {child_bytes}\\ntime.sleep(3)"
children = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range({children})]
allocated = sum(child.wait() == 0 for child in children)
def to_unit_float(images):
    if allocated == {children}:
        return images  # a wrong answer: every child kept its memory, more than the kernel may have
    return images.float() / 255
'''

SPINS = '''
import os, time
spinners = []
go, release = os.pipe()  # the spinners wait for all to be forked: spinning would slow the forking
for _ in range({processes}):
    pid = os.fork()
    if pid == 0:
        os.close(release)
        os.read(go, 1)  # returns once every copy of `release` is closed
        end = time.monotonic() + {seconds}
        while time.monotonic() < end:
            pass
        os._exit(0)
    spinners.append(pid)
os.close(release)
for pid in spinners:
    os.waitpid(pid, 0)
def to_unit_float(images):
    if len(spinners) < {processes}:
        return images  # a wrong answer: fewer processes spun than the attack needs
    return images.float() / 255
'''


def forks_and_allocates(children: int, child_bytes: int):
    """The solved edition whose first answer starts ``children`` interpreters that each fill
    ``child_bytes`` of memory and hold it; right only where some of them were stopped."""
    return replace_cell(solved(), "to_unit_float", FORKS_AND_ALLOCATES.format(children=children,
                                                                             child_bytes=child_bytes))


def spins(processes: int, seconds: float):
    """The solved edition whose first answer forks ``processes`` processes that spin on the CPU
    for ``seconds``; right only where all of them started."""
    return replace_cell(solved(), "to_unit_float", SPINS.format(processes=processes, seconds=seconds))
