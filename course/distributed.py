"""Distributed data parallel on one machine, the way lesson 07 runs it.

Taught in lesson 07 (scale), sections 5 and 6.

Several processes each hold a full copy of the model, read a different shard of the data
(``DistributedSampler``), and run their own forward and backward passes. During the backward pass
``DistributedDataParallel`` averages the gradients across processes (an all-reduce per bucket of
gradients), so every copy takes the same optimizer step and stays identical. Data never moves
between processes, and weights only once, when DDP broadcasts rank 0's copy at construction.

Two ways to start the processes:

- from a notebook, :func:`run_ddp` writes a task file and starts :func:`ddp_worker` with
  ``torch.multiprocessing.spawn``. Spawn starts fresh interpreters and pickles the worker *by
  reference* (module and name), which is why the worker lives here, in an importable module, and
  not in a notebook cell;
- from a shell, ``torchrun --standalone --nproc_per_node=2 -m course.distributed`` runs
  :func:`main` once per process, with ``RANK``, ``WORLD_SIZE`` and the rendezvous address in the
  environment.

Backend: ``nccl`` when there is one CUDA device per process, ``gloo`` on the CPU otherwise. On one
machine the processes talk over the loopback interface; with gloo we name it through
``GLOO_SOCKET_IFNAME`` so that a machine whose hostname resolves to an unreachable address (a
sandbox without network, say) still works.
"""

import argparse
import contextlib
import copy
import dataclasses
import datetime
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from course.settings import LANGUAGES, say, set_language
from course.timing import stopwatch

__all__ = ["DDPRun", "TorchrunLaunch", "contiguous_shard", "ddp_worker", "excerpt", "free_port", "launch",
           "loopback_interface", "main", "pick_backend", "run_ddp", "setup_process_group", "torchrun",
           "torchrun_environment"]

DEFAULT_TIMEOUT_S = 120


# ------------------------------------------------------------------------------------------- setup
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now: bind to port 0 and let the system choose.

    The socket is closed before the port is used, so another program could take it in between;
    on a notebook machine that is rare, and the rendezvous then fails with a clear error.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name.startswith("lo")), None)


def pick_backend(world_size: int) -> str:
    """``nccl`` when every process can have its own CUDA device, ``gloo`` (CPU) otherwise."""
    if (torch.cuda.is_available() and torch.cuda.device_count() >= world_size
            and dist.is_nccl_available()):
        return "nccl"
    return "gloo"


def _gloo_on_loopback() -> None:
    """Tell gloo to talk over the loopback interface, unless the environment already names one."""
    interface = loopback_interface()
    if interface and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = interface


def setup_process_group(rank: int, world_size: int, *, port: int | None = None, backend: str = "gloo",
                        addr: str = "127.0.0.1", local_rank: int | None = None,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> torch.device:
    """Join the process group; returns this process's device (with nccl, CUDA device ``local_rank``).

    With a ``port`` the rendezvous is ``tcp://addr:port``; without one it is ``env://``, the
    ``MASTER_ADDR`` and ``MASTER_PORT`` torchrun sets. Every process calls it with the same rendezvous
    and ``world_size`` and its own ``rank``; it returns once all ``world_size`` processes have
    arrived, or raises after ``timeout_s``. ``local_rank`` (default: ``rank``) is the process's number
    on its own machine.
    """
    if port is None:
        addr = os.environ.get("MASTER_ADDR", addr)
        init_method = "env://"
    else:
        init_method = f"tcp://{addr}:{port}"
    if backend == "gloo" and addr in ("127.0.0.1", "localhost"):
        _gloo_on_loopback()
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    if backend == "nccl":
        device = torch.device("cuda", rank if local_rank is None else local_rank)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def launch(fn, world_size: int, args=(), *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs=world_size)`` with a deadline.

    ``fn(rank, *args)`` runs in ``world_size`` fresh processes. An exception in any of them is
    raised here with its traceback; a run past ``timeout_s`` is stopped and raises ``TimeoutError``.
    """
    context = mp.spawn(fn, args=tuple(args), nprocs=world_size, join=False)
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=0.2):
            if time.monotonic() > deadline:
                raise TimeoutError(say({
                    "es": f"los {world_size} procesos no terminaron en {timeout_s} s",
                    "en": f"the {world_size} processes did not finish within {timeout_s} s"}))
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
                process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


def contiguous_shard(tensor: torch.Tensor, world_size: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous part of a batch split into ``world_size`` equal parts."""
    if len(tensor) % world_size:
        raise ValueError(say({
            "es": f"un lote de {len(tensor)} no se divide en {world_size} partes iguales",
            "en": f"a batch of {len(tensor)} does not split into {world_size} equal parts"}))
    size = len(tensor) // world_size
    return tensor[rank * size:(rank + 1) * size]


# ------------------------------------------------------------------------------------------ worker
def _grads(model: nn.Module) -> dict:
    return {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
            if p.grad is not None}


def _params(model: nn.Module) -> dict:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}


def _max_difference_to_rank0(model: nn.Module) -> float:
    """Largest |parameter − rank 0's parameter| over all parameters (each rank gets the same answer)."""
    worst = torch.zeros(1, dtype=torch.float64)
    for p in model.parameters():
        reference = p.detach().clone()
        dist.broadcast(reference, src=0)
        gap = (p.detach() - reference).abs().max().to(torch.float64).cpu()
        worst = torch.maximum(worst, gap.reshape(1))
    worst = worst.to(next(model.parameters()).device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.item()


def _stderr_to_file(path: Path) -> None:
    """Send this process's stderr (C++ warnings included) to ``path``; run_ddp hands it back.

    A notebook kernel shows a child's stderr as the cell's stderr; the launcher reports it instead,
    as text the notebook can print.
    """
    sys.stderr.flush()
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(handle, 2)
    os.close(handle)


class _BucketLog:
    """A DDP communication hook that notes each bucket (size, parameters, when) and all-reduces it."""

    def __init__(self, names: dict):
        self.names = names
        self.calls = []

    def hook(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.calls.append({"time": time.perf_counter(), "index": bucket.index(),
                           "numel": bucket.buffer().numel(),
                           "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                           "params": [self.names[id(p)] for p in bucket.parameters()]})
        return allreduce_hook(state, bucket)


def ddp_worker(rank: int, world_size: int, port: int, task_path: str, out_dir: str) -> None:
    """One process of :func:`run_ddp`: the task is read from ``task_path``, results go to ``out_dir``.

    1. Join the group (:func:`setup_process_group`); the model arrives from the task file, the same
       weights in every process.
    2. One batch, split by a ``DistributedSampler``: the local gradient of this rank's half and the
       gradient after a hand-written all-reduce average (:func:`_hand_averaged_gradients`).
    3. The same batch through DDP (:func:`_ddp_gradients`): ranks other than 0 first perturb their
       weights, to show that DDP's construction broadcasts rank 0's; then the gradient DDP leaves
       after backward, with a communication hook that logs each bucket it all-reduces.
    4. ``steps`` training steps with SGD on the rank's shards of the training set, each timed
       (:func:`_timed_training`).

    The process's stderr goes to ``out_dir/rank<r>.log`` (see :func:`run_ddp`).
    """
    _stderr_to_file(Path(out_dir) / f"rank{rank}.log")
    task = torch.load(task_path, weights_only=False)  # our own file, written by run_ddp
    torch.set_num_threads(task["threads"])
    device = setup_process_group(rank, world_size, port=port, backend=task["backend"],
                                 timeout_s=task["timeout_s"])
    try:
        result = {"rank": rank, "world_size": world_size, "backend": task["backend"], "pid": os.getpid(),
                  "threads": torch.get_num_threads()}
        batch = TensorDataset(task["x"], task["y"])
        sampler = DistributedSampler(batch, num_replicas=world_size, rank=rank, shuffle=False)
        result["batch_indices"] = list(sampler)
        (xs, ys), = DataLoader(batch, batch_size=len(sampler), sampler=sampler)
        xs, ys = xs.to(device), ys.to(device)
        result |= _hand_averaged_gradients(task["model"], xs, ys, device)
        result |= _ddp_gradients(task, xs, ys, device)
        result |= _timed_training(task, device)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _hand_averaged_gradients(model: nn.Module, xs, ys, device) -> dict:
    """This rank's gradient of its part of the batch, then the average across ranks, by hand."""
    plain = copy.deepcopy(model).to(device)
    nn.functional.cross_entropy(plain(xs), ys).backward()
    local = _grads(plain)
    for p in plain.parameters():        # what DDP does: sum across ranks, divide by their number
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= dist.get_world_size()
    return {"local_grads": local, "manual_grads": _grads(plain)}


def _ddp_gradients(task: dict, xs, ys, device) -> dict:
    """Weights made different, DDP's broadcast at construction, then its averaged gradients."""
    model = copy.deepcopy(task["model"]).to(device)
    rank = dist.get_rank()
    if rank > 0:
        with torch.no_grad():
            generator = torch.Generator().manual_seed(1000 + rank)
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=generator).to(device))
    result = {"diff_before_ddp": _max_difference_to_rank0(model)}
    ddp = DistributedDataParallel(model, **task["ddp_options"])
    result["diff_after_ddp"] = _max_difference_to_rank0(model)
    log = _BucketLog({id(p): name for name, p in model.named_parameters()})
    ddp.register_comm_hook(None, log.hook)
    # The first backward uses one bucket and records the order in which gradients become
    # ready; DDP rebuilds its buckets in that order before the second forward. Log the second.
    for _ in range(2):
        ddp.zero_grad(set_to_none=True)
        log.calls.clear()
        loss = nn.functional.cross_entropy(ddp(xs), ys)
        with stopwatch(device) as watch:
            loss.backward()
    result["ddp_grads"] = _grads(model)
    result["buckets"] = [dict(call, time=call["time"] - watch.start) for call in log.calls]
    result["backward_seconds"] = watch.seconds
    return result


def _timed_training(task: dict, device) -> dict:
    """``steps`` SGD steps of DDP on this rank's shards, each timed; the weights along the way."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    train = TensorDataset(task["train_x"], task["train_y"])
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(train, batch_size=task["batch_size"] // world_size, sampler=sampler)
    shards = [(a.to(device), b.to(device)) for a, b in loader][: task["steps"]]
    ddp = DistributedDataParallel(copy.deepcopy(task["model"]).to(device), **task["ddp_options"])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=task["lr"])
    result = {"step_seconds": [], "steps": len(shards)}
    dist.barrier()
    for xs, ys in shards:
        with stopwatch(device) as watch:
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(ddp(xs), ys).backward()   # returns once gradients are averaged
            optimizer.step()
        result["step_seconds"].append(watch.seconds)
        if len(result["step_seconds"]) == 1:
            result["params_after_first_step"] = _params(ddp.module)
    dist.barrier()
    result["final_params"] = _params(ddp.module)
    result["diff_after_training"] = _max_difference_to_rank0(ddp.module)
    return result


class DDPRun(list):
    """The per-rank result dicts of :func:`run_ddp`, plus ``seconds``: the wall time of the launch.

    Each dict's ``messages`` holds what that process wrote to stderr (library warnings), as lines.
    """

    seconds: float = 0.0


def run_ddp(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, train_x: torch.Tensor,
            train_y: torch.Tensor, batch_size: int, steps: int, lr: float = 0.1,
            world_size: int = 2, threads: int = 1, ddp_options: dict | None = None,
            backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> DDPRun:
    """Start ``world_size`` processes running :func:`ddp_worker` and return what each measured.

    ``model`` (copied to every process), the batch ``(x, y)`` for the gradient comparison and the
    training set ``(train_x, train_y)`` travel in a temporary file; ``batch_size`` is the global
    batch, split equally across the processes. Each process uses ``threads`` CPU threads.
    ``ddp_options`` go to ``DistributedDataParallel`` (say ``{"bucket_cap_mb": 5}``).
    """
    if len(x) % world_size or batch_size % world_size:
        raise ValueError(say({
            "es": f"los tamaños de lote ({len(x)}, {batch_size}) deben ser divisibles por {world_size}",
            "en": f"the batch sizes ({len(x)}, {batch_size}) must divide by {world_size}"}))
    backend = backend or pick_backend(world_size)
    task = {"model": copy.deepcopy(model).to("cpu"), "x": x.cpu(), "y": y.cpu(), "train_x": train_x.cpu(),
            "train_y": train_y.cpu(), "batch_size": batch_size, "steps": steps, "lr": lr,
            "threads": threads, "ddp_options": dict(ddp_options or {}), "backend": backend,
            "timeout_s": timeout_s}
    with tempfile.TemporaryDirectory(prefix="course-ddp-") as folder:
        task_path = os.path.join(folder, "task.pt")
        torch.save(task, task_path)
        logs = [Path(folder) / f"rank{r}.log" for r in range(world_size)]

        def messages(r):
            return logs[r].read_text(errors="replace").splitlines() if logs[r].exists() else []

        start = time.perf_counter()
        try:
            launch(ddp_worker, world_size, (world_size, free_port(), task_path, folder), timeout_s=timeout_s)
        except Exception as error:
            told = "\n".join(f"  rank {r}: {line}" for r in range(world_size) for line in messages(r))
            told = told or say({"es": "  (nada)", "en": "  (nothing)"})
            raise RuntimeError(say({
                "es": f"la ejecución con DDP falló: {error}\n"
                      f"lo que los procesos escribieron en stderr:\n{told}",
                "en": f"the DDP run failed: {error}\nwhat the processes wrote to stderr:\n{told}",
            })) from error
        seconds = time.perf_counter() - start
        results = DDPRun(torch.load(os.path.join(folder, f"rank{r}.pt"), weights_only=False)
                         for r in range(world_size))
        for r, result in enumerate(results):
            result["messages"] = messages(r)
    results.seconds = seconds
    return results


# ---------------------------------------------------------------------------------- torchrun entry
def main(argv=None) -> None:
    """The script form: ``torchrun --standalone --nproc_per_node=2 -m course.distributed``.

    torchrun starts one copy per process and tells each who it is through environment variables
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), which
    ``init_method="env://"`` reads. The same script runs on several machines with
    ``torchrun --nnodes=N --node_rank=i --master_addr=HOST --master_port=PORT ...``.
    """
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--language", choices=LANGUAGES,
                        help="language of the printed line (a lesson passes course.get_language())")
    args = parser.parse_args(argv)
    if args.language:
        set_language(args.language)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    backend = pick_backend(int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    device = setup_process_group(rank, world_size, backend=backend, local_rank=local_rank, timeout_s=60)
    try:
        torch.manual_seed(0)  # same data and same initial weights in every process
        data = TensorDataset(torch.randn(args.batch_size * args.steps, 20),
                             torch.randint(0, 3, (args.batch_size * args.steps,)))
        model = DistributedDataParallel(
            nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3)).to(device))
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(data, batch_size=args.batch_size // world_size, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        sampler.set_epoch(0)
        for xs, ys in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xs.to(device)), ys.to(device))
            loss.backward()
            optimizer.step()
        gap = _max_difference_to_rank0(model.module)
        print(say({
            "es": f"rank {rank}/{world_size} (rank local {local_rank}, {backend}): {len(sampler)} ejemplos, "
                  f"última pérdida {loss.item():.4f}, máx |parámetro - el del rank 0| = {gap:.1e}",
            "en": f"rank {rank}/{world_size} (local rank {local_rank}, {backend}): {len(sampler)} examples, "
                  f"last loss {loss.item():.4f}, max |param - rank 0's| = {gap:.1e}",
        }), flush=True)
    finally:
        dist.destroy_process_group()



# ------------------------------------------------------------------------ launching torchrun, reliably
# Lines of a launch's stderr that say nothing about it: c10d's warning on a machine whose hostname
# does not resolve (a sandbox without network).
NOISE = ("hostname of the client socket",)
# torchrun's summary of a failed launch names each failed process and its exit code (negative: the
# signal that killed it); the first observed failure comes last, under "Root Cause".
_SUMMARY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")


def torchrun_environment() -> dict:
    """This process's environment for a torchrun child: one thread per process, unbuffered output,
    gloo on the loopback interface."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    interface = loopback_interface()
    if interface:
        environment.setdefault("GLOO_SOCKET_IFNAME", interface)
    return environment


def excerpt(text: str, head: int = 12, tail: int = 24) -> list[str]:
    """The lines of ``text`` worth reading: all of them when they are few, else the first ``head``
    (where an error starts) and the last ``tail`` (where it ends), with a line saying how many were
    left out between them."""
    lines = [line for line in text.rstrip().splitlines() if not any(noise in line for noise in NOISE)]
    if len(lines) <= head + tail + 1:
        return lines
    left_out = len(lines) - head - tail
    gap = say({"es": f"… ({left_out} líneas omitidas) …", "en": f"… ({left_out} lines left out) …"})
    return [*lines[:head], gap, *lines[-tail:]]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _launcher_messages(text: str, summary: bool) -> str:
    """torchrun's own messages, without its Python traceback (it ends raising ``ChildFailedError``)
    and, unless ``summary``, without the summary box (``=====`` lines) that names each failed process."""
    kept, skipping, boxes = [], False, 0
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            skipping = True
        boxes += not summary and len(line) >= 20 and set(line) == {"="}
        if not skipping and (summary or boxes % 2 == 0) and set(line) != {"="}:
            kept.append(line)
        if line.startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError"):
            skipping = False
    return "\n".join(kept)


@dataclasses.dataclass(frozen=True)
class TorchrunLaunch:
    """What one torchrun launch left: its exit code (``None``: stopped at the timeout), what the
    processes printed, torchrun's own messages and each process's stderr (by local rank). After a
    retry, ``retried`` says why in one line and ``earlier`` is the launch that was not kept."""

    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    ranks: dict = dataclasses.field(default_factory=dict)
    timeout_s: float = DEFAULT_TIMEOUT_S
    retried: str = ""
    earlier: "TorchrunLaunch | None" = None

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def failed_ranks(self) -> list[tuple[int, int]]:
        """``(local rank, exit code)`` of each process torchrun reports as failed, the first observed
        failure (the root cause) first."""
        summary = self.stderr.rpartition("Failures:")[2]
        others, _, root = summary.rpartition("Root Cause")
        found = [(int(local), int(code)) for text in (root, others)
                 for _, local, code in _SUMMARY.findall(text)]
        if not found:   # torchrun stopped before its summary: its log lines, in the order they came
            found = [(int(local), int(code)) for code, local in _FAILED.findall(self.stderr)]
        return list(dict.fromkeys(found))

    def killed_by(self) -> str:
        """The signal that ended the launch (``SIGABRT``…): torchrun's own, or else the first failed
        process's; ``""`` when it ended otherwise (normally, by an exception, at the timeout)."""
        if self.timed_out:
            return ""
        if self.returncode < 0:
            return _signal_name(self.returncode)
        failed = self.failed_ranks()
        return _signal_name(failed[0][1]) if failed and failed[0][1] < 0 else ""

    def cause(self) -> str:
        """One line: why the launch failed, as far as its messages tell (``""`` when it did not)."""
        if self.returncode == 0:
            return ""
        if self.timed_out:
            return f"timeout ({self.timeout_s:g} s)"
        if self.returncode < 0:
            return f"torchrun: {self.killed_by()}"
        failed = self.failed_ranks()
        if not failed:
            return f"exit code {self.returncode}"
        rank, code = failed[0]
        last = excerpt(self.ranks.get(rank, ""))[-1:]
        return ": ".join([f"rank {rank}", self.killed_by() or f"exit code {code}", *last])

    def errors(self, head: int = 12, tail: int = 24) -> str:
        """What the failed processes wrote to stderr (the first one first; every process's when none
        is known to have failed), then torchrun's own messages; long texts keep their head and tail."""
        known = dict(self.failed_ranks())
        failed = known or dict.fromkeys(rank for rank, text in sorted(self.ranks.items()) if text.strip())
        parts = []
        for rank, code in failed.items():
            parts.append(_rank_heading(rank, code))
            lines = excerpt(self.ranks.get(rank, ""), head, tail)
            parts += [f"  {line}" for line in lines or [say({"es": "(nada)", "en": "(nothing)"})]]
        launcher = excerpt(_launcher_messages(self.stderr, summary=not known), head, tail)
        if launcher:
            parts += ["torchrun:", *(f"  {line}" for line in launcher)]
        return "".join(f"\n    {part}" for part in parts)


def _rank_heading(rank: int, code: int | None) -> str:
    if code is None:
        return say({"es": f"stderr del rank {rank}:", "en": f"stderr of rank {rank}:"})
    killed = f", {_signal_name(code)}" if code < 0 else ""
    return say({"es": f"stderr del rank {rank} (código de salida {code}{killed}):",
                "en": f"stderr of rank {rank} (exit code {code}{killed}):"})


def _rank_logs(log_dir: Path) -> dict:
    """Each process's stderr, by local rank, from torchrun's ``--log-dir`` (the last attempt's)."""
    logs = {}
    for path in sorted(log_dir.glob("*/attempt_*/*/stderr.log")):
        logs[int(path.parent.name)] = path.read_text(errors="replace")
    return logs


def _torchrun_once(folder, processes: int, script: str, arguments, timeout_s: float) -> TorchrunLaunch:
    """One launch: stdout captured, each process's stderr in a file of its own (so that one
    process's error is not lost among the others' messages), the whole group stopped at the timeout."""
    with tempfile.TemporaryDirectory(prefix="torchrun-logs-") as logs:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={processes}", "--log-dir", logs, "--redirects", "2",
                   script, *map(str, arguments)]
        with subprocess.Popen(command, cwd=folder, env=torchrun_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) as child:
            try:
                out, err = child.communicate(timeout=timeout_s)
                code = child.returncode
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)   # torchrun, and so every process it started
                out, err = child.communicate()
                code = None
            except BaseException:                      # an interrupted kernel leaves nothing running
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                raise
        return TorchrunLaunch(code, out, err, _rank_logs(Path(logs)), timeout_s)


def torchrun(folder, processes: int, script: str, *arguments, timeout_s: float = DEFAULT_TIMEOUT_S,
             report=print) -> TorchrunLaunch:
    """``torchrun --standalone --nproc_per_node=processes script arguments…``, run in ``folder``.

    A launch in which a process was killed by a signal (``SIGABRT``, ``SIGSEGV``…: the machine or a
    library, not the script's own code) is launched once more, and ``report`` gets one line saying
    so and why. A script that fails with an exception, or runs past ``timeout_s``, is not launched
    again: that is what the script does.
    """
    first = _torchrun_once(folder, processes, script, arguments, timeout_s)
    if not first.killed_by():
        return first
    why = say({"es": f"torchrun se lanzó una vez más: un proceso murió por una señal, no por una excepción "
                     f"del código ({first.cause()[:200]})",
               "en": f"torchrun was launched once more: a process was killed by a signal, not by an "
                     f"exception in the code ({first.cause()[:200]})"})
    report(why)
    again = _torchrun_once(folder, processes, script, arguments, timeout_s)
    return dataclasses.replace(again, retried=why, earlier=first)


if __name__ == "__main__":
    main()
