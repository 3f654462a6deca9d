"""What every grading and running kernel does before the first cell.

- nbgrader scores a grade cell with any stderr output as failed, so a harmless library warning
  would turn a correct answer into zero points: warnings are shown on stdout instead.
- :class:`ExecutionGuard` takes a snapshot of everything that stands between a cell's source and
  its graded output, and puts it back before every cell. It runs from two places: the kernel's
  handler of execute requests (before IPython transforms the cell) and IPython's ``pre_run_cell``
  event. What it restores:

  - the checks in ``graders.checks`` and in the per-lesson modules of ``graders.lesson_checks``
    (their functions, their classes' methods, their entries in ``sys.modules``),
    ``torch.testing.assert_close``, the names ``checks`` and ``torch`` in the notebook, and the
    values of every builtin (``isinstance``, ``print``…);
  - IPython's input transformers (cleanup, line, token and post), AST transformers, event
    callbacks, custom exception handlers, display hook, display publisher and formatters, and
    every method of the shell, of the kernel and of their classes (``showtraceback``,
    ``run_cell``, ``do_execute``…), and the kernel's table of message handlers;
  - ``sys.displayhook``, ``sys.excepthook``, ``sys.stdout``, ``sys.stderr``, the trace and
    profile functions, and ``warnings.showwarning``.

  Student code still runs in the kernel's own process. Out of reach of any in-kernel guard: a
  thread it leaves running (it can patch again between two cells), a patched method of torch or
  of other libraries, a change to the guard's own snapshot, and a replaced message dispatcher below
  the handler table (``dispatch_shell``, the zmq streams). The sandbox keeps such code away from
  everything else, and the feedback removes any output line that repeats a hidden test.
"""

import builtins
import functools
import inspect
import sys
import warnings

STARTUP = "import graders.kernel_startup; graders.kernel_startup.prepare()"
KERNEL_ARGUMENTS = [f"--IPKernelApp.exec_lines={STARTUP}"]
# Modules whose classes make up the shell and the kernel: their methods are restored.
_OWN_MODULES = ("IPython.", "ipykernel.")


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


def _contents(module) -> list:
    """(owner, name, value) for every name of ``module`` and of the classes it defines."""
    contents = [(module, name, value) for name, value in vars(module).items()
                if not name.startswith("__")]
    classes = [value for value in vars(module).values()
               if isinstance(value, type) and value.__module__ == module.__name__]
    contents += [(cls, name, value) for cls in classes for name, value in vars(cls).items()
                 if name not in ("__dict__", "__weakref__")]
    return contents


class ExecutionGuard:
    """A snapshot of the kernel's execution path, put back by :meth:`restore` before every cell."""

    def __init__(self, shell):
        import torch
        import torch.testing

        from graders import checks, lesson_checks

        self.shell = shell
        self.kernel = getattr(shell, "kernel", None)
        self.owners = [shell] + ([self.kernel] if self.kernel is not None else [])
        self.names = {"checks": checks, "torch": torch}
        self.attributes = [(torch.testing, "assert_close", torch.testing.assert_close),
                           (warnings, "showwarning", _show_on_stdout)]
        check_modules = [checks, lesson_checks, *lesson_checks.lesson_modules()]
        self.modules = {module.__name__: module for module in check_modules}
        self.attributes += [attribute for module in check_modules for attribute in _contents(module)]
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
        self.lists = self._lists()
        self.dicts = self._dicts()

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

    def restore(self, *_) -> None:
        """Put the whole execution path back as it was when the kernel started."""
        for owner, name, value in self.attributes:
            if _current(owner, name) is not value:
                setattr(owner, name, value)
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
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        sys.settrace(self.trace[0])
        sys.setprofile(self.trace[1])
        for name, module in self.names.items():
            if self.shell.user_ns.get(name, module) is not module:
                self.shell.user_ns[name] = module

    def install(self) -> None:
        """Restore before every cell, from the kernel's execute handler and from IPython's event."""
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
