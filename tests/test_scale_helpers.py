"""The helpers lesson 07 stands on: the saved-tensor meter, checkpointing, a real 2-process DDP run,
and torchrun's launch (a process killed by a signal launched once more, its error kept whole)."""

import os
import socket

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
from torch.utils.data.distributed import DistributedSampler

from course import distributed
from course.memory import (
    SavedTensorMeter,
    cuda_memory_of,
    model_saved_bytes,
    model_state_tensors,
    saved_bytes,
    track_cuda_memory,
)


# ------------------------------------------------------------------------------------------- meter
def test_meter_counts_the_bytes_autograd_saves():
    x = torch.randn(4, 5, requires_grad=True)
    with SavedTensorMeter() as meter:
        loss = (x.sin() + x.exp()).sum()   # sin keeps its input x, exp keeps its result
    assert meter.bytes == 2 * 4 * 5 * 4
    assert meter.count == 2
    loss.backward()  # the meter left the graph intact
    torch.testing.assert_close(x.grad, x.detach().cos() + x.detach().exp())


def test_a_storage_saved_twice_counts_once():
    x = torch.randn(4, 5, requires_grad=True)
    with SavedTensorMeter() as meter:
        (x * x).sum()
    assert meter.saves == 2
    assert meter.count == 1
    assert meter.bytes == 80


def test_float64_doubles_and_no_grad_saves_nothing():
    x = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    assert saved_bytes(torch.sin, x) == 6 * 7 * 8
    with torch.no_grad():
        assert saved_bytes(torch.sin, x) == 0


def test_a_saved_view_counts_its_whole_storage():
    base = torch.randn(4, 10, requires_grad=True) * 1   # a non-leaf (4, 10) tensor
    assert saved_bytes(lambda: base[:, :3].sin()) == 4 * 10 * 4


def test_parameters_and_buffers_are_excluded():
    layer = nn.Linear(5, 3)
    x = torch.randn(4, 5, requires_grad=True)
    with SavedTensorMeter(exclude=layer.parameters()) as meter:
        layer(x)
    assert meter.bytes == x.numel() * 4   # the weight was saved too (for x's gradient), not counted
    assert any(r.excluded for r in meter.records)
    assert "parameter (not counted)" in meter.table()

    mlp = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    assert model_saved_bytes(mlp, torch.randn(32, 20)) == 32 * 20 * 4 + 32 * 64 * 4

    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, bias=False), nn.BatchNorm2d(4))
    state = {t.untyped_storage().data_ptr() for t in model_state_tensors(cnn)}
    assert {cnn[1].running_mean.data_ptr(), cnn[0].weight.data_ptr()} <= state
    with SavedTensorMeter() as everything:
        cnn(torch.randn(2, 1, 8, 8))
    assert model_saved_bytes(cnn, torch.randn(2, 1, 8, 8)) < everything.bytes


def test_the_meter_lets_go_of_what_it_saw():
    x = torch.randn(3, 3, requires_grad=True)
    meter = SavedTensorMeter()
    with meter:
        x.exp()
    assert meter._alive == [] and meter.bytes == 36
    with SavedTensorMeter() as second:   # hooks were removed: a new meter sees a new forward
        x.sin()
    assert second.bytes == 36


def test_activation_memory_is_linear_in_batch_and_depth():
    def deep(depth):
        return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU())
                               for _ in range(depth)])

    by_batch = [model_saved_bytes(deep(3), torch.randn(b, 16)) for b in (4, 8, 16)]
    by_depth = [model_saved_bytes(deep(d), torch.randn(8, 16)) for d in (1, 2, 3)]
    assert by_batch[2] - by_batch[1] == 2 * (by_batch[1] - by_batch[0])
    assert by_depth[2] - by_depth[1] == by_depth[1] - by_depth[0] > 0


# ----------------------------------------------------------------------------------- checkpointing
def _deep(depth=8, width=32):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                           for _ in range(depth)])


def _grads(model, forward):
    model.zero_grad(set_to_none=True)
    forward().square().mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_checkpointing_halves_saved_bytes_with_identical_gradients():
    model, x = _deep(), torch.randn(16, 32)
    state = model_state_tensors(model)
    plain = saved_bytes(model, x, exclude=state)

    def per_block():
        hidden = x
        for block in model:
            hidden = checkpoint(block, hidden, use_reentrant=False)
        return hidden

    def segments():
        return checkpoint_sequential(model, 4, x, use_reentrant=False)

    assert saved_bytes(segments, exclude=state) <= 0.5 * plain
    assert saved_bytes(per_block, exclude=state) <= 0.5 * plain
    reference = _grads(model, lambda: model(x))
    for forward in (per_block, segments):
        assert all(torch.equal(a, b) for a, b in zip(_grads(model, forward), reference, strict=True))


class _FakeCudaAllocator:
    """torch.cuda's memory counters, driven by hand: ``allocate`` and ``free`` move them."""

    def __init__(self, monkeypatch, allocated):
        self.allocated = self.peak = allocated
        fakes = {"memory_allocated": lambda device=None: self.allocated,
                 "max_memory_allocated": lambda device=None: self.peak,
                 "reset_peak_memory_stats": self.reset, "synchronize": lambda device=None: None}
        for name, fake in fakes.items():
            monkeypatch.setattr(torch.cuda, name, fake)

    def reset(self, device=None):
        self.peak = self.allocated

    def allocate(self, n):
        self.allocated += n
        self.peak = max(self.peak, self.allocated)

    def free(self, n):
        self.allocated -= n


def test_cuda_memory_is_counted_from_the_start_of_the_block(monkeypatch):
    allocator = _FakeCudaAllocator(monkeypatch, allocated=1000)
    allocator.allocate(5000)              # an earlier peak, forgotten when the block starts
    allocator.free(5000)

    def forward():
        allocator.allocate(300)           # activations, freed before returning
        allocator.allocate(200)           # the result, still referenced after
        allocator.free(300)
        return "result"

    assert cuda_memory_of(forward, "cuda") == {"peak_bytes": 500, "kept_bytes": 200}
    with track_cuda_memory("cuda:0") as usage:
        allocator.allocate(50)
    assert (usage.peak_bytes, usage.kept_bytes) == (50, 50)


def test_cuda_memory_is_none_or_refused_off_cuda():
    with track_cuda_memory("cpu") as usage:
        torch.zeros(10)
    assert usage.peak_bytes is None and usage.kept_bytes is None
    with pytest.raises(RuntimeError, match="CUDA"):
        cuda_memory_of(lambda: None, "cpu")


# ------------------------------------------------------------------------------------- distributed
def test_free_port_is_bindable_and_backend_fits_the_machine():
    port = distributed.free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    assert distributed.pick_backend(2) in ("gloo", "nccl")
    if not torch.cuda.is_available():
        assert distributed.pick_backend(2) == "gloo"


def test_contiguous_shard():
    x = torch.arange(12)
    assert distributed.contiguous_shard(x, 3, 1).tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError):
        distributed.contiguous_shard(x, 5, 0)


@pytest.mark.torchrun
def test_two_gloo_processes_average_to_the_single_process_gradient():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
    train_x, train_y = torch.randn(3 * 16, 12), torch.randint(0, 3, (3 * 16,))
    runs = distributed.run_ddp(model, x, y, train_x=train_x, train_y=train_y, batch_size=16, steps=3,
                               lr=0.1, world_size=2, backend="gloo", timeout_s=120)
    assert [r["rank"] for r in runs] == [0, 1] and runs.seconds > 0

    nn.functional.cross_entropy(model(x), y).backward()
    reference = {n: p.grad for n, p in model.named_parameters()}
    for r in runs:
        expected = list(DistributedSampler(range(8), num_replicas=2, rank=r["rank"], shuffle=False))
        assert r["batch_indices"] == expected
        torch.testing.assert_close(r["manual_grads"], reference)
        torch.testing.assert_close(r["ddp_grads"], reference)
        assert r["diff_before_ddp"] > 0 and r["diff_after_ddp"] == 0
        assert r["diff_after_training"] == 0 and r["steps"] == 3 and len(r["step_seconds"]) == 3
        assert r["buckets"] and r["buckets"][0]["params"][0].startswith("3.")  # last layer first
    assert not torch.equal(runs[0]["local_grads"]["1.weight"], runs[1]["local_grads"]["1.weight"])

    single = nn.Sequential(nn.Flatten(), nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    single.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(single.parameters(), lr=0.1)
    optimizer.zero_grad()
    nn.functional.cross_entropy(single(train_x[:16]), train_y[:16]).backward()
    optimizer.step()
    torch.testing.assert_close(runs[0]["params_after_first_step"],
                               {n: p.detach() for n, p in single.named_parameters()})


def test_the_torchrun_entry_joins_through_the_environment(monkeypatch, capsys):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(distributed.free_port()), "GLOO_SOCKET_IFNAME": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")      # unset, and unset again after the test
    distributed.main(["--steps", "2", "--batch-size", "8"])
    assert capsys.readouterr().out.startswith("rank 0/1 (local rank 0, gloo): 16 examples")
    assert os.environ.get("GLOO_SOCKET_IFNAME") == distributed.loopback_interface()


@pytest.mark.torchrun
def test_a_failing_worker_is_reported_not_hung(tmp_path):
    with pytest.raises(Exception, match="FileNotFoundError|No such file"):
        distributed.launch(distributed.ddp_worker, 2,
                           (2, distributed.free_port(), str(tmp_path / "missing.pt"), str(tmp_path)),
                           timeout_s=60)


def test_meter_table_and_ddp_messages_speak_the_edition_language(english, monkeypatch, capsys):
    import course

    layer = nn.Linear(5, 3)
    with SavedTensorMeter(exclude=layer.parameters()) as meter:
        layer(torch.randn(4, 5, requires_grad=True))
    course.set_language("es")
    table = meter.table().splitlines()
    with pytest.raises(ValueError, match="no se divide en 2 partes iguales"):
        distributed.contiguous_shard(torch.zeros(5), 2, 0)
    course.set_language("en")
    assert table[0].split() == ["#", "forma", "dtype", "bytes", "almac.", "nota"]
    assert "parámetro (no se cuenta)" in table[2] and table[-1].startswith("contados: 1 almacenamientos")
    assert meter.table().splitlines()[0].split()[1] == "shape"

    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(distributed.free_port()), "GLOO_SOCKET_IFNAME": ""}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    distributed.main(["--steps", "1", "--batch-size", "8", "--language", "es"])
    assert capsys.readouterr().out.startswith("rank 0/1 (rank local 0, gloo): 8 ejemplos, última pérdida")


# ------------------------------------------------------------------------------- torchrun, reliably
def _summary(root: tuple, *others: tuple) -> str:
    """torchrun's report of a failed launch: ``(local rank, exit code)`` of the first observed failure
    and of the others, laid out as torchrun 2.x prints them after its own traceback."""
    def block(number, rank, code):
        killed = f"  ({distributed._signal_name(code)})" if code < 0 else ""
        return (f"[{number}]:\n  time      : 2026-12-01_11:02:40\n  host      : localhost\n"
                f"  rank      : {rank} (local_rank: {rank})\n"
                f"  exitcode  : {code} (pid: {900 + rank}){killed}\n"
                f"  error_file: <N/A>\n  traceback : -\n")
    rule = "=" * 54
    return (f"E1201 11:02:40.376000 9075 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
            f"(exitcode: {root[1]}) local_rank: {root[0]} (pid: 9103) of binary: python\n"
            "Traceback (most recent call last):\n"
            "  File \"torch/distributed/run.py\", line 1142, in <module>\n"
            "    main()\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            f"{rule}\ntrain.py FAILED\n{'-' * 54}\nFailures:\n"
            + "".join(block(n + 1, *other) for n, other in enumerate(others))
            + f"{'-' * 54}\nRoot Cause (first observed failure):\n{block(0, *root)}{rule}\n")


ABORTED = distributed.TorchrunLaunch(
    1, stderr=_summary((1, -6), (0, -15)),
    ranks={0: "[rank0]: RuntimeError: Connection closed by peer\n",
           1: "terminate called after throwing an instance of 'gloo::IoException'\n"})
RAISED = distributed.TorchrunLaunch(
    1, stderr=_summary((1, 1), (0, -15)),
    ranks={0: "[rank0]: RuntimeError: Connection closed by peer\n",
           1: "[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: the script's own error\n"})


def _launches(monkeypatch, *launches) -> list:
    """Launches faked one after the other; returns the list of the calls made."""
    calls = []

    def once(folder, processes, script, arguments, timeout_s):
        calls.append((folder, processes, script, tuple(arguments), timeout_s))
        return launches[len(calls) - 1]

    monkeypatch.setattr(distributed, "_torchrun_once", once)
    return calls


def test_a_process_killed_by_a_signal_is_launched_once_more_and_the_retry_is_told(monkeypatch):
    fine = distributed.TorchrunLaunch(0, stdout="done\n")
    calls = _launches(monkeypatch, ABORTED, fine)
    told = []
    launch = distributed.torchrun("folder", 2, "train.py", "--seed", 3, timeout_s=30, report=told.append)
    assert calls == [("folder", 2, "train.py", ("--seed", 3), 30)] * 2
    assert launch.returncode == 0 and launch.stdout == "done\n" and launch.earlier is ABORTED
    assert told == [launch.retried] and len(told[0].splitlines()) == 1
    assert all(part in told[0] for part in ("launched once more", "rank 1: SIGABRT", "gloo::IoException"))


def test_torchrun_itself_killed_by_a_signal_is_launched_once_more(monkeypatch):
    calls = _launches(monkeypatch, distributed.TorchrunLaunch(-9), distributed.TorchrunLaunch(0))
    launch = distributed.torchrun("folder", 2, "train.py", report=lambda line: None)
    assert len(calls) == 2 and launch.returncode == 0 and "torchrun: SIGKILL" in launch.retried


def test_a_signal_twice_fails_with_the_second_launch_and_says_it_was_retried(monkeypatch):
    _launches(monkeypatch, ABORTED, ABORTED)
    launch = distributed.torchrun("folder", 2, "train.py", report=lambda line: None)
    assert launch.returncode == 1 and launch.retried and launch.killed_by() == "SIGABRT"
    assert "stderr of rank 1 (exit code -6, SIGABRT):" in launch.errors()


@pytest.mark.parametrize("launch", [RAISED, distributed.TorchrunLaunch(None, timeout_s=5),
                                    distributed.TorchrunLaunch(0)], ids=["exception", "timeout", "success"])
def test_an_exception_a_timeout_or_a_success_is_launched_once(monkeypatch, launch):
    calls = _launches(monkeypatch, launch)
    told = []
    assert distributed.torchrun("folder", 2, "train.py", report=told.append) is launch
    assert len(calls) == 1 and told == [] and launch.killed_by() == ""


def test_what_a_failed_launch_tells():
    assert RAISED.failed_ranks() == [(1, 1), (0, -15)] and ABORTED.failed_ranks() == [(1, -6), (0, -15)]
    assert RAISED.cause() == "rank 1: exit code 1: [rank1]: ValueError: the script's own error"
    assert ABORTED.cause() == ("rank 1: SIGABRT: terminate called after throwing an instance of "
                               "'gloo::IoException'")
    assert distributed.TorchrunLaunch(None, timeout_s=5).cause() == "timeout (5 s)"
    assert distributed.TorchrunLaunch(0).cause() == ""
    errors = RAISED.errors()
    order = ["stderr of rank 1 (exit code 1):", "ValueError: the script's own error",
             "stderr of rank 0 (exit code -15, SIGTERM):", "torchrun:"]
    assert [errors.index(part) for part in order] == sorted(errors.index(part) for part in order)
    assert "ChildFailedError" not in errors and "Root Cause" not in errors      # said by the headings
    assert "failed (exitcode: 1) local_rank: 1" in errors
    before_summary = distributed.TorchrunLaunch(1, stderr="failed (exitcode: -11) local_rank: 0 (pid: 1)")
    assert before_summary.failed_ranks() == [(0, -11)] and before_summary.killed_by() == "SIGSEGV"


def test_the_kept_error_has_its_head_and_its_tail(english):
    lines = [f"line {number}" for number in range(300)]
    kept = distributed.excerpt("\n".join(lines), head=5, tail=7)
    assert kept[:5] == lines[:5] and kept[-7:] == lines[-7:] and kept[5] == "… (288 lines left out) …"
    noise = "[W socket.cpp] The hostname of the client socket cannot be retrieved"
    assert distributed.excerpt(f"a\n{noise}\nb\n") == ["a", "b"]
    long = distributed.TorchrunLaunch(1, stderr=_summary((1, 1)), ranks={1: "\n".join(lines)})
    errors = long.errors(head=5, tail=7)
    assert "line 0\n" in errors and "line 299" in errors and "line 150" not in errors


def test_a_retry_and_a_kept_error_speak_the_edition_language(english, monkeypatch):
    import course

    course.set_language("es")
    _launches(monkeypatch, ABORTED, ABORTED)
    launch = distributed.torchrun("folder", 2, "train.py", report=lambda line: None)
    assert "se lanzó una vez más" in launch.retried
    assert "stderr del rank 1 (código de salida -6, SIGABRT):" in launch.errors()
    assert "líneas omitidas" in distributed.excerpt("\n".join(map(str, range(99))))[12]


FLAKY = """\
import os
import pathlib

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1 and not pathlib.Path("aborted-once").exists():
    pathlib.Path("aborted-once").touch()
    os.abort()
print(f"rank {dist.get_rank()} done", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.torchrun
def test_a_real_launch_aborted_once_is_launched_again_and_succeeds(tmp_path):
    (tmp_path / "flaky.py").write_text(FLAKY)
    told = []
    launch = distributed.torchrun(tmp_path, 2, "flaky.py", timeout_s=120, report=told.append)
    assert launch.returncode == 0, launch.errors()
    assert launch.stdout.count(" done") == 2          # both ranks finished (their lines may interleave)
    assert told == [launch.retried] and "rank 1: SIGABRT" in launch.retried
    assert launch.earlier.killed_by() == "SIGABRT" and 1 in launch.earlier.ranks
