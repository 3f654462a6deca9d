"""What every grading and running kernel does before the first cell.

- nbgrader scores a grade cell with any stderr output as failed, so a harmless library warning
  would turn a correct answer into zero points: warnings are shown on stdout instead.
- :class:`ExecutionGuard` takes a snapshot of everything that stands between a cell's source and
  its graded output, and puts it back before every cell. It runs from two places: the kernel's
  handler of execute requests (before IPython transforms the cell) and IPython's ``pre_run_cell``
  event. What it restores:

  - the checks: ``graders.checks``, the package ``graders.lesson_checks`` and every per-lesson
    check module the kernel has imported (their namespaces, names added to them included, their
    classes' attributes, their entries in ``sys.modules``), ``torch.testing.assert_close``, the
    names ``checks`` and ``torch`` in the notebook, and the values of every builtin (``isinstance``,
    ``print``…). A kernel imports the check module of its own lesson only, when a cell first asks
    for it: the guard's finder, first in ``sys.meta_path``, executes its code (read when the kernel
    started, before any student code) with the checks and the builtins put back first, and takes
    its snapshot before the import returns, so no cell ever sees it patched. A check module in
    ``sys.modules`` that the finder did not load is removed before every cell;
  - IPython's input transformers (cleanup, line, token and post), AST transformers, event
    callbacks, custom exception handlers, display hook, display publisher and formatters, and
    every method of the shell, of the kernel and of their classes (``showtraceback``,
    ``run_cell``, ``do_execute``…), and the kernel's table of message handlers;
  - ``sys.displayhook``, ``sys.excepthook``, ``sys.stdout``, ``sys.stderr``, ``sys.meta_path``
    (the guard's finder first), the trace and profile functions, and ``warnings.showwarning``.

  Student code still runs in the kernel's own process. Out of reach of any in-kernel guard: a
  thread it leaves running (it can patch again between two cells), a patched method of torch or
  of other libraries (``course``'s modules included), a change to the guard's own snapshot, and a
  replaced message dispatcher below the handler table (``dispatch_shell``, the zmq streams). The
  sandbox keeps such code away from everything else, and the feedback removes any output line
  that repeats a hidden test.
"""

import builtins
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import pkgutil
import sys
import warnings

STARTUP = "import graders.kernel_startup; graders.kernel_startup.prepare()"
KERNEL_ARGUMENTS = [f"--IPKernelApp.exec_lines={STARTUP}"]
# Modules whose classes make up the shell and the kernel: their methods are restored.
_OWN_MODULES = ("IPython.", "ipykernel.")
# Names Python itself adds to a namespace as it runs: a module's record of the warnings it gave.
_LIVE_NAMES = frozenset({"__warningregistry__"})
# Entries of a class's namespace that are the class's own machinery, never put back.
_FIXED_NAMES = frozenset({"__dict__", "__weakref__"})
_MISSING = object()
# Taken when the kernel starts, before any student code: the guard runs check modules with it.
_exec = exec


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


def _current(owner, name):
    """What ``owner.name`` holds now; for a class, as stored (a staticmethod stays one)."""
    return vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)


def _methods(obj) -> list:
    """(class, name, function) for every method that ``obj``'s IPython/ipykernel classes define."""
    return [(cls, name, value) for cls in type(obj).__mro__
            if cls.__module__.startswith(_OWN_MODULES)
            for name, value in vars(cls).items() if callable(value) and not name.startswith("__")]


class _Namespace:
    """A check module's names and those of the classes it defines, as they were when the guard
    took them: :meth:`restore` puts each back and removes every name added since."""

    def __init__(self, module):
        self.table = vars(module)
        self.names = dict(self.table)
        self.classes = [(cls, {name: value for name, value in vars(cls).items() if name not in _FIXED_NAMES})
                        for cls in self.names.values()
                        if isinstance(cls, type) and cls.__module__ == module.__name__]

    def add(self, name: str, value) -> None:
        """A name that belongs here from now on (a package's submodule, once imported)."""
        self.names[name] = value

    def restore(self) -> None:
        table = self.table
        for name in table.keys() - self.names.keys() - _LIVE_NAMES:
            del table[name]
        for name, value in self.names.items():
            if table.get(name, _MISSING) is not value:
                table[name] = value
        for cls, names in self.classes:
            current = vars(cls)
            for name in current.keys() - names.keys() - _FIXED_NAMES:
                delattr(cls, name)
            for name, value in names.items():
                if current.get(name, _MISSING) is not value:
                    setattr(cls, name, value)


class _CheckModuleLoader(importlib.abc.Loader):
    """Executes a per-lesson check module from the code read when the kernel started."""

    def __init__(self, guard: "ExecutionGuard", code, error: Exception | None):
        self.guard, self.code, self.error = guard, code, error

    def create_module(self, spec):
        return None  # the import system's default module

    def exec_module(self, module) -> None:
        if self.error is not None:  # what importing it would have raised (a syntax error…)
            raise self.error
        self.guard.execute(module, self.code)


class _CheckModuleFinder(importlib.abc.MetaPathFinder):
    """First in ``sys.meta_path``: imports the per-lesson check modules, through the guard."""

    def __init__(self, specs: dict):
        self.specs = specs

    def find_spec(self, fullname, path=None, target=None):
        return self.specs.get(fullname)


class ExecutionGuard:
    """A snapshot of the kernel's execution path, put back by :meth:`restore` before every cell."""

    def __init__(self, shell):
        import torch
        import torch.testing

        import graders
        from graders import checks, lesson_checks

        self.shell = shell
        self.kernel = getattr(shell, "kernel", None)
        self.owners = [shell] + ([self.kernel] if self.kernel is not None else [])
        self.names = {"checks": checks, "torch": torch}
        # what a check module binds when it is imported: put back before it runs, too
        self.check_attributes = [(torch.testing, "assert_close", torch.testing.assert_close),
                                 (graders, "checks", checks), (graders, "lesson_checks", lesson_checks)]
        self.attributes = [(warnings, "showwarning", _show_on_stdout), (sys, "meta_path", sys.meta_path)]
        self.attributes += [method for owner in self.owners for method in _methods(owner)]
        self.attributes += [(sys, name, getattr(sys, name))
                            for name in ("displayhook", "excepthook", "stdout", "stderr")]
        self.attributes += [(shell, name, getattr(shell, name)) for name in (
            "input_transformer_manager", "input_transformers_post", "ast_transformers", "events",
            "custom_exceptions", "CustomTB", "displayhook", "display_pub", "display_formatter")
            if hasattr(shell, name)]
        # a method assigned on the instance itself shadows its class's: such names are removed
        self.shadows = [(owner, set(vars(owner)), {name for _, name, _ in _methods(owner)})
                        for owner in self.owners]
        self.trace = (sys.gettrace(), sys.getprofile())
        self.builtins = dict(vars(builtins))
        # The check modules: those the kernel has imported, and the specs of the per-lesson ones
        # it may import later (their code read now, before any student code runs).
        self.package = lesson_checks
        self.modules = {module.__name__: module for module in (graders, checks, lesson_checks)}
        self.namespaces = {name: _Namespace(module) for name, module in self.modules.items()
                           if module is not graders}
        self.loading: set[str] = set()
        self.specs = self._lesson_specs()
        for name in self.specs:
            if name in sys.modules:  # imported before the kernel ran any cell: as it is
                self._adopt(sys.modules[name])
        self.finder = _CheckModuleFinder(self.specs)
        self.lists = self._lists()
        self.dicts = self._dicts()

    def _lesson_specs(self) -> dict:
        """A spec for each per-lesson check module, whose loader runs the code read now."""
        specs = {}
        for info in pkgutil.iter_modules(self.package.__path__):
            if info.name.startswith("_") or info.ispkg:
                continue
            name = f"{self.package.__name__}.{info.name}"
            found = importlib.machinery.PathFinder.find_spec(name, list(self.package.__path__))
            if found is None or not found.has_location:
                continue
            code, error = None, None
            try:
                code = found.loader.get_code(name)
            except Exception as failure:  # raised again by the import, as a plain import would
                error = failure
            specs[name] = importlib.util.spec_from_file_location(
                name, found.origin, loader=_CheckModuleLoader(self, code, error))
        return specs

    def _adopt(self, module) -> None:
        """``module`` is a genuine check module from now on: snapshot it, and keep it imported."""
        name = module.__name__
        self.modules[name] = module
        self.namespaces[name] = _Namespace(module)
        self.namespaces[self.package.__name__].add(name.rpartition(".")[2], module)

    def execute(self, module, code) -> None:
        """Run a check module's code with the checks and the builtins as the kernel started with
        them, and snapshot it before the import returns (a reload keeps the first snapshot)."""
        self.loading.add(module.__name__)
        table = vars(builtins)
        current = dict(table)
        try:
            self._restore_checks()
            table.update(self.builtins)
            _exec(code, vars(module))
        finally:
            self.loading.discard(module.__name__)
            for name in table.keys() - current.keys():
                del table[name]
            table.update(current)  # the cell's own builtins, until the next cell
        if module.__name__ not in self.modules:
            self._adopt(module)

    def _lists(self) -> list:
        """(list, its contents) for every list the shell consults while it runs a cell."""
        manager = self.shell.input_transformer_manager
        lists = [manager.cleanup_transforms, manager.line_transforms, manager.token_transformers,
                 self.shell.input_transformers_post, self.shell.ast_transformers]
        lists += list(self.shell.events.callbacks.values())
        return [(items, list(items)) for items in lists]

    def _dicts(self) -> list:
        """(dict, its contents) for the event table, the formatters' printers and the builtins."""
        dicts = [self.shell.events.callbacks, vars(builtins)]
        if self.kernel is not None:
            dicts.append(self.kernel.shell_handlers)
        for formatter in self.shell.display_formatter.formatters.values():
            dicts += [getattr(formatter, name) for name in
                      ("type_printers", "deferred_printers", "singleton_printers")
                      if isinstance(getattr(formatter, name, None), dict)]
        return [(table, dict(table)) for table in dicts]

    def _restore_checks(self) -> None:
        """The check modules as the guard took them; one the finder did not load (and is not
        loading now) is dropped from ``sys.modules``."""
        for owner, name, value in self.check_attributes:
            if getattr(owner, name, None) is not value:
                setattr(owner, name, value)
        for namespace in self.namespaces.values():
            namespace.restore()
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        for name in self.specs.keys() - self.modules.keys() - self.loading:
            sys.modules.pop(name, None)

    def restore(self, *_) -> None:
        """Put the whole execution path back as it was when the kernel started."""
        self._restore_checks()
        for owner, name, value in self.attributes:
            if _current(owner, name) is not value:
                setattr(owner, name, value)
        if not sys.meta_path or sys.meta_path[0] is not self.finder:
            sys.meta_path[:] = [self.finder, *(f for f in sys.meta_path if f is not self.finder)]
        for owner, names, methods in self.shadows:
            for name in (set(vars(owner)) - names) & methods:
                del owner.__dict__[name]
        for items, contents in self.lists:
            if items != contents:
                items[:] = contents
        for table, contents in self.dicts:
            if table is vars(builtins):
                table.update({k: v for k, v in contents.items() if table.get(k) is not v})
            elif table != contents:
                table.clear()
                table.update(contents)
        sys.settrace(self.trace[0])
        sys.setprofile(self.trace[1])
        for name, module in self.names.items():
            if self.shell.user_ns.get(name, module) is not module:
                self.shell.user_ns[name] = module

    def install(self) -> None:
        """Restore before every cell, from the kernel's execute handler and from IPython's event;
        import the per-lesson check modules through the guard."""
        sys.meta_path.insert(0, self.finder)
        if self.kernel is not None:
            handlers = self.kernel.shell_handlers
            handlers["execute_request"] = self._guarded(handlers["execute_request"])
        self.shell.events.register("pre_run_cell", self.restore)
        # the event table now holds the guard: that is the state to come back to
        self.lists = self._lists()
        self.dicts = self._dicts()

    def _guarded(self, handler):
        @functools.wraps(handler)
        async def guarded_execute_request(*args, **kwargs):
            self.restore()
            reply = handler(*args, **kwargs)
            return await reply if inspect.isawaitable(reply) else reply

        return guarded_execute_request


def prepare() -> None:
    """Route warnings to stdout and guard the execution path of every later cell."""
    warnings.showwarning = _show_on_stdout
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return
        # The inline backend registers its display hook (post_execute: flush_figures) when it is
        # loaded, at the first figure: load it now, so that the hook is part of the state the
        # guard restores rather than something it takes away (every later figure would be lost).
        # Named explicitly: an MPLBACKEND=Agg inherited from the caller's shell would otherwise
        # leave every figure of the notebook unseen.
        shell.run_line_magic("matplotlib", "inline")

        ExecutionGuard(shell).install()
    except ImportError:  # outside IPython, or without torch: nothing to guard
        return
