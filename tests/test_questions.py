"""Concept questions of one's own: every pool is sound, its hidden answers are right, the draw is the
student's, guessing earns nothing, and the grader grades the right student's draw."""

import random
import re
import sqlite3
import warnings

import pytest
import torch
from lesson_files import LESSONS, hidden_answers

from course.settings import LANGUAGES
from graders.checks import CheckFailed
from graders.lesson_checks import identity, questions
from graders.lesson_checks.identity import Draw, whose_draw
from graders.lesson_checks.questions import draw, grade_concepts, is_right, pool, score
from graders.lessons import lesson_names

POOLED = [lesson for lesson in LESSONS
          if (questions.QUESTIONS / f"{lesson_names(lesson).check_module}.toml").exists()]


def _name(lesson: str) -> str:
    """The lesson's check module (``tensors`` for ``01_tensors``)."""
    return f"graders.lesson_checks.{lesson_names(lesson).check_module}"


@pytest.mark.parametrize("lesson", POOLED)
def test_a_pool_holds_three_times_the_questions_asked_in_both_languages(lesson):
    lesson_pool = pool(_name(lesson))
    assert len(lesson_pool.questions) >= 3 * lesson_pool.ask
    for question in lesson_pool.questions.values():
        assert question.kind in questions.KINDS, question.id
        assert all(question.text[lang].strip() for lang in LANGUAGES), question.id
        assert (len(question.choices) >= 3) == (question.kind == "choice"), f"{question.id}: >= 3 choices"


@pytest.mark.parametrize("lesson", POOLED)
def test_the_hidden_answers_answer_every_question_and_the_reference_agrees(lesson):
    reference, truths = hidden_answers(lesson)
    questions_ = pool(_name(lesson)).questions
    assert set(truths) == set(questions_) == set(reference)
    for qid, question in questions_.items():
        assert questions.as_answer(question, truths[qid]) is not None, f"{qid}: not a {question.kind}"
        assert is_right(question, reference[qid], truths[qid]), qid


@pytest.mark.parametrize("lesson", POOLED)
def test_a_probed_answer_is_what_the_code_computes(lesson):
    """At each of the sizes a formula answer is compared at (or once, for a question without
    symbols), the code's probe has the hidden answer's value."""
    _, truths = hidden_answers(lesson)
    for qid, question in pool(_name(lesson)).questions.items():
        if not question.probe:
            continue
        for sizes in question.sizes() if question.symbols else [{}]:
            namespace = {"torch": torch, **sizes}
            with warnings.catch_warnings():  # a question may be about the warning a bug gives
                warnings.simplefilter("ignore")
                exec(question.code, namespace)
            probed = eval(question.probe, namespace)
            if question.symbols and question.kind in questions.FORMULA_FORMS:
                assert questions.is_right_at(question, probed, truths[qid], sizes), \
                    f"{qid} at {sizes}: the code gives {probed}, the hidden answer is {truths[qid]}"
            else:
                assert is_right(question, probed, truths[qid]), qid


@pytest.mark.parametrize("lesson", POOLED)
def test_no_question_is_answered_by_pasting_its_code(lesson):
    """A question's code leaves sizes open (its symbols): pasted into a cell as it is, it stops at
    the first one, printing nothing that answers."""
    for qid, question in pool(_name(lesson)).questions.items():
        if not question.code:
            continue
        assert question.symbols, f"{qid}: its code runs as it is; leave sizes open (symbols)"
        with pytest.raises(NameError) as raised:
            exec(question.code, {"torch": torch})
        assert raised.value.name in question.symbols, f"{qid}: stopped at {raised.value.name}, not a symbol"


def test_a_formula_answer_is_right_in_any_equivalent_form_and_nothing_else_runs():
    shape = questions.Question("flat", "shape", {}, symbols=("n", "c", "h", "w"))
    assert all(is_right(shape, form, ("n", "c * h * w"))
               for form in [("n", "c*h*w"), ["n", "w * h * c"], ("n", "(c*h)*w")])
    assert not any(is_right(shape, form, ("n", "c * h * w"))
                   for form in [("n", "c*h"), ("c * h * w", "n"), (16, 2352), ("n", "c*h*w", 1)])
    integer = questions.Question("count", "int", {}, symbols=("n",))
    assert is_right(integer, "3 * n**2", "3*n*n") and not is_right(integer, 12, "3*n*n")
    assert questions.as_answer(integer, "n / 7") is None  # not an integer at every size
    batches = questions.Question("batches", "int", {}, symbols=("n", "b"))
    assert not is_right(batches, "n // b + 1", "(n + b - 1) // b")  # wrong where b divides n
    number = questions.Question("loss", "float", {}, symbols=("k",))
    assert is_right(number, "log(k)", "log(k)") and is_right(number, "1/k", "k**-1")
    for hostile in ["__import__('os').system('true')", "log.__class__", "(k**4)**4**4", "9**9**9**9",
                    "exp(exp(exp(k)))", "x", "k" * 600, "open('f')", True, None, {"k": 1}]:
        assert questions.as_answer(number, hostile) is None, hostile


@pytest.mark.parametrize("lesson", POOLED)
def test_guessing_earns_nothing_on_average(lesson):
    """Over 500 students, a constant answer earns nothing and random answers almost nothing."""
    name = _name(lesson)
    lesson_pool, (_, truths) = pool(name), hidden_answers(lesson)
    choices = sorted({c for q in lesson_pool.questions.values() for c in q.choices})
    constants = [None, 0, 1, True, False, (1,), 1.0, torch.float32, *choices]
    rng = random.Random(0)
    for answer in constants:
        earned = [score(name, {q: answer for q in lesson_pool.questions}, draw(name, f"s{i}"), truths, 2)[0]
                  for i in range(500)]
        assert sum(earned) / len(earned) <= 0.02, f"always answering {answer!r} earns {sum(earned) / 500:.3f}"
    earned = [score(name, {q: rng.choice(constants) for q in lesson_pool.questions}, draw(name, f"s{i}"),
                    truths, 2)[0] for i in range(500)]
    assert sum(earned) / len(earned) <= 0.05


def test_the_draw_is_the_students_and_spread_over_the_pool():
    name = _name(POOLED[0])
    lesson_pool = pool(name)
    assert draw(name, "Ana García") == draw(name, "  ana   GARCÍA ")
    assert draw(name, "ana") != draw(name, "ana2")
    seen = {qid for i in range(200) for qid in draw(name, f"student {i}")}
    assert seen == set(lesson_pool.questions)
    assert all(len(set(draw(name, f"s{i}"))) == lesson_pool.ask for i in range(50))


def test_every_form_of_a_right_answer_is_accepted_and_no_other_kind():
    shape, number, dtype, choice = (questions.Question("q", kind, {}, choices=("a", "b", "c"))
                                    for kind in ("shape", "float", "dtype", "choice"))
    integer = questions.Question("q", "int", {})
    assert all(is_right(shape, form, (2, 3)) for form in [(2, 3), [2, 3], torch.Size([2, 3])])
    assert not any(is_right(shape, form, (2, 3)) for form in [(3, 2), "(2, 3)", (2.0, 3.0), (True, 3)])
    assert all(is_right(integer, form, 12) for form in [12, 12.0, torch.tensor(12)])
    assert not any(is_right(integer, form, 1) for form in [True, "1", 1.5])
    assert is_right(number, 4.5001, 4.5) and not is_right(number, 4.6, 4.5)
    assert all(is_right(dtype, form, torch.float32)
               for form in [torch.float32, torch.float, "float32", "torch.float32"])
    assert not is_right(dtype, torch.float64, torch.float32)
    assert is_right(choice, " B ", "b") and not is_right(choice, "d", "b")


def test_a_wrong_answer_costs_what_a_right_one_earns_and_never_below_zero():
    name = _name(POOLED[0])
    _, truths = hidden_answers(POOLED[0])
    drawn = draw(name, "ana")
    right = {qid: truths[qid] for qid in drawn}
    assert score(name, right, drawn, truths, 2)[0] == 2
    two_wrong = {**right, drawn[0]: "wrong", drawn[1]: "wrong"}
    assert score(name, two_wrong, drawn, truths, 2)[0] == round(2 * 1 / len(drawn), 2)
    assert score(name, {q: "wrong" for q in drawn}, drawn, truths, 2) == (0, {"right": [], "wrong": drawn,
                                                                               "blank": []})


CLASS = [["ana", "Ana García", "1001"], ["ben", "Ben Ode"]]


@pytest.mark.parametrize(("written", "submitter", "expected"), [
    ("", None, Draw("", "own")),
    ("Ana García", CLASS[0], Draw("Ana García", "own")),
    ("1001", CLASS[0], Draw("1001", "own")),
    ("", CLASS[0], Draw("ana", "submitter")),
    ("ben ode", CLASS[0], Draw("ana", "another_student", "ben")),
    ("Anna Garcia", CLASS[0], Draw("Anna Garcia", "unknown", "Anna Garcia")),
])
def test_whose_draw_is_graded(written, submitter, expected):
    assert whose_draw(written, submitter, CLASS) == expected


def test_without_a_grader_the_hub_user_is_the_student(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "ben")
    assert whose_draw("", None, []) == Draw("ben", "own")
    assert whose_draw("Ana", None, []) == Draw("Ana", "own")


def test_stock_nbgrader_names_the_submitter_and_the_class(tmp_path, monkeypatch):
    """Stock ``nbgrader autograde`` runs a notebook in <course>/autograded/<student>/<lesson>."""
    for student in ("ana", "ben"):
        (tmp_path / "submitted" / student / "01_tensors").mkdir(parents=True)
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        db.execute("CREATE TABLE student (id, first_name, last_name, email)")
        db.execute("INSERT INTO student VALUES ('cruz', 'Cruz', 'Ruiz', 'cruz@uni.es')")
    here = tmp_path / "autograded" / "ana" / "01_tensors"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert identity.grader_knowledge() == (None, [])
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    submitter, roster = identity.grader_knowledge()
    assert submitter == ["ana"] and ["cruz", "Cruz Ruiz", "cruz@uni.es"] in roster and ["ben"] in roster


def test_stock_nbgrader_grades_a_copied_notebook_on_its_submitters_draw(monkeypatch, capsys, english):
    name = _name(POOLED[0])
    _, truths = hidden_answers(POOLED[0])
    anas = {qid: truths[qid] for qid in draw(name, "ana")}
    monkeypatch.setattr(questions, "grader_knowledge", lambda: (CLASS[0], CLASS))
    assert grade_concepts(name, anas, "ana", truths, 2) == 2
    monkeypatch.setattr(questions, "grader_knowledge", lambda: (CLASS[1], CLASS))
    capsys.readouterr()
    copied = grade_concepts(name, anas, "ana", truths, 2)
    overlap = set(draw(name, "ana")) & set(draw(name, "ben"))
    assert copied == round(2 * len(overlap) / 5, 2)
    assert "another student of the class" in capsys.readouterr().out


def test_the_visible_check_asks_for_the_draw_in_the_editions_language(spanish, monkeypatch):
    """A student's run wants every drawn question, each in its form; a grading run of another
    student's notebook counts a missing one as unanswered."""
    name = _name(POOLED[0])
    drawn = draw(name, "ana")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with spanish(), pytest.raises(CheckFailed) as caught:
        questions.check_concepts(name, dict.fromkeys(drawn[1:]), "ana")
    assert "faltan preguntas de tu sorteo en ANSWERS" in str(caught.value) and "pista:" in str(caught.value)
    with spanish(), pytest.raises(CheckFailed, match="no tiene la forma que se pide"):
        questions.check_concepts(name, {**dict.fromkeys(drawn), drawn[0]: object()}, "ana")
    monkeypatch.setattr(questions, "grader_knowledge", lambda: (CLASS[1], CLASS))
    questions.check_concepts(name, dict.fromkeys(drawn), "ana")


def test_the_questions_shown_are_the_draw_with_a_template_to_fill_in(capsys, monkeypatch):
    name = _name(POOLED[0])
    monkeypatch.delenv("JUPYTERHUB_USER", raising=False)
    questions.show_questions(name, "ana")
    shown = capsys.readouterr().out
    assert shown.startswith("Questions drawn for 'ana'")
    template = shown[shown.index("ANSWERS = {"):]
    namespace = {}
    exec(template, namespace)
    assert list(namespace["ANSWERS"]) == draw(name, "ana")
    questions.show_questions(name, "")
    assert "You have not written who you are yet" in capsys.readouterr().out
    monkeypatch.setenv("JUPYTERHUB_USER", "ben")
    questions.show_questions(name, "")
    assert capsys.readouterr().out.startswith("Questions drawn for JupyterHub user 'ben'")


OPTION = re.compile(r"\(([a-e])\)\s*(.*?)(?=;?\s*(?:or\s+|o\s+)?\([a-e]\)\s|$)", re.S)
REASON = re.compile(r"\b(because|since|porque|ya que|pues)\b", re.IGNORECASE)


def _options(text: str) -> dict:
    """A choice question's options as its text gives them inline: letter → option."""
    return dict(OPTION.findall(text))


def _unique(options: dict, pick) -> str | None:
    """The letter whose option's length is ``pick`` (max or min) of them all, if only one has it."""
    lengths = {letter: len(option) for letter, option in options.items()}
    best = pick(lengths.values())
    letters = [letter for letter, length in lengths.items() if length == best]
    return letters[0] if len(letters) == 1 else None


ANSWER_BLIND = {
    "the longest option": lambda options: _unique(options, max),
    "the shortest option": lambda options: _unique(options, min),
    "the option that gives a reason": lambda options: next(
        (letter for letter, option in options.items() if REASON.search(option)), None),
    **{f"always ({letter})": (lambda options, letter=letter: letter if letter in options else None)
       for letter in "abcde"},
}


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("lesson", POOLED)
def test_no_answer_blind_strategy_earns_anything_on_the_choice_questions(lesson, language):
    """A student who reads only the options' form (the longest, the shortest, the one with a reason,
    a fixed letter) and leaves every other question None earns at most 0 in expectation: over the
    pool, such a strategy is right no more often than it is wrong."""
    _, truths = hidden_answers(lesson)
    choice_questions = [q for q in pool(_name(lesson)).questions.values() if q.kind == "choice"]
    for question in choice_questions:
        assert sorted(_options(question.text[language])) == sorted(question.choices), (
            f"{question.id}: options written as (a) …; (b) …; (c) …")
    for strategy, pick in ANSWER_BLIND.items():
        answers = [(pick(_options(q.text[language])), truths[q.id]) for q in choice_questions]
        right = sum(answer == truth for answer, truth in answers if answer)
        wrong = sum(answer != truth for answer, truth in answers if answer)
        assert right <= wrong, f"{language}: {strategy} is right {right} times and wrong {wrong}"
