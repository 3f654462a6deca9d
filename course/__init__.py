"""Helpers the lesson notebooks import: settings, device, data, pictures and metrics.

Used by every lesson; taught in lesson 01 (tensors), setup cell.

A function that two lessons need is defined here once and imported by both.
"""

import logging

from course.data import DataNotFoundError, ensure_fashion_mnist, fashion_mnist
from course.device import describe_device, pick_device
from course.metrics import record_metric
from course.settings import device_from_env, fast_from_env, get_language, say, set_language

# torch.utils.benchmark imports torch's C++-extension builder, which warns on stderr when a CUDA
# toolkit is installed but no GPU is (common on shared hubs); the lessons build no extension.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)

__all__ = [
    "DataNotFoundError",
    "describe_device",
    "device_from_env",
    "ensure_fashion_mnist",
    "fashion_mnist",
    "fast_from_env",
    "get_language",
    "pick_device",
    "record_metric",
    "say",
    "set_language",
]
