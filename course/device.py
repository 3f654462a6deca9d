"""Choosing the device once, the way every lesson does it.

Used by every lesson; taught in lesson 01 (tensors), section 8. Lesson 06 (mixed_precision),
section 1, comes back to it.
"""

import torch

from course.settings import DEVICE_CHOICES, say


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def pick_device(choice: str = "auto") -> torch.device:
    """Turn ``auto``/``cpu``/``cuda``/``mps`` into a ``torch.device`` that exists here.

    ``auto`` prefers CUDA, then Apple's MPS, then the CPU. Asking for a device this machine
    lacks is an error rather than a silent fallback, so a GPU run never measures the CPU.
    """
    choice = str(choice).strip().lower()
    if choice not in DEVICE_CHOICES:
        choices = ", ".join(DEVICE_CHOICES)
        raise ValueError(say({"es": f"Dispositivo desconocido {choice!r}: usa uno de {choices}.",
                              "en": f"Unknown device {choice!r}: use one of {choices}."}))
    if choice == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(_missing("cuda", "torch.cuda.is_available()"))
    if choice == "mps" and not _mps_available():
        raise RuntimeError(_missing("mps", "torch.backends.mps.is_available()"))
    return torch.device(choice)


def _missing(choice: str, probe: str) -> str:
    return say({
        "es": f"COURSE_DEVICE={choice}, pero {probe} es False en esta máquina. "
              "Pon COURSE_DEVICE=auto (o cpu) para usar lo que hay aquí.",
        "en": f"COURSE_DEVICE={choice}, but {probe} is False on this machine. "
              "Set COURSE_DEVICE=auto (or cpu) to run on what is here.",
    })


def describe_device(device: torch.device) -> str:
    """A one-line name for reports: ``cpu (2 threads)`` or the GPU's name."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return say({"es": f"cpu ({threads} hilos)", "en": f"cpu ({threads} threads)"})
    return device.type
