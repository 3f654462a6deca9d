"""Every lesson's checks keep the harness's two promises, proved over every check module.

- A check leaves torch's global random state as the student had it: it draws its inputs and
  weights from generators or inside ``checks.seeded``, and the answer it runs cannot reseed the
  notebook either (every public check is ``checks.keeps_random_state``).
- A shortcut a check switches off (``SHORTCUTS`` of its module: check name → functions) is
  unavailable under any name: the original, and an alias the student imported into the notebook's
  namespace before the check ran.

Each ``tests/test_lesson_checks_<module>.py`` lists ``CHECK_CALLS``: for every public check of its
module, how to call it with a given answer (the function, class or value the student wrote).
"""

import importlib
import inspect
import re
import sys

import pytest
import torch
from lesson_files import LESSONS, read_solution

from graders import checks
from graders.lesson_checks import lesson_modules
from graders.lessons import lesson_names
from graders.nbgrader_adapter import is_grade_cell

MODULES = {module.__name__.rpartition(".")[2]: module for module in lesson_modules()}


def _calls(name: str) -> dict:
    return importlib.import_module(f"test_lesson_checks_{name}").CHECK_CALLS


def _public_checks(module) -> list[str]:
    return sorted(name for name in getattr(module, "__all__", ()) if name.startswith("check_")
                  and inspect.isfunction(getattr(module, name)))


def _every_check():
    return [pytest.param(name, check, id=f"{name}-{check}")
            for name, module in MODULES.items() for check in _public_checks(module)]


def _every_shortcut():
    return [pytest.param(name, check, owner, attribute,
                         id=f"{name}-{check}-{getattr(owner, '__name__', owner)}.{attribute}")
            for name, module in MODULES.items()
            for check, targets in getattr(module, "SHORTCUTS", {}).items()
            for owner, attribute in targets]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_check_is_listed_public_and_callable_from_the_tests(name):
    module = MODULES[name]
    public = [n for n, value in vars(module).items() if n.startswith("check_") and inspect.isfunction(value)
              and value.__module__ == module.__name__]
    assert sorted(public) == _public_checks(module), "every check_* is in __all__, and only checks are"
    assert sorted(_calls(name)) == _public_checks(module), "CHECK_CALLS names every public check"
    assert set(getattr(module, "SHORTCUTS", {})) <= set(_public_checks(module))


@pytest.mark.parametrize("name, check", _every_check())
def test_a_check_leaves_the_global_random_state_alone(name, check):
    """The answer reseeds and draws; the check fails or passes; the student's state is untouched."""
    def reseeding_answer(*args, **kwargs):
        torch.manual_seed(1234)
        torch.rand(7)
        raise ValueError("a wrong answer")

    assert getattr(getattr(MODULES[name], check), "keeps_random_state", False), f"{check} is not kept"
    call = _calls(name)[check]   # importing a lesson's test module may draw: before the state is taken
    torch.manual_seed(2024)
    torch.rand(3)
    before = torch.get_rng_state()
    try:
        call(reseeding_answer)
    except Exception:  # noqa: BLE001  the check's verdict does not matter here, only the state after it
        pass
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("name, check, owner, attribute", _every_shortcut())
def test_a_shortcut_is_off_under_an_alias_in_the_notebook(name, check, owner, attribute, monkeypatch):
    """An answer calling the shortcut through a name imported before the check runs is refused."""
    notebook = vars(sys.modules["__main__"])
    alias = f"my_{attribute.strip('_')}"
    monkeypatch.setitem(notebook, alias, getattr(owner, attribute))
    answer = _answer_calling(alias, notebook)

    with pytest.raises((checks.CheckFailed, checks.ShortcutUsed)) as caught:
        _calls(name)[check](answer)
    assert alias in str(caught.value), str(caught.value)
    assert notebook[alias] is getattr(owner, attribute), "the alias is given back after the check"


def _answer_calling(alias: str, namespace: dict):
    """A student's function, defined in ``namespace`` as if in the notebook, that calls ``alias``."""
    source = f"def answer(*args, **kwargs):\n    return {alias}(*args, **kwargs)\n"
    code = compile(source, "<notebook>", "exec")
    scope = {}
    exec(code, namespace, scope)
    return scope["answer"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_name_a_grade_cell_takes_from_its_lesson_module_is_public(lesson):
    """Visible and hidden tests alike: ``lesson.X`` in a grade cell is in that module's ``__all__``."""
    module = MODULES[lesson_names(lesson).check_module]
    used = {name for cell in read_solution(lesson).cells if is_grade_cell(cell)
            for name in re.findall(r"\blesson\.(\w+)", cell.source)}
    assert used <= set(getattr(module, "__all__", ())), sorted(used - set(getattr(module, "__all__", ())))
