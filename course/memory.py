"""Activation memory, measured: what the forward pass keeps for the backward pass.

Taught in lesson 07 (scale), sections 1 and 2.

Autograd saves some tensors during the forward pass (a layer's input, an activation's output, the
statistics of a normalisation) because the backward pass needs them. They stay alive until
``backward()`` has used them, and at scale they, not the parameters, fill the memory.

:class:`SavedTensorMeter` counts them on any device with
``torch.autograd.graph.saved_tensors_hooks``: every tensor autograd saves passes through the
meter's *pack* hook, which notes the storage it lives in. A storage saved twice (the output of a
ReLU is saved by the ReLU and again, as its input, by the next linear layer) is counted once, and
the storages of tensors passed as ``exclude`` (usually the model's parameters, which exist with or
without a graph) are not counted at all.

On CUDA the allocator keeps its own counts: :func:`track_cuda_memory` (a ``with`` block) and
:func:`cuda_memory_of` (a call) read the peak and what stays allocated, to compare with the meter.
"""

import contextlib
from dataclasses import dataclass

import torch

from course.settings import say
from course.timing import synchronize

__all__ = ["CudaMemory", "SavedRecord", "SavedTensorMeter", "cuda_memory_of", "model_saved_bytes",
           "model_state_tensors", "saved_bytes", "track_cuda_memory"]


@dataclass(frozen=True)
class SavedRecord:
    """One tensor autograd saved: its shape, dtype, and the bytes of the storage it lives in.

    ``counted`` is False when the storage was already counted or belongs to an excluded tensor.
    """

    shape: tuple
    dtype: torch.dtype
    storage_bytes: int
    counted: bool
    excluded: bool


def _storage_key(tensor: torch.Tensor):
    storage = tensor.untyped_storage()
    return (tensor.device.type, tensor.device.index, storage.data_ptr())


class SavedTensorMeter:
    """Count the bytes autograd saves for backward while the ``with`` block runs.

    >>> with SavedTensorMeter(exclude=model.parameters()) as meter:
    ...     loss = model(x).sum()
    >>> meter.bytes          # distinct storages kept for backward, parameters left out

    The meter does not change what is saved: its hooks hand every tensor back untouched. It holds a
    reference to each counted storage only while the block runs (so that a freed address reused by
    a new tensor cannot be mistaken for the same storage); afterwards it keeps numbers only.
    Hooks nest: inside a region that installs its own hooks (``torch.utils.checkpoint`` with
    ``use_reentrant=False`` does), the innermost hooks win and the meter sees only what the region
    hands to the outer graph, which is exactly what stays in memory.
    """

    def __init__(self, exclude=()):
        self._excluded = {_storage_key(t) for t in exclude}
        self._seen: dict = {}
        self._alive: list = []
        self.records: list[SavedRecord] = []
        self._hooks = None

    # the hooks: pack sees every saved tensor, unpack gives it back to backward
    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        excluded = key in self._excluded
        counted = not excluded and key not in self._seen
        nbytes = tensor.untyped_storage().nbytes()
        if counted:
            self._seen[key] = nbytes
            self._alive.append(tensor.untyped_storage())
        self.records.append(SavedRecord(tuple(tensor.shape), tensor.dtype, nbytes, counted, excluded))
        return tensor

    @staticmethod
    def _unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def __enter__(self) -> "SavedTensorMeter":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self._hooks.__exit__(*exc_info)
        self._hooks = None
        self._alive = []

    @property
    def bytes(self) -> int:
        """Bytes of the distinct, non-excluded storages saved so far."""
        return sum(self._seen.values())

    @property
    def count(self) -> int:
        """How many distinct, non-excluded storages were saved."""
        return len(self._seen)

    @property
    def saves(self) -> int:
        """How many times autograd saved a tensor (repeats and excluded ones included)."""
        return len(self.records)

    def table(self, limit: int = 20) -> str:
        """The saved tensors as text, one per line, in the order autograd saved them."""
        shape = say({"es": "forma", "en": "shape"})
        size = say({"es": "bytes almac.", "en": "storage bytes"})
        width = max(13, len(size))
        lines = [f"{'#':>3}  {shape:<18} {'dtype':<14} {size:>{width}}  " + say({"es": "nota", "en": "note"})]
        excluded = say({"es": "parámetro (no se cuenta)", "en": "parameter (not counted)"})
        again = say({"es": "el mismo almacenamiento otra vez", "en": "same storage again"})
        for i, r in enumerate(self.records[:limit], start=1):
            note = excluded if r.excluded else ("" if r.counted else again)
            lines.append(f"{i:>3}  {str(r.shape):<18} {str(r.dtype):<14} {r.storage_bytes:>{width},}  {note}")
        if len(self.records) > limit:
            more = len(self.records) - limit
            lines.append(say({"es": f"... {more} más", "en": f"... {more} more"}))
        lines.append(say({"es": f"contados: {self.count} almacenamientos, {self.bytes:,} bytes",
                          "en": f"counted: {self.count} storages, {self.bytes:,} bytes"}))
        return "\n".join(lines)


def saved_bytes(fn, *args, exclude=(), **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` under a :class:`SavedTensorMeter`; the bytes it saved."""
    meter = SavedTensorMeter(exclude=exclude)
    with meter:
        result = fn(*args, **kwargs)
    del result  # kept alive until the count was complete
    return meter.bytes


def model_state_tensors(model: torch.nn.Module) -> list:
    """The model's own tensors (parameters and buffers): they exist with or without a graph."""
    return [*model.parameters(), *model.buffers()]


def model_saved_bytes(model: torch.nn.Module, *inputs) -> int:
    """Bytes the forward pass ``model(*inputs)`` keeps for backward, the model's parameters and
    buffers (say BatchNorm's running statistics) left out."""
    return saved_bytes(model, *inputs, exclude=model_state_tensors(model))


@dataclass
class CudaMemory:
    """CUDA memory a block used, in bytes above what was allocated when it started (``None`` off CUDA)."""

    peak_bytes: int | None = None
    kept_bytes: int | None = None


@contextlib.contextmanager
def track_cuda_memory(device):
    """Measure the CUDA memory of the ``with`` block: ``with track_cuda_memory(device) as usage: ...``.

    ``usage.peak_bytes`` comes from ``torch.cuda.max_memory_allocated`` (its peak reset when the block
    starts), ``usage.kept_bytes`` from ``memory_allocated`` when it ends; both minus the bytes allocated
    when it started. Other devices have no such counters: both stay ``None``.
    """
    usage = CudaMemory()
    device = torch.device(device)
    if device.type != "cuda":
        yield usage
        return
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    yield usage
    synchronize(device)
    usage.kept_bytes = torch.cuda.memory_allocated(device) - before
    usage.peak_bytes = torch.cuda.max_memory_allocated(device) - before


def cuda_memory_of(fn, device) -> dict:
    """What ``fn()`` costs in CUDA memory: the peak above the start, and what it still holds after.

    ``{"peak_bytes", "kept_bytes"}`` as :func:`track_cuda_memory` measures them, ``kept_bytes`` while
    the result of ``fn`` is still referenced. Only meaningful on CUDA; on other devices a
    ``RuntimeError`` says so.
    """
    device = torch.device(device)
    if device.type != "cuda":
        raise RuntimeError(say({"es": f"cuda_memory_of necesita un dispositivo CUDA; recibió {device}",
                                "en": f"cuda_memory_of needs a CUDA device, got {device}"}))
    with track_cuda_memory(device) as usage:
        result = fn()
    del result  # referenced until the block ended, so that kept_bytes counts it
    return {"peak_bytes": usage.peak_bytes, "kept_bytes": usage.kept_bytes}
