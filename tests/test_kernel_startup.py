"""The kernel's guard, in a real kernel: each attack on the execution path is undone before the next cell."""

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from graders.kernel_startup import KERNEL_ARGUMENTS

pytestmark = pytest.mark.kernel

# (attack, probe, what the probe must print): every probe runs right after its attack.
ATTACKS = {
    "input transformer": ("get_ipython().input_transformers_cleanup.append(lambda lines: ['pass\\n'])",
                          "print('probe', 1 + 1)", "probe 2"),
    "post transformer": ("get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'])",
                         "print('probe', 2 + 1)", "probe 3"),
    "AST transformer": ("import ast\nclass Empty(ast.NodeTransformer):\n"
                        "    def visit_Module(self, node):\n        node.body = []\n        return node\n"
                        "get_ipython().ast_transformers.append(Empty())",
                        "print('probe', 3 + 1)", "probe 4"),
    "pre_run_cell spy": ("get_ipython().events.register('pre_run_cell', "
                         "lambda info: print('LEAK', info.raw_cell))",
                         "print('probe', 'quiet')", "probe quiet"),
    "post_run_cell rewriter": ("def hide(result):\n    result.error_in_exec = None\n    print('LEAK')\n"
                               "get_ipython().events.register('post_run_cell', hide)",
                               "print('probe', 'post')", "probe post"),
    "custom exception handler": ("get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
                                 "raise KeyError('probe-custom')", "KeyError: 'probe-custom'"),
    "sys.displayhook": ("import sys\nsys.displayhook = lambda value: None", "'probe ' + 'shown'",
                        "probe shown"),
    "builtins": ("import builtins\nbuiltins.abs = lambda x: 0", "print('probe', abs(-3))", "probe 3"),
    "showtraceback on the instance": ("get_ipython().showtraceback = lambda *a, **k: None",
                                      "raise KeyError('probe-tb')", "KeyError: 'probe-tb'"),
    "kernel's do_execute": ("k = get_ipython().kernel\norig = k.do_execute\n"
                            "def evil(code, *a, **kw):\n    return orig('pass', *a, **kw)\n"
                            "k.do_execute = evil",
                            "print('probe', 'executed')", "probe executed"),
}


# A check module is imported by the guard the first time a cell asks for it (each attack targets
# a lesson whose module no earlier cell imported): whatever the cell that first imports it does,
# the next cell gets the genuine module.
FIRST_IMPORT_ATTACKS = {
    "patched in the cell that first imports it": (
        "import graders.lesson_checks.tensors as mine\n"
        "mine.check_to_unit_float = lambda *a, **k: None\nmine.HINTS = {}\nmine.LEAK = True",
        "from graders.lesson_checks import tensors as lesson\n"
        "print('probe', lesson.check_to_unit_float.__name__, bool(lesson.HINTS), hasattr(lesson, 'LEAK'))",
        "probe check_to_unit_float True False"),
    "a fake module in sys.modules": (
        "import sys, types\nfake = types.ModuleType('graders.lesson_checks.autograd')\nfake.LEAK = True\n"
        "sys.modules['graders.lesson_checks.autograd'] = fake",
        "from graders.lesson_checks import autograd as lesson\n"
        "print('probe', hasattr(lesson, 'LEAK'), lesson.__file__.endswith('autograd.py'))",
        "probe False True"),
    "a __getattr__ on the package": (
        "import types\nimport graders.lesson_checks as package\n"
        "package.__getattr__ = lambda name: types.SimpleNamespace(__name__='LEAK')",
        "from graders.lesson_checks import scale as lesson\nprint('probe', lesson.__name__)",
        "probe graders.lesson_checks.scale"),
    "a finder ahead of the guard's": (
        "import importlib.abc, importlib.util, sys\n"
        "class Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        return importlib.util.spec_from_loader(name, self) if 'lesson_checks.' in name else None\n"
        "    def create_module(self, spec):\n        return None\n"
        "    def exec_module(self, module):\n        module.LEAK = True\n"
        "sys.meta_path.insert(0, Fake())\nimport graders.lesson_checks.modules",
        "from graders.lesson_checks import modules as lesson\n"
        "print('probe', hasattr(lesson, 'LEAK'), hasattr(lesson, 'HINTS'))",
        "probe False True"),
    "the checks replaced before its import": (
        "import sys, types\nimport graders\nfake = types.ModuleType('graders.checks')\n"
        "sys.modules['graders.checks'] = graders.checks = fake\n"
        "import graders.lesson_checks.mixed_precision",
        "import graders.checks\nfrom graders.lesson_checks import mixed_precision as lesson\n"
        "print('probe', lesson.checks is graders.checks, hasattr(lesson.checks, 'check_close'))",
        "probe True True"),
}


def _run(cells):
    nb = new_notebook(cells=[new_code_cell(source) for source in cells])
    NotebookClient(nb, timeout=60, allow_errors=True, kernel_name="python3",
                   extra_arguments=list(KERNEL_ARGUMENTS)).execute()
    return nb


def _text(cell) -> str:
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        parts.append(str(output.get("data", {}).get("text/plain", "")))
        if output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "".join(parts)


def test_every_attack_is_undone_before_the_next_cell():
    cells = [source for attack, probe, _ in ATTACKS.values() for source in (attack, probe)]
    nb = _run(cells)
    for index, (name, (_, _, expected)) in enumerate(ATTACKS.items()):
        probe = nb.cells[2 * index + 1]
        text = _text(probe)
        assert "LEAK" not in text, f"{name}: the attack still ran in the next cell: {text!r}"
        assert expected in text, f"{name}: the probe printed {text!r}, expected {expected!r}"


def test_a_check_module_attacked_as_it_is_first_imported_is_undone():
    cells = [source for attack, probe, _ in FIRST_IMPORT_ATTACKS.values() for source in (attack, probe)]
    nb = _run(cells)
    for index, (name, (_, _, expected)) in enumerate(FIRST_IMPORT_ATTACKS.items()):
        text = _text(nb.cells[2 * index + 1])
        assert text.strip() == expected, f"{name}: the probe printed {text!r}, expected {expected!r}"


def test_without_the_guard_the_attacks_work():
    """The same attack in a kernel started without the guard: the probe is rewritten to nothing."""
    nb = new_notebook(cells=[new_code_cell(ATTACKS["input transformer"][0]),
                             new_code_cell(ATTACKS["input transformer"][1])])
    NotebookClient(nb, timeout=60, allow_errors=True, kernel_name="python3").execute()
    assert _text(nb.cells[1]) == ""


def test_every_figure_of_a_notebook_is_shown(monkeypatch):
    """The inline backend's display hook survives the guard, whatever backend the caller set."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    draw = "import matplotlib.pyplot as plt\nplt.plot([0, {n}])"
    nb = _run([draw.format(n=1), draw.format(n=2), draw.format(n=3)])
    assert [sum("image/png" in output.get("data", {}) for output in cell.outputs)
            for cell in nb.cells] == [1, 1, 1]
