"""Answers that do nothing, made from an answer cell's own source: what a student who only keeps the
signatures, or guesses, would submit. None of them may earn a point.

- every function returns None, 0, or its first argument (``self``, ``cls`` and ``ctx`` skipped);
- every class keeps its bases and its methods' signatures, its ``__init__`` only calls the base's,
  and its other methods do as the functions do: the "first argument" variant is an identity module;
- every dict of answers (a dict literal assigned to, or merged into, an upper-case name) answers
  all True, or all False.

Everything else in the cell (imports, constants) is kept. A cell that is not plain Python (a cell
magic) has no variant: the student edition's stub stands for it.
"""

import ast

_RECEIVERS = {"self", "cls", "ctx"}


def _first_argument(args: ast.arguments) -> ast.expr:
    names = [a.arg for a in args.posonlyargs + args.args if a.arg not in _RECEIVERS]
    return ast.Name(names[0], ast.Load()) if names else ast.Constant(None)


def _returns(kind: str):
    def body(args: ast.arguments) -> list[ast.stmt]:
        value = {"None": ast.Constant(None), "0": ast.Constant(0)}.get(kind) or _first_argument(args)
        return [ast.Return(value)]
    return body


def _base_init() -> list[ast.stmt]:
    return ast.parse("super().__init__()").body


class _DoNothing(ast.NodeTransformer):
    """Empties every function and method, and sets every answer dict's values to ``answer``."""

    def __init__(self, returns, answer):
        self.returns, self.answer = returns, answer

    def visit_FunctionDef(self, node):
        node.body = _base_init() if node.name == "__init__" else self.returns(node.args)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Dict(self, node):
        if self.answer is not None:
            node.values = [ast.Constant(self.answer) for _ in node.values]
        return node


def _answer_dicts_only(tree: ast.Module) -> list[ast.AST]:
    """The dict literals a cell assigns to, or merges into, an upper-case name."""
    found = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id.isupper()
                                                for t in stmt.targets):
            found.append(stmt.value)
        elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
              and isinstance(stmt.value.func, ast.Attribute) and isinstance(stmt.value.func.value, ast.Name)
              and stmt.value.func.value.id.isupper()):
            found.extend(stmt.value.args)
    return [node for node in found if isinstance(node, ast.Dict)]


def do_nothing_answers(source: str) -> dict[str, str]:
    """``{variant: source}`` for every do-nothing variant that differs from ``source``."""
    try:
        original = ast.parse(source)
    except SyntaxError:
        return {}
    variants = {}
    for name, returns, answer in [("returns None", _returns("None"), None),
                                  ("returns 0", _returns("0"), None),
                                  ("returns its first argument", _returns("first"), None),
                                  ("answers all True", None, True), ("answers all False", None, False)]:
        tree = ast.parse(source)
        if returns:
            for stmt in tree.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    _DoNothing(returns, None).visit(stmt)
        else:
            for node in _answer_dicts_only(tree):
                _DoNothing(None, answer).visit(node)
        changed = ast.unparse(tree)
        if changed != ast.unparse(original) and changed not in variants.values():
            variants[name] = changed
    return variants
