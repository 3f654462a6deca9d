"""nbgrader's Execute step, made to survive what student code does to a kernel.

- A cell during which the kernel stops serving, in any way (it dies: ``os._exit``, a segfault, out
  of memory; it hangs past its timeout and ignores the interrupt; it cannot start threads, breaks
  the message protocol or answers garbage), is an incident: that cell is replaced by an error that
  says so, and the notebook runs again from a fresh kernel, so only what depends on that cell
  loses points. What fails outside any cell (a kernel that cannot start at all) is a grader fault.
- Output is capped while it streams, per cell, so printing a gigabyte cannot exhaust the grader. A
  message past the cap's limit costs the connection that carried it (zmq drops it, for good): the
  grader opens a new one, so the cells after it keep their outputs and errors.
- A notebook that runs past its total time gets an error in every cell it did not reach.
- A kernel that fails to start is started again, a few times, before the submission is given up.
- Every kernel of the process talks through one zmq context that lives as long as the process.
- A kernel is killed once its notebook has run, not asked to shut down: it is disposable, and a
  kernel that has imported torch takes seconds to exit on its own.
Every code cell that did not run ends with an error output, so no grade cell passes unrun.
"""

import asyncio
import copy
import json
import tempfile
import time
from pathlib import Path

import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from nbclient.util import run_sync
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, List, Unicode, default

from graders.grade.sandbox import use_unix_sockets
from graders.judge import wire
from graders.nbgrader_settings import NOTEBOOK_TIMEOUT_S

# The judge's calls run tiny inputs: an honest one answers in milliseconds. Each stops itself in
# the kernel after JUDGE_CALL_S; the grader waits twice that before it interrupts the kernel.
JUDGE_CALL_S = 5

INCIDENT = "CourseGraderIncident"
# What a cell shows when its output stopped arriving: too big a message, or still streaming.
CUT_SHORT = "\n[output cut: it stopped arriving]\n"


class KernelStuck(RuntimeError):
    """The kernel ignored the interrupt that followed a cell timeout."""


class NotebookTimeout(RuntimeError):
    """The whole notebook ran past its time."""


def _size(output) -> int:
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    if output.get("output_type") == "error":
        return sum(len(line) for line in output.get("traceback", [])) + len(output.get("evalue", ""))
    return sum(len(str(value)) for value in output.get("data", {}).values())


def _error(reason: str):
    return new_output("error", ename=INCIDENT, evalue=reason, traceback=[f"{INCIDENT}: {reason}"])


_CONTEXT = zmq.asyncio.Context()


class SharedContextKernelManager(AsyncKernelManager):
    """A kernel manager whose sockets, and its clients' sockets, live in the process's one context.

    By default each manager and each client makes a zmq context of its own. One left for the
    garbage collector together with its sockets hangs the grading worker forever: the collector
    clears the context's list of sockets before its finaliser runs, so ``term()`` waits for
    sockets nobody will close. A context that is never collected cannot do that.
    """

    @default("context")
    def _shared_context(self):
        return _CONTEXT

    def client(self, **kwargs):
        return super().client(context=self.context, **kwargs)


class ResilientExecute(Execute):
    """``Execute`` with restarts around dead or stuck kernels, output caps and a notebook timeout."""

    max_restarts = Integer(3, help="kernel deaths or hangs survived per notebook").tag(config=True)
    notebook_timeout = Integer(NOTEBOOK_TIMEOUT_S, help="seconds for the whole notebook").tag(config=True)
    max_output_bytes = Integer(1_000_000, help="output kept per cell").tag(config=True)
    interrupt_grace = Integer(10, help="seconds a kernel has to obey an interrupt").tag(config=True)
    # nbgrader fails the whole submission when a cell's output is still streaming 4 s after its
    # reply (a flood of prints): here that cell keeps what arrived and grading goes on.
    raise_on_iopub_timeout = Bool(False).tag(config=True)
    socket_root = Unicode("", help="folder for per-kernel unix sockets (ipc transport)").tag(config=True)
    start_attempts = Integer(3, help="kernel starts tried before the submission fails").tag(config=True)
    judge_file = Unicode("", help="where the judge's data goes: the kernel's values of judge_names, "
                         "asked for once the last cell ran (graders/judge/wire.py)").tag(config=True)
    judge_names = List(Unicode(), help="the notebook's names the judge asks for").tag(config=True)
    judge_calls = Unicode("[]", help="the calls the judge asks the kernel to make, as JSON "
                          "(graders/judge/calls.py)").tag(config=True)

    def __init__(self, **kwargs):
        # nbgrader's Execute forces its own kernel manager class through the same argument.
        kwargs.setdefault("kernel_manager_class", SharedContextKernelManager)
        super().__init__(**kwargs)

    @default("shutdown_kernel")
    def _kill_when_done(self):
        return "immediate"

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self.socket_root:
            use_unix_sockets(km, Path(tempfile.mkdtemp(prefix="kernel-", dir=self.socket_root)))
        # A message bigger than this drops the connection instead of filling the grader's memory.
        km.context.setsockopt(zmq.MAXMSGSIZE, 8 * self.max_output_bytes)
        return km

    async def async_start_new_kernel_client(self):
        """Connect to the kernel; one that died or stayed silent while starting is replaced."""
        for attempt in range(1, self.start_attempts + 1):
            try:
                return await super().async_start_new_kernel_client()
            except RuntimeError as error:  # nbclient has already cleaned up the failed kernel
                if attempt == self.start_attempts:
                    raise
                self.log.warning("kernel start %d of %d failed (%s); starting a new kernel",
                                 attempt, self.start_attempts, error)
                self.km = self.create_kernel_manager()
                await self.async_start_new_kernel()

    # nbclient's synchronous entry points wrap its own coroutines: point this one at ours.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def preprocess(self, nb, resources=None, km=None):
        original = copy.deepcopy(nb)
        incidents: dict[int, str] = {}
        self._deadline = time.monotonic() + self.notebook_timeout
        while True:
            attempt = copy.deepcopy(original)
            for index, reason in incidents.items():
                attempt.cells[index].source = f"raise RuntimeError({reason!r})"
            self._running = None
            try:
                nb, resources = super().preprocess(attempt, resources, km)
                return self._mark_incidents(nb, incidents), resources
            except NotebookTimeout:
                reason = f"not run: the notebook ran past its {self.notebook_timeout} s"
                return self._finish_unrun(attempt, incidents, reason), resources
            except Exception as error:  # raised while a cell ran: the kernel broke under it
                if self._running is None:
                    raise
                self.log.warning("cell %d: the kernel stopped serving", self._running + 1, exc_info=True)
                incidents[self._running] = self._explain(error, self._running)
                if len(incidents) > self.max_restarts:
                    reason = f"not run: the kernel failed {len(incidents)} times"
                    return self._finish_unrun(attempt, incidents, reason), resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and time.monotonic() > self._deadline:
            raise NotebookTimeout()
        self._running = index
        self._cell_bytes = 0
        self._iopub_gave_up = False
        result = super().preprocess_cell(cell, resources, index)
        if self._iopub_gave_up:
            run_sync(self._async_reopen_iopub)()
            cell.outputs.append(new_output("stream", name="stdout", text=CUT_SHORT))
        if index == len(self.nb.cells) - 1 and self.judge_file:
            self._running = None  # what the probe meets is the judge's to report, not a cell's incident
            Path(self.judge_file).write_text(json.dumps(run_sync(self._async_probe)()))
        return result

    async def _async_poll_output_msg(self, parent_msg_id, cell, cell_index):
        try:
            return await super()._async_poll_output_msg(parent_msg_id, cell, cell_index)
        except asyncio.CancelledError:  # the cell's reply came, its outputs stopped arriving
            self._iopub_gave_up = True
            raise

    async def _async_reopen_iopub(self) -> None:
        """A new iopub connection in place of one that stopped carrying messages (zmq dropped it
        for an oversized one), in use once it carries the kernel's status for a request: the
        cells after it would otherwise each wait for outputs that never come, and lose them."""
        self.kc.iopub_channel.close()
        self.kc._iopub_channel = None
        deadline = time.monotonic() + self.interrupt_grace
        while time.monotonic() < deadline:
            if await self._iopub_carries(self.kc.kernel_info(), seconds=0.5):
                return

    async def _iopub_carries(self, msg_id: str, seconds: float) -> bool:
        """Whether a message answering ``msg_id`` comes on iopub within ``seconds``."""
        try:
            while True:
                msg = await self.kc.iopub_channel.get_msg(timeout=seconds)
                if msg["parent_header"].get("msg_id") == msg_id:
                    return True
        except Exception:  # queue.Empty: nothing more within the time
            return False

    async def _async_probe(self) -> dict:
        """What the judge asked for, once every cell has run: the notebook's values of
        ``judge_names``, then each call of ``judge_calls``, each its own silent execution whose
        result comes back in the reply, so that one call that hangs or kills the kernel costs only
        its own cell. ``{"values": JSON or None, "calls": {cell: JSON}, "why": what went wrong}``."""
        found, why = {"values": None, "calls": {}}, []
        asked = [("values", wire.probe(list(self.judge_names), []), 2 * JUDGE_CALL_S)] + [
            (call["cell"], wire.probe([], [call], JUDGE_CALL_S), 2 * JUDGE_CALL_S * len(call["args"]))
            for call in json.loads(self.judge_calls)]
        for part, code, seconds in asked:
            try:
                sent = json.loads(await self._async_ask(code, seconds))
                if part == "values":
                    found["values"] = sent["values"]
                else:
                    found["calls"][part] = sent["calls"][part]
            except KernelStuck as error:
                why.append(f"{part}: {error}")
                break
            except Exception as error:  # a dead kernel, a broken protocol, a forged reply
                why.append(f"{part}: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}")
        return {**found, "why": "; ".join(why)}

    async def _async_ask(self, code: str, seconds: float) -> str:
        """The JSON text the kernel's probe made, within ``seconds``; past it, the kernel is
        interrupted and the answer given up (:class:`KernelStuck` if it ignores the interrupt)."""
        msg_id = self.kc.execute(code, silent=True, store_history=False,
                                 user_expressions={"judge": wire.RESULT})
        reply = await self._reply_to(msg_id, seconds)
        if reply is None:
            await self.km.interrupt_kernel()
            if await self._reply_to(msg_id, self.interrupt_grace) is None:
                raise KernelStuck(f"still busy {self.interrupt_grace} s after being interrupted")
            raise TimeoutError(f"no answer within {seconds} s")
        return wire.reply_text((reply["content"].get("user_expressions") or {}).get("judge"))

    async def _reply_to(self, msg_id: str, seconds: float) -> dict | None:
        """The kernel's reply to ``msg_id`` on the shell channel, ``None`` if none comes in ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await self.kc.shell_channel.get_msg(timeout=left)
            except (TimeoutError, Exception):
                return None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        return None

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is None:
            return out
        self._cell_bytes = getattr(self, "_cell_bytes", 0) + _size(out)
        if self._cell_bytes > self.max_output_bytes:
            outs.remove(out)
            if not getattr(self, "_truncated", None) == cell_index:
                self._truncated = cell_index
                outs.append(new_output("stream", name="stdout",
                                       text=f"\n[output cut at {self.max_output_bytes} bytes]\n"))
        return out

    async def _async_handle_timeout(self, timeout, cell=None):
        reply = await super()._async_handle_timeout(timeout, cell)
        if not await self._kernel_answers(self.interrupt_grace):
            raise KernelStuck(f"still busy {self.interrupt_grace} s after being interrupted")
        return reply

    async def _kernel_answers(self, grace: float) -> bool:
        """Whether the kernel answers a kernel_info request within ``grace`` seconds."""
        return await self._reply_to(self.kc.kernel_info(), grace) is not None

    def _explain(self, error, index) -> str:
        from nbclient.exceptions import DeadKernelError

        again = "it was skipped and the notebook was run again without it"
        if isinstance(error, KernelStuck):
            return (f"cell {index + 1} did not stop: it ran past {self.timeout} s and then ignored "
                    f"the interrupt; {again}")
        if isinstance(error, DeadKernelError):
            return f"cell {index + 1} killed the kernel (os._exit, a crash or too much memory); {again}"
        cause = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:120]}"
        return f"cell {index + 1} broke the kernel, which stopped serving ({cause.rstrip(': ')}); {again}"

    @staticmethod
    def _mark_incidents(nb, incidents):
        for index, reason in incidents.items():
            nb.cells[index].outputs = [_error(reason)]
        return nb

    def _finish_unrun(self, nb, incidents, reason):
        """Keep what ran; every code cell that did not run gets an error saying why."""
        self._mark_incidents(nb, incidents)
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.get("execution_count") is None \
                    and not any(o.output_type == "error" for o in cell.get("outputs", [])):
                cell.outputs = [_error(reason)]
        return nb
