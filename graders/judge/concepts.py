"""The concept questions' verdict, decided by the judge: whose draw is graded (from who submitted
and who is in the class, as ``course grade`` knows them, never the kernel), which answers are right
(against the reference's truths, read from the lesson's source), and the points.

The kernel only sends the notebook's ``ANSWERS`` and ``STUDENT_ID`` as plain data
(:mod:`graders.judge.wire`); the rules are the lesson's own, :mod:`graders.lesson_checks.questions`
and :mod:`graders.lesson_checks.identity`, run here. A notebook whose data never arrives, or arrives
as something other than plain data, earns nothing for the cell, and the verdict says why.
"""

import ast
import dataclasses
from dataclasses import dataclass

import torch

from graders.judge.wire import Refused
from graders.lesson_checks import questions
from graders.lesson_checks.identity import whose_draw

# What the kernel is asked for: the names the concept cells read.
NAMES = ["ANSWERS", "STUDENT_ID"]
WORDS = {
    "es": {"no_data": "El juez no recibió las respuestas de este cuaderno ({why}): la celda no puntúa.",
           "refused": "{name} no es un dato simple ({kind}): el juez solo acepta números, textos, "
                      "tuplas, listas, dicts, dtypes y tensores.",
           "by_judge": "Calificado por el juez del curso, fuera de tu kernel."},
    "en": {"no_data": "The judge did not receive this notebook's answers ({why}): the cell earns nothing.",
           "refused": "{name} is not plain data ({kind}): the judge accepts numbers, strings, tuples, "
                      "lists, dicts, dtypes and tensors only.",
           "by_judge": "Graded by the course's judge, outside your kernel."},
}


@dataclass(frozen=True)
class ConceptCell:
    """A lesson's concept grade cell: its id, its check module and the reference's truths."""

    grade_id: str
    module: str
    truths: dict


@dataclass(frozen=True)
class Verdict:
    """The cell's points, whose draw was graded (``grades.csv``'s columns), and what to tell."""

    score: float
    draw: dict
    lines: list


def concept_cell(source_cells) -> ConceptCell | None:
    """The concept grade cell of a lesson's source (nbgrader's ``source/``: hidden tests in place),
    read without running it: the module it imports as ``lesson`` and its ``TRUTHS`` literal."""
    for cell in source_cells:
        text = cell.source
        if cell.cell_type != "code" or "grade_concepts(" not in text:
            continue
        tree = ast.parse(text)
        module = next(f"{node.module}.{alias.name}" for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) for alias in node.names if alias.asname == "lesson")
        truths = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "TRUTHS" for t in node.targets))
        # the instructor's own literal: dtypes are torch's attributes, nothing else is named
        value = eval(compile(ast.Expression(truths), "TRUTHS", "eval"), {"__builtins__": {}, "torch": torch})
        return ConceptCell(cell.metadata["nbgrader"]["grade_id"], module, value)
    return None


def verdict(cell: ConceptCell, values: dict | None, why: str, submitter: list[str],
            roster: list[list[str]], points: float, language: str) -> Verdict:
    """The cell's verdict from the kernel's ``values`` (``None`` when none arrived, and ``why``),
    graded on the draw :func:`whose_draw` decides for ``submitter`` among ``roster``."""
    words = WORDS[language]
    written = values.get("STUDENT_ID") if values is not None else None
    decided = whose_draw(written if isinstance(written, str) else "", submitter, roster)
    drawn = questions.draw(cell.module, decided.identity)
    record = {**dataclasses.asdict(decided), "questions": drawn}
    if values is None:
        return Verdict(0.0, record, [words["no_data"].format(why=why)])
    answers = values.get("ANSWERS")
    refused = [(name, value.kind) for name, value in values.items() if isinstance(value, Refused)]
    if isinstance(answers, dict):
        refused += [(f"ANSWERS[{qid!r}]", value.kind) for qid, value in answers.items()
                    if isinstance(value, Refused)]
    lines = [words["refused"].format(name=name, kind=kind) for name, kind in refused]
    earned, marks = questions.score(cell.module, answers if isinstance(answers, dict) else {}, drawn,
                                    cell.truths, points)
    said = questions.WORDS[language]
    if decided.status != "own":
        lines.append(said[decided.status].format(named=repr(decided.named), who=repr(decided.identity)))
    lines.append(said["graded"].format(who=repr(decided.identity),
                                       **{mark: ", ".join(ids) or "-" for mark, ids in marks.items()}))
    return Verdict(earned, record, [*lines, words["by_judge"]])
