"""Concept questions of one's own, kernel side: each student answers a draw from the lesson's pool,
made from who the student is, so that one dictionary passed around a class answers no one else's.

A lesson's pool lives in ``questions/<module>.toml``: ``ask`` (how many each student answers) and
one table per question, ``[questions.<id>]``, with its ``kind`` (what an answer is: ``shape``,
``int``, ``float``, ``dtype`` or ``choice``, the last with its ``choices``), the question in ``es``
and ``en``, and, if any, the ``code`` it is about and the ``probe`` (the expression whose value it
asks for). The right answers are not here (a student receives this package): they stay in the
hidden test of the concept grade cell.

A question may name ``symbols``: numbers its code uses and never sets (sizes ``n``, ``c``…, whole
numbers from 2 up), so that the code pasted into a cell answers nothing. Its answer is then a formula
in them, a string such as ``"n * c"`` (a shape: a tuple of such formulas and numbers; ``log``,
``exp`` and ``sqrt`` allowed), compared by its values at a few drawn sizes.

Whose draw is graded is :mod:`graders.lesson_checks.identity`'s decision.

Scoring: a right answer earns one, a wrong one costs one, ``None`` (no answer) neither; the total
never goes below zero. A constant or random answer earns nothing on average.
"""

import ast
import dataclasses
import functools
import hashlib
import math
import random
import tomllib
from pathlib import Path

import torch

from course.settings import say
from graders import checks
from graders.lesson_checks.identity import (
    grader_knowledge,
    normalized,
    notebook_identity,
    whose_draw,
)

QUESTIONS = Path(__file__).with_name("questions")
KINDS = ("shape", "int", "float", "dtype", "choice")
SIZE_DRAWS = 4
POWERS_OF_TWO = (2, 4, 8, 16, 32)  # as many as a question's symbols, at most


@dataclasses.dataclass(frozen=True)
class Question:
    """One question of a pool; ``text`` is ``{"es": ..., "en": ...}``."""

    id: str
    kind: str
    text: dict
    code: str = ""
    choices: tuple = ()
    probe: str = ""
    symbols: tuple = ()

    def sizes(self) -> list[dict]:
        """The sizes a formula answer is compared at: distinct values for the symbols, drawn from 2 to
        39, then powers of two rising and falling along the symbols, where each divides the next or
        the one before (a formula with ``//`` or ``%`` that is right only when one size does not
        divide another is wrong at one of those)."""
        generator = random.Random(self.id)
        count = len(self.symbols)
        drawn = [generator.sample(range(2, 40), count) for _ in range(SIZE_DRAWS)]
        drawn += [sorted(generator.sample(POWERS_OF_TWO, count), reverse=falling)
                  for falling in (False, True) * (SIZE_DRAWS // 2)]
        return [dict(zip(self.symbols, values, strict=True)) for values in drawn]


@dataclasses.dataclass(frozen=True)
class Pool:
    ask: int
    questions: dict


@functools.cache
def pool(module: str) -> Pool:
    """The question pool of the lesson whose check module is ``module``."""
    data = tomllib.loads((QUESTIONS / f"{module.rpartition('.')[2]}.toml").read_text(encoding="utf-8"))
    questions = {qid: Question(qid, q["kind"], checks.both(q["es"], q["en"]), q.get("code", "").strip(),
                               tuple(q.get("choices", ())), q.get("probe", ""), tuple(q.get("symbols", ())))
                 for qid, q in data["questions"].items()}
    return Pool(int(data["ask"]), questions)


def draw(module: str, identity: str) -> list[str]:
    """The ids of the questions drawn for ``identity``, in the order they are asked."""
    lesson_pool = pool(module)
    seed = hashlib.sha256(f"{module.rpartition('.')[2]}\0{normalized(identity)}".encode()).digest()
    generator = random.Random(int.from_bytes(seed[:8], "big"))
    return generator.sample(sorted(lesson_pool.questions), lesson_pool.ask)


# ------------------------------------------------------------------------------------- answers
FORMS = {
    "shape": checks.both("una forma: tupla de enteros, como (2, 3)",
                         "a shape: a tuple of ints, like (2, 3)"),
    "int": checks.both("un número entero", "an integer"),
    "float": checks.both("un número", "a number"),
    "dtype": checks.both("un dtype, como torch.float32", "a dtype, like torch.float32"),
    "choice": checks.both("una de estas respuestas: {choices}", "one of these answers: {choices}"),
}
# The forms of a question with symbols: {symbols} are the numbers it leaves open, {first} one of them.
FORMULA_FORMS = {
    "shape": checks.both("una forma en función de {symbols} (enteros cualesquiera desde 2): una tupla "
                         "de fórmulas y enteros, como ('{first} + 1', 3)",
                         "a shape in terms of {symbols} (any whole numbers from 2 up): a tuple of "
                         "formulas and ints, like ('{first} + 1', 3)"),
    "int": checks.both("un entero en función de {symbols} (enteros cualesquiera desde 2): una fórmula, "
                       "como '{first} + 1'",
                       "an integer in terms of {symbols} (any whole numbers from 2 up): a formula, "
                       "like '{first} + 1'"),
    "float": checks.both("un número en función de {symbols} (enteros cualesquiera desde 2): una "
                         "fórmula, como '{first} / 3' (con log, exp y sqrt si hacen falta)",
                         "a number in terms of {symbols} (any whole numbers from 2 up): a formula, "
                         "like '{first} / 3' (with log, exp and sqrt where needed)"),
}
OPEN_NUMBERS = checks.both(" ({symbols}: enteros cualesquiera desde 2)",
                           " ({symbols}: any whole numbers from 2 up)")


def _dtype(value):
    if isinstance(value, str):
        value = getattr(torch, value.strip().removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


# What a formula may hold: numbers, the question's symbols, arithmetic and these functions.
_FORMULA_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Add,
                  ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd)
FORMULA_FUNCTIONS = {"log": math.log, "exp": math.exp, "sqrt": math.sqrt}


def _allowed(node, names) -> bool:
    """Whether ``node`` may be part of a formula in ``names``: a bounded power only, since a
    formula is arithmetic on sizes, not a computation."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in FORMULA_FUNCTIONS \
            and len(node.args) == 1 and not node.keywords
    if isinstance(node, ast.Name):
        return node.id in names or node.id in FORMULA_FUNCTIONS
    if isinstance(node, ast.Constant):
        return checks.plain_number(node.value) is not None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = node.right.operand if isinstance(node.right, ast.UnaryOp) else node.right
        return isinstance(exponent, ast.Constant) and abs(checks.plain_number(exponent.value) or 9) <= 4
    return isinstance(node, _FORMULA_NODES)


@functools.lru_cache(maxsize=4096)
def _compiled(text: str, names: frozenset):
    """The formula ``text`` in ``names``, compiled; None when it is not one."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    if not all(_allowed(node, names) for node in ast.walk(tree)):
        return None
    return compile(tree, "<formula>", "eval")


def _formula_value(text, sizes: dict):
    """The value of the formula ``text`` (a string in the symbols, or a number) at ``sizes``; None
    when it is not such a formula."""
    if not isinstance(text, str):
        return checks.plain_number(text)
    code = _compiled(text, frozenset(sizes))
    if code is None:
        return None
    # floats: too big a power overflows at once
    names = {**FORMULA_FUNCTIONS, **{name: float(size) for name, size in sizes.items()}}
    try:
        value = eval(code, {"__builtins__": {}}, names)
    except (ArithmeticError, TypeError, ValueError):
        return None
    return checks.plain_number(value)


def value_at(question: Question, value, sizes: dict):
    """A formula answer (one, or a shape's tuple of them) as its value at ``sizes``, in the form its
    kind compares (a tuple of ints, an int, a float); None when it is not one."""
    shaped = question.kind == "shape"
    if len(str(value)) > 500 or (shaped and not isinstance(value, (tuple, list, torch.Size))):
        return None
    at = [_formula_value(item, sizes) for item in value] if shaped else [_formula_value(value, sizes)]
    if any(v is None for v in at):
        return None
    if question.kind == "float":
        return at[0]
    if not all(float(v).is_integer() for v in at):
        return None
    return tuple(int(v) for v in at) if shaped else int(at[0])


def _at_sizes(question: Question, value):
    values = [value_at(question, value, sizes) for sizes in question.sizes()]
    return None if None in values else tuple(values)


def as_answer(question: Question, value):
    """``value`` in the form its kind compares (a tuple, an int, a float, a dtype, a lower-case
    choice; a formula as its values at the question's sizes), or None when it is not an answer of
    that kind."""
    if question.symbols and question.kind in FORMULA_FORMS:
        return _at_sizes(question, value)
    if question.kind == "shape":
        ok = isinstance(value, (tuple, list, torch.Size)) and all(
            isinstance(d, int) and not isinstance(d, bool) for d in value)
        return tuple(value) if ok else None
    if question.kind in ("int", "float"):
        number = checks.plain_number(value)
        if question.kind == "int" and number is not None:
            return int(number) if float(number).is_integer() else None
        return None if number is None else float(number)
    if question.kind == "dtype":
        return _dtype(value)
    if question.kind == "choice" and isinstance(value, str):
        choice = value.strip().casefold()
        return choice if choice in {c.casefold() for c in question.choices} else None
    return None


def is_right(question: Question, value, truth) -> bool:
    """Whether ``value`` answers ``question`` as ``truth`` does, in any of its kind's forms."""
    got, want = as_answer(question, value), as_answer(question, truth)
    if got is None or want is None:
        return False
    if question.symbols and question.kind in FORMULA_FORMS:  # a formula: its values at each size
        return all(_agree(question.kind, g, w) for g, w in zip(got, want, strict=True))
    return _agree(question.kind, got, want)


def is_right_at(question: Question, value, truth, sizes: dict) -> bool:
    """Whether ``value`` (a formula, or what the question's code computed) has the value of the
    formula ``truth`` at ``sizes``."""
    got, want = value_at(question, value, sizes), value_at(question, truth, sizes)
    return got is not None and want is not None and _agree(question.kind, got, want)


def _agree(kind: str, got, want) -> bool:
    if kind == "float":
        return math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-6)
    return got == want


def score(module: str, answers: dict, draw_ids: list[str], truths: dict, points: float) -> tuple[float, dict]:
    """``(points earned, {"right": [...], "wrong": [...], "blank": [...]})`` for the drawn questions."""
    questions = pool(module).questions
    marks = {"right": [], "wrong": [], "blank": []}
    for qid in draw_ids:
        value = answers.get(qid) if isinstance(answers, dict) else None
        if value is None:
            marks["blank"].append(qid)
        else:
            marks["right" if is_right(questions[qid], value, truths[qid]) else "wrong"].append(qid)
    net = len(marks["right"]) - len(marks["wrong"])
    return round(points * max(0, net) / len(draw_ids), 2), marks


# ---------------------------------------------------------------------------- in the notebook
WORDS = {
    "es": {
        "drawn": "Preguntas sorteadas para {who} ({ask} de las {total} de esta lección):",
        "hub": "el usuario {who} del JupyterHub",
        "nobody": "Aún no has escrito tu identidad: escribe en STUDENT_ID, al principio del cuaderno, "
                  "el nombre o el identificador con el que te conoce tu profesor, ejecuta esa celda y "
                  "esta otra vez. Al calificar, tus preguntas se sortean con esa identidad.",
        "answer": "respuesta",
        "template": "Copia esto en la celda de respuestas y cambia cada None por tu respuesta "
                    "(deja None si no la sabes: una respuesta equivocada resta un punto):",
        "missing": "faltan preguntas de tu sorteo en ANSWERS",
        "form": "la respuesta a {qid} no tiene la forma que se pide",
        "not_dict": "ANSWERS debe ser un dict",
        "hint": "ejecuta la celda que muestra tus preguntas y copia la plantilla que imprime; cada "
                "respuesta tiene la forma que indica su pregunta",
        "graded": "Preguntas de {who}: bien: {right}; mal: {wrong}; sin responder: {blank}.",
        "another_student": "Este cuaderno responde a las preguntas de {named}, otro estudiante de la "
                           "clase: se califican las preguntas de quien lo entrega, {who}.",
        "unknown": "Este cuaderno dice ser de {named}, que no está en la clase: se califican sus "
                   "preguntas, y tu profesor lo revisará.",
        "submitter": "Este cuaderno no escribe STUDENT_ID: se califican las preguntas de quien lo "
                     "entrega, {who}.",
    },
    "en": {
        "drawn": "Questions drawn for {who} ({ask} of this lesson's {total}):",
        "hub": "JupyterHub user {who}",
        "nobody": "You have not written who you are yet: write in STUDENT_ID, at the top of the "
                  "notebook, the name or id your instructor knows you by, run that cell and this one "
                  "again. At grading, your questions are drawn for that identity.",
        "answer": "answer",
        "template": "Copy this into the answer cell and replace each None with your answer "
                    "(leave None if you do not know: a wrong answer takes a point away):",
        "missing": "ANSWERS lacks questions of your draw",
        "form": "the answer to {qid} is not in the form asked for",
        "not_dict": "ANSWERS must be a dict",
        "hint": "run the cell that shows your questions and copy the template it prints; each answer "
                "has the form its question says",
        "graded": "Questions of {who}: right: {right}; wrong: {wrong}; unanswered: {blank}.",
        "another_student": "This notebook answers the questions of {named}, another student of the "
                           "class: the questions graded are its submitter's, {who}.",
        "unknown": "This notebook says it belongs to {named}, who is not in the class: its questions "
                   "are graded, and your instructor will look at it.",
        "submitter": "This notebook does not write STUDENT_ID: the questions graded are its "
                     "submitter's, {who}.",
    },
}


def _words() -> dict:
    return {key: say({lang: words[key] for lang, words in WORDS.items()}) for key in WORDS["en"]}


def _form(question: Question) -> str:
    symbols = ", ".join(question.symbols)
    if question.symbols and question.kind in FORMULA_FORMS:
        return say(FORMULA_FORMS[question.kind]).format(symbols=symbols, first=question.symbols[0])
    form = say(FORMS[question.kind]).format(choices=", ".join(repr(c) for c in question.choices))
    return form + say(OPEN_NUMBERS).format(symbols=symbols) if question.symbols else form


def show_questions(module: str, student_id) -> None:
    """Print the questions drawn for the notebook's student, and the answer template to copy."""
    words, lesson_pool = _words(), pool(module)
    identity = notebook_identity(student_id)
    if not identity:
        print(words["nobody"], end="\n\n")
    who = (words["hub"].format(who=repr(identity)) if identity and not str(student_id or "").strip()
           else repr(identity))
    print(words["drawn"].format(who=who, ask=lesson_pool.ask, total=len(lesson_pool.questions)), end="\n\n")
    drawn = draw(module, identity)
    for number, qid in enumerate(drawn, 1):
        question = lesson_pool.questions[qid]
        print(f"{number}. [{qid}] {say(question.text)}")
        if question.code:
            print("\n".join("       " + line for line in question.code.splitlines()))
        print(f"   {words['answer']}: {_form(question)}", end="\n\n")
    print(words["template"])
    print("ANSWERS = {\n" + "".join(f"    {qid!r}: None,\n" for qid in drawn) + "}")


def check_concepts(module: str, answers, student_id) -> None:
    """The visible part: ANSWERS answers every question of the notebook's draw, each in its form
    (``None`` for one left unanswered). It never says whether an answer is right."""
    __tracebackhide__ = True
    words = _words()
    if not isinstance(answers, dict):
        checks.fail("ANSWERS", words["not_dict"], "dict", checks.describe(answers), words["hint"])
    submitter, roster = grader_knowledge()
    drawn = draw(module, whose_draw(student_id, submitter, roster).identity)
    # A grading run may grade a draw the notebook never showed (another student's notebook): its
    # questions missing from ANSWERS count as unanswered there, not as a broken cell.
    if submitter is None and (missing := [qid for qid in drawn if qid not in answers]):
        given = ", ".join(sorted(map(str, answers))) or "{}"
        checks.fail("ANSWERS", words["missing"], ", ".join(drawn), given, words["hint"],
                    detail=", ".join(missing))
    questions = pool(module).questions
    for qid in drawn:
        if answers.get(qid) is not None and as_answer(questions[qid], answers[qid]) is None:
            checks.fail(f"ANSWERS[{qid!r}]", words["form"].format(qid=qid), _form(questions[qid]),
                        checks.describe(answers[qid]), words["hint"])


def grade_concepts(module: str, answers, student_id, truths: dict, points: float) -> float:
    """The hidden part: the score of the draw the grader decides on (:func:`whose_draw`). Prints
    whose questions were graded and how each went (never the right answers); the returned number is
    the cell's score, as nbgrader reads it. ``course grade``'s judge decides the cell again, outside
    the kernel (graders/judge/concepts.py)."""
    words = _words()
    decided = whose_draw(student_id, *grader_knowledge())
    drawn = draw(module, decided.identity)
    earned, marks = score(module, answers, drawn, truths, points)
    if decided.status != "own":
        print(words[decided.status].format(named=repr(decided.named), who=repr(decided.identity)))
    print(words["graded"].format(who=repr(decided.identity),
                                 **{mark: ", ".join(ids) or "-" for mark, ids in marks.items()}))
    return earned
