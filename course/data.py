"""FashionMNIST, found without surprises.

Taught in lesson 04 (training_loop), section 1; also used by lesson 07 (scale).

Looked for in this order: ``data/FashionMNIST/raw/`` (or ``$COURSE_DATA_DIR``), the Debian/Ubuntu
package ``dataset-fashion-mnist``, then torchvision's download. When none works, the error names
every place tried and the one command that fixes it.
"""

import gzip
import os
import shutil
from pathlib import Path

from course.settings import get_language, say

RAW_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)
FIX_COMMAND = "sudo apt-get install dataset-fashion-mnist"
CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
# The same classes in the Spanish edition, in the same order (the words the lessons' prose uses).
CLASSES_ES = (
    "Camiseta/top", "Pantalón", "Jersey", "Vestido", "Abrigo",
    "Sandalia", "Camisa", "Zapatilla", "Bolso", "Botín",
)


def class_names() -> tuple:
    """The ten class names in the edition's language (:data:`CLASSES` stays English: it is data)."""
    return CLASSES_ES if get_language() == "es" else CLASSES


class DataNotFoundError(RuntimeError):
    """FashionMNIST is nowhere this machine can reach."""


def default_data_root() -> Path:
    """``$COURSE_DATA_DIR``, else the repository's ``data/``, else a per-user cache."""
    if os.environ.get("COURSE_DATA_DIR"):
        return Path(os.environ["COURSE_DATA_DIR"]).expanduser()
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").exists():
        return repo / "data"
    return Path.home() / ".cache" / "pytorch-course" / "data"


def _has_all(folder: Path, suffix: str = "") -> bool:
    return all((folder / (name + suffix)).is_file() for name in RAW_FILES)


def _unpack_into(source: Path, raw: Path) -> None:
    raw.mkdir(parents=True, exist_ok=True)
    for name in RAW_FILES:
        target = raw / name
        if target.is_file():
            continue
        partial = target.with_suffix(".partial")
        with gzip.open(source / (name + ".gz"), "rb") as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
        partial.replace(target)


def ensure_fashion_mnist(root=None, system_dirs=SYSTEM_DIRS, download: bool = True) -> Path:
    """Make the four raw FashionMNIST files available under ``root/FashionMNIST/raw``.

    Returns ``root``, ready for ``torchvision.datasets.FashionMNIST(root, download=False)``.
    """
    root = Path(root) if root is not None else default_data_root()
    raw = root / "FashionMNIST" / "raw"
    tried = []

    if _has_all(raw):
        return root
    tried.append(say({"es": f"{raw}/ (los cuatro archivos, sin comprimir o .gz)",
                      "en": f"{raw}/ (the four files, raw or .gz)"}))
    if _has_all(raw, ".gz"):
        _unpack_into(raw, raw)
        return root

    for folder in map(Path, system_dirs):
        tried.append(say({"es": f"{folder}/*.gz (paquete de Debian dataset-fashion-mnist)",
                          "en": f"{folder}/*.gz (Debian package dataset-fashion-mnist)"}))
        if _has_all(folder, ".gz"):
            _unpack_into(folder, raw)
            return root

    if download:
        from torchvision.datasets import FashionMNIST

        try:
            FashionMNIST(str(root), train=True, download=True)
            FashionMNIST(str(root), train=False, download=True)
            return root
        except Exception as error:  # any network or mirror failure ends in the same advice
            tried.append(say({"es": f"descarga de torchvision en {raw}/ (falló: {error})",
                              "en": f"torchvision download into {raw}/ (failed: {error})"}))

    places = "\n".join(f"  - {place}" for place in tried)
    raise DataNotFoundError(say({
        "es": "No se encontró FashionMNIST. Lugares probados, en orden:\n"
              f"{places}\n"
              f"Solución: ejecuta `{FIX_COMMAND}` (o copia los cuatro archivos .gz en {raw}/) y vuelve "
              "a ejecutar.",
        "en": "FashionMNIST was not found. Places tried, in order:\n"
              f"{places}\n"
              f"Fix: run `{FIX_COMMAND}` (or copy the four .gz files into {raw}/), then run again.",
    }))


def fashion_mnist(train: bool = True, transform=None, root=None):
    """The torchvision FashionMNIST dataset, from wherever :func:`ensure_fashion_mnist` found it."""
    from torchvision.datasets import FashionMNIST

    root = ensure_fashion_mnist(root)
    return FashionMNIST(str(root), train=train, transform=transform, download=False)
