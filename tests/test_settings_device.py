import pytest
import torch

from course.device import describe_device, pick_device
from course.settings import device_from_env, fast_from_env


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("0", False), (" 1 ", True)])
def test_fast_from_env_reads_zero_or_one(monkeypatch, raw, expected):
    monkeypatch.setenv("COURSE_FAST", raw)
    assert fast_from_env() is expected


def test_fast_from_env_defaults_to_full_mode(monkeypatch):
    monkeypatch.delenv("COURSE_FAST", raising=False)
    assert fast_from_env() is False


def test_fast_from_env_rejects_other_values_with_advice(monkeypatch):
    monkeypatch.setenv("COURSE_FAST", "yes")
    with pytest.raises(ValueError, match="COURSE_FAST must be 0 or 1, got 'yes'"):
        fast_from_env()


def test_device_from_env(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    assert device_from_env() == "auto"
    monkeypatch.setenv("COURSE_DEVICE", "CPU")
    assert device_from_env() == "cpu"
    monkeypatch.setenv("COURSE_DEVICE", "tpu")
    with pytest.raises(ValueError, match="one of auto, cpu, cuda, mps, got 'tpu'"):
        device_from_env()


def test_pick_device_auto_takes_what_exists():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available() and torch.backends.mps.is_available():
        expected = "mps"
    assert pick_device("auto").type == expected
    assert pick_device("cpu") == torch.device("cpu")


def test_pick_device_refuses_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="COURSE_DEVICE=cuda.*Set COURSE_DEVICE=auto"):
        pick_device("cuda")
    with pytest.raises(ValueError, match="Unknown device 'gpu'"):
        pick_device("gpu")


def test_describe_device_names_cpu_threads():
    assert describe_device(torch.device("cpu")) == f"cpu ({torch.get_num_threads()} threads)"


def test_device_texts_speak_the_edition_language(spanish):
    with spanish():
        described = describe_device(torch.device("cpu"))
        with pytest.raises(ValueError, match="Dispositivo desconocido 'gpu'"):
            pick_device("gpu")
    assert described == f"cpu ({torch.get_num_threads()} hilos)"
