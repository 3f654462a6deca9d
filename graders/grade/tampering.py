"""Code that reaches for the grader's machinery, found by reading a submission: nothing of it runs.

A student's code can rewrite whatever runs in its kernel, the checks and the kernel's message layer
included. What is found here decides no point: the submission is graded like any other, and the
finding is a lead for the instructor (``grades.csv``'s ``tampering`` column, the item analysis).
What the released edition's own code does (its imports, its examples) is never a finding.

What counts, read from the syntax of every code cell that is not an instructor's grade cell:
- a name that reaches the machinery (:data:`REACHES`): the kernel's message layer, IPython's shell,
  audit and trace hooks, frames, the garbage collector's object lists, raw memory, the grader's
  ``COURSE_*`` variables, code built at run time;
- an assignment, ``setattr`` or ``delattr`` on an imported module's attribute (a rewritten
  ``torch.testing.assert_close``, a check replaced in its module, ``sys.displayhook``);
- a class that answers comparisons or torch's dispatch itself (``__eq__``, ``__torch_function__``…);
- a string naming any of these (``getattr(sys, "addaudithook")``).
"""

import ast
from pathlib import Path

import nbformat

from graders.nbgrader_adapter import is_grade_cell, is_solution_cell
from graders.release.translation import python_body

# dotted name (or its first parts) → what it reaches for, in an instructor's words
REACHES = {
    "jupyter_client": "the kernel's message layer", "ipykernel": "the kernel's message layer",
    "zmq": "the kernel's message layer", "get_ipython": "IPython's shell (hooks, transformers)",
    "IPython": "IPython's shell (hooks, transformers)", "sys.addaudithook": "an audit hook",
    "sys.settrace": "a trace hook", "sys.setprofile": "a trace hook", "threading.settrace": "a trace hook",
    "sys._getframe": "the callers' frames", "inspect.currentframe": "the callers' frames",
    "inspect.stack": "the callers' frames", "inspect.getouterframes": "the callers' frames",
    "gc.get_objects": "every object alive", "gc.get_referrers": "every object alive",
    "gc.get_referents": "every object alive", "ctypes": "raw memory", "builtins": "Python's builtins",
    "sys.modules": "the loaded modules", "sys.displayhook": "how results are shown",
    "sys.excepthook": "how errors are shown", "importlib": "code built at run time",
    "exec": "code built at run time", "eval": "code built at run time", "compile": "code built at run time",
    "__import__": "code built at run time", "os.environ": "the environment (the grader's COURSE_*)",
}
# Switches torch documents for users to set (TF32, cuDNN's autotuner): setting one rewrites nothing.
SETTINGS = ("torch.backends.",)
ANSWERS_ITSELF = {"__eq__", "__ne__", "__bool__", "__torch_function__", "__torch_dispatch__",
                  "__instancecheck__", "__subclasscheck__", "__getattribute__"}
# A string that names one of these is a reach too (``getattr(sys, "addaudithook")``): the names no
# prose or label would hold.
NAMED_IN_STRINGS = ("addaudithook", "settrace", "setprofile", "_getframe", "currentframe",
                    "getouterframes", "get_objects", "get_referrers", "get_referents", "displayhook",
                    "excepthook", "jupyter_client", "ipykernel", "COURSE_", *sorted(ANSWERS_ITSELF))


def _dotted(node, aliases: dict) -> str:
    """``a.b.c`` for an attribute chain on a name, the name resolved through the imports."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _module_attribute(node, aliases: dict, whole: bool = False) -> str:
    """The dotted name of ``node`` when it is an attribute of an imported module (or the imported
    name itself, ``whole``), ``""`` otherwise; torch's documented switches are no rewriting."""
    root = node
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or root.id not in aliases or (node is root and not whole):
        return ""
    name = _dotted(node, aliases)
    return "" if name.startswith(SETTINGS) else name


def _reached(name: str) -> str:
    """What ``name`` reaches for, ``""`` when nothing: the longest entry of REACHES it starts with."""
    for prefix in sorted(REACHES, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return REACHES[prefix]
    return ""


def _imports(tree) -> dict:
    """The module names bound by ``import``s: local name → dotted module (or module.attribute)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.partition(".")[0]] = \
                    alias.name if alias.asname else alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _parsed(source: str):
    """A cell's syntax tree (IPython's magics and shell lines left out), ``None`` if it has none."""
    body = python_body(source)
    try:
        return None if body is None else ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _findings(tree, aliases: dict) -> set[tuple[str, str]]:
    """``(what it reaches for, the code that does)`` in one cell, its names resolved through the
    notebook's imports (``aliases``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
            found |= {(what, f"import {name}") for name in names if (what := _reached(name))}
        elif isinstance(node, ast.Name | ast.Attribute):
            name = _dotted(node, aliases)
            if what := _reached(name):
                found.add((what, name))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            found |= {("a module rewritten", f"{name} = …") for target in targets
                      if isinstance(target, ast.Attribute) and (name := _module_attribute(target, aliases))}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("setattr", "delattr") and node.args and \
                (name := _module_attribute(node.args[0], aliases, whole=True)):
            found.add(("a module rewritten", f"{node.func.id}({name}, …)"))
        elif isinstance(node, ast.FunctionDef) and node.name in ANSWERS_ITSELF:
            found.add(("an object that answers comparisons or torch itself", f"def {node.name}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                any(word in node.value for word in NAMED_IN_STRINGS):
            found.add(("a name of the machinery, in a string", repr(node.value[:60])))
    return found


def _notebook_findings(path: Path) -> set[tuple[str, str]]:
    """What the code a student may have written reaches for: every code cell but the instructor's
    grade cells (nbgrader puts those back before grading), whose imports still name modules."""
    cells = [(cell, _parsed(cell.source)) for cell in nbformat.read(path, 4).cells
             if cell.cell_type == "code"]
    aliases = {}
    for _, tree in cells:
        aliases |= _imports(tree) if tree else {}
    return {found for cell, tree in cells if tree and (is_solution_cell(cell) or not is_grade_cell(cell))
            for found in _findings(tree, aliases)}


def findings(notebook: Path, released: Path) -> list[str]:
    """What ``notebook``'s code reaches for that ``released`` (the edition it started from) does
    not: one line each, ``what: the code``, sorted."""
    try:
        submitted, template = _notebook_findings(notebook), _notebook_findings(released)
    except Exception:  # an unreadable file is the validation's to report, not this lead's
        return []
    return sorted(f"{what}: {code}" for what, code in submitted - template)
