import gzip

import pytest
from torchvision.datasets import FashionMNIST

from course.data import (
    FIX_COMMAND,
    RAW_FILES,
    SYSTEM_DIRS,
    DataNotFoundError,
    ensure_fashion_mnist,
    fashion_mnist,
)


def _fake_gz_folder(folder):
    folder.mkdir(parents=True)
    for name in RAW_FILES:
        with gzip.open(folder / f"{name}.gz", "wb") as f:
            f.write(name.encode())
    return folder


def test_data_folder_comes_first(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in RAW_FILES:
        (raw / name).write_bytes(b"local")
    system = _fake_gz_folder(tmp_path / "system")
    assert ensure_fashion_mnist(tmp_path, system_dirs=[system], download=False) == tmp_path
    assert (raw / RAW_FILES[0]).read_bytes() == b"local"


def test_gz_files_dropped_into_data_are_unpacked(tmp_path):
    _fake_gz_folder(tmp_path / "FashionMNIST" / "raw")
    ensure_fashion_mnist(tmp_path, system_dirs=[], download=False)
    assert (tmp_path / "FashionMNIST" / "raw" / RAW_FILES[2]).read_bytes() == RAW_FILES[2].encode()


def test_debian_package_folder_is_unpacked_into_data(tmp_path):
    system = _fake_gz_folder(tmp_path / "usr-share")
    root = tmp_path / "data"
    ensure_fashion_mnist(root, system_dirs=[system], download=False)
    for name in RAW_FILES:
        assert (root / "FashionMNIST" / "raw" / name).read_bytes() == name.encode()


def test_nothing_anywhere_and_no_network_gives_the_promised_message(tmp_path, monkeypatch):
    # An address where nothing listens: the download fails at once, as it does offline.
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])
    empty_system = tmp_path / "no-package"
    with pytest.raises(DataNotFoundError) as caught:
        ensure_fashion_mnist(tmp_path / "data", system_dirs=[empty_system])
    message = str(caught.value)
    assert str(tmp_path / "data" / "FashionMNIST" / "raw") in message
    assert str(empty_system) in message
    assert "torchvision download" in message
    assert FIX_COMMAND in message


def test_real_fashion_mnist_from_the_debian_package(tmp_path):
    """CI installs dataset-fashion-mnist (.ci/run); the real files must load through torchvision."""
    test_set = fashion_mnist(train=False, root=tmp_path)
    image, label = test_set[0]
    assert len(test_set) == 10_000
    assert image.size == (28, 28) and 0 <= label <= 9
    assert all(folder.exists() for folder in SYSTEM_DIRS)


def test_the_message_and_class_names_speak_the_edition_language(tmp_path, spanish):
    from course.data import CLASSES, class_names

    with spanish():
        with pytest.raises(DataNotFoundError) as caught:
            ensure_fashion_mnist(tmp_path / "data", system_dirs=[tmp_path / "none"], download=False)
        names = class_names()
    message = str(caught.value)
    assert message.startswith("No se encontró FashionMNIST. Lugares probados, en orden:")
    assert "paquete de Debian" in message and f"Solución: ejecuta `{FIX_COMMAND}`" in message
    assert names[1] == "Pantalón" and len(names) == len(CLASSES) == 10
    assert class_names() == CLASSES
