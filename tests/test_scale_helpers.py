"""The helpers lesson 07 stands on: the saved-tensor meter, checkpointing, and a real 2-process DDP run."""

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
