"""Training on FashionMNIST: data loaders, small models, a reference loop, pictures, a widget.

Taught in lesson 04 (training_loop), sections 1, 2, 4, 7 and 9; also used by lesson 07 (scale).
Lesson 07 imports these pieces instead of copying them.

The lesson asks students to write their own ``train_one_epoch``, ``evaluate``, ``fit`` and classifier,
and grades them by behaviour. The course's versions here carry other names and other, keyword-only
required arguments (:func:`run_epoch`, :func:`fit_model`, :func:`make_cnn`), and the lesson's checks
switch them off while they run a student's function (``graders.lesson_checks.training_loop``): this
module is shipped to students, so it cannot be what answers the exercises.
"""

import contextlib
import copy
import itertools
import math
import time
from dataclasses import dataclass, field

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import MaxNLocator
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data._utils.collate import default_collate

from course.data import CLASSES, class_names, fashion_mnist
from course.plots import figure_png, offscreen_figure
from course.settings import say
from course.timing import stopwatch

# Pixel statistics of the 60,000 training images scaled to [0, 1], computed once with
# compute_mean_std(fashion_mnist(train=True).data): mean 0.28604, std 0.35302. Only the training
# split is used, so nothing about the test images leaks into the preprocessing.
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530

# Sizes of the splits. FAST (CI, grading) keeps the same code path on small, seeded subsets.
FULL_SIZES = {"train": 55_000, "val": 5_000, "test": 10_000}
FAST_SIZES = {"train": 4_000, "val": 500, "test": 1_000}

__all__ = [
    "CLASSES", "FASHION_MEAN", "FASHION_STD", "FAST_SIZES", "FULL_SIZES",
    "EpochResult", "FashionTensors", "History", "LearningRateExplorer", "LiveCurves",
    "collate_batch", "compare_loading", "compute_mean_std", "confusion_matrix", "fashion_splits",
    "fast_subset", "fit_model", "make_cnn", "make_loader", "make_mlp", "normalize", "plot_confusion",
    "plot_history", "plot_samples", "predict", "progress", "random_shift_flip", "run_epoch",
    "set_progress",
]


# ---------------------------------------------------------------------------------------- progress
_progress_enabled = True


def set_progress(enabled: bool) -> None:
    """Turn every progress bar of this module on or off (they are on unless silenced)."""
    global _progress_enabled
    _progress_enabled = bool(enabled)


def progress(iterable, *, desc=None, total=None, enabled=None, leave=False):
    """``iterable`` wrapped in a ``tqdm.auto`` bar, or returned untouched when silenced.

    ``enabled=None`` follows :func:`set_progress`. In a notebook ``tqdm.auto`` draws a widget;
    elsewhere it writes to stderr, which is why grade cells never show one.
    """
    if not (_progress_enabled if enabled is None else enabled):
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=leave, dynamic_ncols=True)


# -------------------------------------------------------------------------------------------- data
def compute_mean_std(images) -> tuple[float, float]:
    """Mean and standard deviation of all pixels of ``uint8`` images, scaled to [0, 1] (float64)."""
    pixels = torch.as_tensor(images).to(torch.float64) / 255
    return pixels.mean().item(), pixels.std().item()


def normalize(images, mean: float = FASHION_MEAN, std: float = FASHION_STD) -> torch.Tensor:
    """``uint8`` images ``(N, 28, 28)`` or ``(N, 1, 28, 28)`` to normalised ``float32 (N, 1, 28, 28)``.

    The same numbers as ``ToTensor()`` followed by ``Normalize((mean,), (std,))``, for a whole
    batch in one operation.
    """
    images = torch.as_tensor(images)
    if images.ndim == 3:
        images = images.unsqueeze(1)
    # (x / 255 - mean) / std in two in-place operations on the new float tensor
    return images.to(torch.float32).mul_(1 / (255 * std)).sub_(mean / std)


def random_shift_flip(images: torch.Tensor, max_shift: int = 2, flip: bool = True,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Augment a batch ``(N, 1, H, W)``: each image moved by up to ``max_shift`` pixels, half mirrored.

    The shifted-in border is zero (the background). Random numbers come from ``generator`` or, by
    default, from torch's global generator (which DataLoader seeds differently in each worker).
    """
    n, _, h, w = images.shape
    out = images
    if max_shift > 0:
        padded = nn.functional.pad(images, (max_shift,) * 4)
        dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
        dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator)
        rows = (dy[:, None] + torch.arange(h))[:, :, None]  # (n, h, 1)
        cols = (dx[:, None] + torch.arange(w))[:, None, :]  # (n, 1, w)
        out = padded[torch.arange(n)[:, None, None], 0, rows, cols].unsqueeze(1)
    if flip:
        mirrored = torch.rand(n, generator=generator) < 0.5
        out = torch.where(mirrored[:, None, None, None], out.flip(-1), out)
    return out


class FashionTensors(Dataset):
    """FashionMNIST held as two in-memory tensors and normalised a whole batch at a time.

    ``dataset[i]`` gives ``(image (1, 28, 28) float32, label int)`` like torchvision's dataset with
    ``ToTensor()`` and ``Normalize``. ``__getitems__`` lets a DataLoader fetch a batch with one
    indexing operation instead of one Python call per image, which is what keeps data loading off
    the critical path on a machine with two cores.
    """

    def __init__(self, images, labels, *, augment: bool = False, mean: float = FASHION_MEAN,
                 std: float = FASHION_STD):
        images = torch.as_tensor(images)
        if images.ndim == 3:
            images = images.unsqueeze(1)
        if images.dtype != torch.uint8 or images.ndim != 4:
            got = f"{images.dtype} {tuple(images.shape)}"
            raise ValueError(say({
                "es": f"las imágenes deben ser uint8 (N, 28, 28) o (N, 1, 28, 28); son {got}",
                "en": f"images must be uint8 (N, 28, 28) or (N, 1, 28, 28), got {got}"}))
        labels = torch.as_tensor(labels, dtype=torch.int64)
        if len(labels) != len(images):
            raise ValueError(say({"es": f"{len(images)} imágenes pero {len(labels)} etiquetas",
                                  "en": f"{len(images)} images but {len(labels)} labels"}))
        self.images, self.labels = images, labels
        self.augment, self.mean, self.std = augment, mean, std

    def __len__(self) -> int:
        return len(self.labels)

    def __getitems__(self, indices):
        index = torch.as_tensor(indices, dtype=torch.int64)
        raw = self.images[index]
        if self.augment:
            raw = random_shift_flip(raw)
        return normalize(raw, self.mean, self.std), self.labels[index]

    def __getitem__(self, index):
        x, y = self.__getitems__([int(index)])
        return x[0], int(y[0])

    def subset(self, indices) -> "FashionTensors":
        index = torch.as_tensor(indices, dtype=torch.int64)
        return FashionTensors(self.images[index], self.labels[index], augment=self.augment,
                              mean=self.mean, std=self.std)

    def with_augment(self, augment: bool) -> "FashionTensors":
        return FashionTensors(self.images, self.labels, augment=augment, mean=self.mean, std=self.std)

    @classmethod
    def from_torchvision(cls, dataset, **kwargs) -> "FashionTensors":
        """From a torchvision MNIST-style dataset (its ``data`` and ``targets`` tensors)."""
        return cls(dataset.data, dataset.targets, **kwargs)


def collate_batch(batch):
    """A batch already built by ``__getitems__`` passes through; a list of samples is stacked."""
    if isinstance(batch, tuple):
        return batch
    return default_collate(batch)


def fast_subset(dataset, n: int, seed: int = 0):
    """A seeded random subset of ``n`` examples (the whole data set when it has ``n`` or fewer)."""
    if n >= len(dataset):
        return dataset
    index = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    if isinstance(dataset, FashionTensors):
        return dataset.subset(index)
    return Subset(dataset, index.tolist())


def fashion_splits(*, fast: bool, seed: int = 0, augment: bool = False, sizes: dict | None = None,
                   root=None) -> dict:
    """``{"train", "val", "test"}`` :class:`FashionTensors`.

    Train and validation are a seeded split of the 60,000 training images (validation chooses the
    best epoch, so it must not be the test set); test comes from the 10,000 test images. FAST uses
    :data:`FAST_SIZES`, otherwise :data:`FULL_SIZES`; ``sizes`` overrides either. Only the training
    split is augmented.
    """
    wanted = dict(FAST_SIZES if fast else FULL_SIZES, **(sizes or {}))
    train_all = FashionTensors.from_torchvision(fashion_mnist(train=True, root=root))
    test_all = FashionTensors.from_torchvision(fashion_mnist(train=False, root=root))
    if wanted["train"] + wanted["val"] > len(train_all):
        total = wanted["train"] + wanted["val"]
        raise ValueError(say({"es": f"train + val = {total} > {len(train_all)} imágenes",
                              "en": f"train + val = {total} > {len(train_all)} images"}))
    order = torch.randperm(len(train_all), generator=torch.Generator().manual_seed(seed))
    val = train_all.subset(order[: wanted["val"]])
    train = train_all.subset(order[wanted["val"]: wanted["val"] + wanted["train"]])
    return {
        "train": train.with_augment(augment),
        "val": val,
        "test": fast_subset(test_all, wanted["test"], seed=seed),
    }


def make_loader(dataset, *, batch_size: int, shuffle: bool, num_workers: int = 0, device=None,
                seed: int | None = None, drop_last: bool = False) -> DataLoader:
    """A DataLoader with the course's choices.

    ``pin_memory`` only when ``device`` is CUDA (page-locked memory speeds host-to-GPU copies and
    does nothing for CPU training); ``seed`` fixes the shuffling order; workers stay alive between
    epochs.
    """
    pin = device is not None and torch.device(device).type == "cuda"
    generator = torch.Generator().manual_seed(seed) if shuffle and seed is not None else None
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      pin_memory=pin, generator=generator, collate_fn=collate_batch,
                      drop_last=drop_last, persistent_workers=num_workers > 0)


# ------------------------------------------------------------------------------------------ models
def make_mlp(hidden: int = 256, *, dropout: float = 0.0, num_classes: int = 10) -> nn.Sequential:
    """Flatten the 28×28 image, one hidden ReLU layer, logits out."""
    layers = [nn.Flatten(), nn.Linear(28 * 28, hidden), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, num_classes))
    return nn.Sequential(*layers)


def make_cnn(channels=(16, 32), *, dropout: float = 0.0, num_classes: int = 10) -> nn.Sequential:
    """Blocks of conv 3×3 → BatchNorm → ReLU → max-pool 2×2 (one per entry of ``channels``), then
    a linear layer to the logits. Convolutions have no bias: the BatchNorm after them has one."""
    layers, size, previous = [], 28, 1
    for width in channels:
        layers += [nn.Conv2d(previous, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                   nn.ReLU(), nn.MaxPool2d(2)]
        size, previous = size // 2, width
    layers.append(nn.Flatten())
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(previous * size * size, num_classes))
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------------- reference loop
@dataclass
class EpochResult:
    """One pass over a loader: mean loss per example, accuracy, how many images, how long."""

    loss: float
    accuracy: float
    images: int
    seconds: float


@dataclass
class History:
    """What :func:`fit_model` saw, one entry per epoch (``step_loss``: one per training batch)."""

    train_loss: list = field(default_factory=list)
    train_acc: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)
    val_acc: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    step_loss: list = field(default_factory=list)
    best_epoch: int = -1
    best_val_acc: float = -math.inf
    seconds: float = 0.0
    best_state: dict | None = field(default=None, repr=False)

    @property
    def epochs(self) -> int:
        return len(self.train_loss)


# Not called train_one_epoch / evaluate / fit, and with keyword-only required arguments: lesson 04
# grades the students' own functions of those names, with these switched off (see the module docstring).
def run_epoch(model: nn.Module, loader, *, loss_fn, device, optimizer=None, scheduler=None,
              clip_norm: float | None = None, show_progress=None, desc: str | None = None,
              step_losses: list | None = None) -> EpochResult:
    """One pass over ``loader``: training when ``optimizer`` is given, evaluation otherwise.

    Training: ``model.train()``, then per batch zero_grad → forward → loss → backward → (clip) →
    step → (scheduler step: per batch, as ``OneCycleLR`` expects). Evaluation: ``model.eval()``
    under ``torch.inference_mode()``, and the model's previous mode restored afterwards. The loss is
    the mean per example (batches weighted by their size).
    """
    training = optimizer is not None
    was_training = model.training
    model.train(training)
    total_loss, correct, seen = 0.0, 0, 0
    start = time.perf_counter()
    if desc is None:
        desc = (say({"es": "entrenamiento", "en": "train"}) if training
                else say({"es": "evaluación", "en": "eval"}))
    bar = progress(loader, desc=desc, enabled=show_progress)
    loss_key, acc_key = say({"es": "pérdida", "en": "loss"}), say({"es": "exactitud", "en": "acc"})
    try:
        with contextlib.nullcontext() if training else torch.inference_mode():
            for x, y in bar:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                if training:
                    optimizer.zero_grad(set_to_none=True)
                logits = model(x)
                loss = loss_fn(logits, y)
                if training:
                    loss.backward()
                    if clip_norm is not None:
                        nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
                    optimizer.step()
                    if scheduler is not None:
                        scheduler.step()
                value = loss.item()
                if step_losses is not None:
                    step_losses.append(value)
                total_loss += value * len(y)
                correct += (logits.argmax(dim=1) == y).sum().item()
                seen += len(y)
                if bar is not loader and seen:
                    bar.set_postfix({loss_key: f"{total_loss / seen:.3f}", acc_key: f"{correct / seen:.3f}"},
                                    refresh=False)
    finally:
        if bar is not loader:
            bar.close()
        if not training:
            model.train(was_training)
    if seen == 0:
        raise ValueError(say({"es": "el loader no produjo ningún ejemplo",
                              "en": "the loader yielded no examples"}))
    return EpochResult(total_loss / seen, correct / seen, seen, time.perf_counter() - start)


def fit_model(model: nn.Module, train_loader, val_loader, *, loss_fn, optimizer, epochs: int, device,
              scheduler=None, clip_norm: float | None = None, show_progress=None,
              on_epoch=None) -> History:
    """Train for ``epochs``, validate after each, and leave ``model`` with its best epoch's weights.

    "Best" is the highest validation accuracy (the first one on a tie); its ``state_dict`` is copied
    (a copy, not a reference: the optimizer keeps changing the live tensors) and loaded back at the
    end. ``scheduler`` is stepped after every batch. ``on_epoch(history)`` runs after each epoch
    (for instance a :class:`LiveCurves`).
    """
    history = History()
    start = time.perf_counter()
    epoch_bar = progress(range(epochs), desc=say({"es": "épocas", "en": "epochs"}), enabled=show_progress,
                         leave=True)
    val_key, best_key = say({"es": "exactitud val", "en": "val_acc"}), say({"es": "mejor", "en": "best"})
    for epoch in epoch_bar:
        n = epoch + 1
        train = run_epoch(model, train_loader, loss_fn=loss_fn, device=device, optimizer=optimizer,
                          scheduler=scheduler, clip_norm=clip_norm, show_progress=show_progress,
                          desc=say({"es": f"época {n} entrenamiento", "en": f"epoch {n} train"}),
                          step_losses=history.step_loss)
        val = run_epoch(model, val_loader, loss_fn=loss_fn, device=device, show_progress=show_progress,
                        desc=say({"es": f"época {n} validación", "en": f"epoch {n} val"}))
        history.train_loss.append(train.loss)
        history.train_acc.append(train.accuracy)
        history.val_loss.append(val.loss)
        history.val_acc.append(val.accuracy)
        history.lr.append(optimizer.param_groups[0]["lr"])
        if val.accuracy > history.best_val_acc:
            history.best_val_acc, history.best_epoch = val.accuracy, epoch
            history.best_state = copy.deepcopy(model.state_dict())
        if hasattr(epoch_bar, "set_postfix"):
            epoch_bar.set_postfix({val_key: f"{val.accuracy:.3f}", best_key: f"{history.best_val_acc:.3f}"})
        history.seconds = time.perf_counter() - start
        if on_epoch is not None:
            on_epoch(history)
    if history.best_state is not None:
        model.load_state_dict(history.best_state)
    history.seconds = time.perf_counter() - start
    return history


# --------------------------------------------------------------------------------- metrics, figures
def predict(model: nn.Module, loader, *, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(predicted classes, true classes)`` over ``loader``, on the CPU; the model's mode is kept."""
    was_training = model.training
    model.eval()
    predictions, targets = [], []
    try:
        with torch.inference_mode():
            for x, y in loader:
                predictions.append(model(x.to(device)).argmax(dim=1).cpu())
                targets.append(torch.as_tensor(y).cpu())
    finally:
        model.train(was_training)
    return torch.cat(predictions), torch.cat(targets)


def confusion_matrix(predictions, targets, num_classes: int = 10) -> torch.Tensor:
    """``(C, C)`` int64 counts: row = true class, column = predicted class."""
    predictions = torch.as_tensor(predictions).reshape(-1).to(torch.int64).cpu()
    targets = torch.as_tensor(targets).reshape(-1).to(torch.int64).cpu()
    if predictions.shape != targets.shape:
        raise ValueError(say({"es": f"{len(predictions)} predicciones pero {len(targets)} objetivos",
                              "en": f"{len(predictions)} predictions but {len(targets)} targets"}))
    if len(targets) and (min(predictions.min(), targets.min()) < 0
                         or max(predictions.max(), targets.max()) >= num_classes):
        raise ValueError(say({"es": f"las clases deben estar en [0, {num_classes})",
                              "en": f"classes must lie in [0, {num_classes})"}))
    flat = targets * num_classes + predictions
    return torch.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


def plot_confusion(matrix, classes=CLASSES, *, normalize_rows: bool = True, ax=None,
                   title: str | None = None):
    """Draw a confusion matrix (rows: true class, shares of the row when ``normalize_rows``).

    The default ``classes`` are drawn in the edition's language; ``classes`` passed in are used as given.
    """
    if classes is CLASSES:
        classes = class_names()
    matrix = torch.as_tensor(matrix).to(torch.float64)
    shown = matrix / matrix.sum(dim=1, keepdim=True).clamp_min(1) if normalize_rows else matrix
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 5.6))
    else:
        fig = ax.figure
    image = ax.imshow(shown.numpy(), cmap="Blues", vmin=0)
    n = len(classes)
    ax.set_xticks(range(n), classes, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), classes, fontsize=8)
    ax.set_xlabel(say({"es": "clase predicha", "en": "predicted"}))
    ax.set_ylabel(say({"es": "clase real", "en": "true"}))
    top = shown.max().item() or 1.0
    for r in range(n):
        for c in range(n):
            value = shown[r, c].item()
            text = f"{value:.2f}" if normalize_rows else f"{int(value)}"
            if value:
                ax.text(c, r, text, ha="center", va="center", fontsize=7,
                        color="white" if value > top / 2 else "black")
    accuracy = (matrix.diag().sum() / matrix.sum().clamp_min(1)).item()
    ax.set_title(title or say({"es": f"matriz de confusión (exactitud {accuracy:.1%})",
                               "en": f"confusion matrix (accuracy {accuracy:.1%})"}), fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_samples(images, labels, classes=CLASSES, *, predictions=None, columns: int = 8,
                 mean: float = FASHION_MEAN, std: float = FASHION_STD):
    """A grid of images with their class names (and predictions, red when wrong).

    ``images``: uint8 ``(N, 28, 28)`` or normalised float ``(N, 1, 28, 28)`` (shown un-normalised).
    The default ``classes`` are written in the edition's language; ``classes`` passed in as given.
    """
    if classes is CLASSES:
        classes = class_names()
    images = torch.as_tensor(images).detach().cpu()
    if images.dtype == torch.uint8:
        pixels = images.to(torch.float32) / 255
    else:
        pixels = images.to(torch.float32) * std + mean
    pixels = pixels.reshape(len(images), 28, 28).clamp(0, 1)
    labels = torch.as_tensor(labels).reshape(-1)
    rows = math.ceil(len(images) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(1.3 * columns, 1.55 * rows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= len(images):
            continue
        ax.imshow(pixels[i].numpy(), cmap="gray_r", vmin=0, vmax=1)
        title = classes[int(labels[i])]
        color = "black"
        if predictions is not None:
            guess = int(predictions[i])
            if guess != int(labels[i]):
                true = say({"es": "real", "en": "true"})
                title, color = f"{classes[guess]}\n({true}: {title})", "tab:red"
        ax.set_title(title, fontsize=8, color=color)
    fig.tight_layout()
    return fig


def _smooth(values, window: int):
    if window <= 1 or len(values) < window:
        return list(values)
    data = torch.tensor(values, dtype=torch.float64)
    kernel = torch.ones(window, dtype=torch.float64) / window
    return torch.nn.functional.conv1d(data[None, None], kernel[None, None])[0, 0].tolist()


def _draw_history(axes, histories: dict, per_step: bool, smooth: int) -> None:
    loss_ax, acc_ax = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    def by_epoch(values):
        return range(1, len(values) + 1), values

    train_word = say({"es": "entrenamiento", "en": "train"})
    val_word = say({"es": "validación", "en": "validation"})
    for (label, history), color in zip(histories.items(), itertools.cycle(colors)):
        name = f"{label} " if label else ""
        if per_step and history.step_loss:
            steps = _smooth(history.step_loss, smooth)
            offset = (len(history.step_loss) - len(steps)) // 2
            loss_ax.plot(range(offset + 1, offset + len(steps) + 1), steps, color=color,
                         label=label or None)
        else:
            loss_ax.plot(*by_epoch(history.train_loss), "-o", color=color, ms=3, label=f"{name}{train_word}")
            loss_ax.plot(*by_epoch(history.val_loss), "--", color=color, label=f"{name}{val_word}")
        acc_ax.plot(*by_epoch(history.val_acc), "-o", color=color, ms=3, label=f"{name}{val_word}")
        if not per_step and history.train_acc:
            acc_ax.plot(*by_epoch(history.train_acc), ":", color=color, label=f"{name}{train_word}")
        if history.best_epoch >= 0:
            acc_ax.plot([history.best_epoch + 1], [history.val_acc[history.best_epoch]], "*",
                        color=color, ms=12)
    for ax in (acc_ax,) if per_step else axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    epoch = say({"es": "época", "en": "epoch"})
    loss_ax.set_xlabel(say({"es": "paso de entrenamiento", "en": "training step"}) if per_step else epoch)
    loss_ax.set_ylabel(say({"es": "pérdida (media móvil)", "en": "loss (moving average)"})
                       if per_step and smooth > 1 else say({"es": "pérdida", "en": "loss"}))
    acc_ax.set_xlabel(epoch)
    acc_ax.set_ylabel(say({"es": "exactitud", "en": "accuracy"}))
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    acc_ax.set_title(say({"es": "★ = mejor época en validación (la que se conserva)",
                          "en": "★ = best validation epoch (the one kept)"}), fontsize=9)


def _as_histories(histories) -> dict:
    return {"": histories} if isinstance(histories, History) else dict(histories)


def plot_history(histories, *, per_step: bool = False, smooth: int = 1, title: str | None = None):
    """Loss (left) and accuracy (right) curves of one :class:`History` or ``{label: History}``."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    _draw_history(axes, _as_histories(histories), per_step, smooth)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _history_png(histories, *, per_step: bool, smooth: int, title: str | None) -> bytes:
    fig = offscreen_figure(figsize=(10, 3.6), dpi=80)
    axes = fig.subplots(1, 2)
    _draw_history(axes, _as_histories(histories), per_step, smooth)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return figure_png(fig)


class LiveCurves:
    """Curves redrawn in place after every epoch: pass an instance as ``fit_model(on_epoch=...)``."""

    def __init__(self, title: str | None = None):
        self.title = title
        self.handle = None
        self.frames = 0

    def __call__(self, history: History) -> None:
        from IPython.display import Image, display

        image = Image(data=_history_png(history, per_step=False, smooth=1, title=self.title))
        if self.handle is None:
            self.handle = display(image, display_id=True)
        else:
            self.handle.update(image)
        self.frames += 1


# -------------------------------------------------------------------------------------- throughput
def _train_steps(model: nn.Module, batches, loss_fn, optimizer, device) -> tuple[int, float]:
    """Training steps over ``batches``: ``(images, seconds)``, fetching each batch included."""
    model.train()
    seen = 0
    with stopwatch(device) as watch:
        for x, y in batches:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            seen += len(y)
    return seen, watch.seconds


def _endless(loader):
    while True:
        yield from loader


def compare_loading(model: nn.Module, loader, *, loss_fn, optimizer, device, batches: int = 20,
                    repeats: int = 3, chunk: int = 5) -> dict:
    """The same training steps fed by ``loader`` and by tensors already in memory.

    The first ``batches`` batches are copied to ``device`` once. Then, ``repeats`` times, both feeds
    take turns in chunks of ``chunk`` steps (which one goes first alternates), so that whatever else
    the machine is doing slows both alike. Returns the images per second of each feed and
    ``ratio = loader / memory`` (1.0: loading costs nothing; below 1: the model waits for data).
    """
    in_memory = [(x.to(device), y.to(device)) for x, y in itertools.islice(loader, batches)]
    stream = _endless(loader)
    _train_steps(model, in_memory[:2], loss_fn, optimizer, device)  # warm-up
    totals = {"loader": [0, 0.0], "memory": [0, 0.0]}
    turn = 0
    for _ in range(repeats):
        for first in range(0, len(in_memory), chunk):
            part = in_memory[first:first + chunk]
            feeds = [("loader", itertools.islice(stream, len(part))), ("memory", part)]
            for name, feed in feeds if turn % 2 == 0 else feeds[::-1]:
                seen, seconds = _train_steps(model, feed, loss_fn, optimizer, device)
                totals[name][0] += seen
                totals[name][1] += seconds
            turn += 1
    loader_ips = totals["loader"][0] / totals["loader"][1]
    memory_ips = totals["memory"][0] / totals["memory"][1]
    return {"loader_images_per_s": loader_ips, "memory_images_per_s": memory_ips,
            "ratio": loader_ips / memory_ips}


# ------------------------------------------------------------------------------------------ widget
class LearningRateExplorer:
    """A slider for the learning rate and a button that reruns a short training with it.

    ``train_run(lr) -> History`` does the training; every run stays on the picture so that the
    curves can be compared. Building and displaying it needs no browser (papermill, grading): the
    picture is a PNG inside an ``ipywidgets.Image`` and the first runs happen at construction.
    """

    def __init__(self, train_run, learning_rates=(1e-3,), *, lr_range=(1e-5, 1.0), smooth: int = 5):
        low, high = (math.log10(v) for v in lr_range)
        self.train_run, self.smooth = train_run, smooth
        self.runs: dict = {}
        self.slider = widgets.FloatLogSlider(value=learning_rates[-1], base=10, min=low, max=high,
                                             step=0.1, description="lr", readout_format=".1e",
                                             continuous_update=False,
                                             layout=widgets.Layout(width="380px"))
        self.button = widgets.Button(description=say({"es": "entrenar", "en": "train"}), icon="play",
                                     button_style="primary")
        self.clear = widgets.Button(description=say({"es": "borrar", "en": "clear"}))
        self.status = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="760px"))
        self.button.on_click(lambda _: self.train(self.slider.value))
        self.clear.on_click(lambda _: self.reset())
        self.widget = widgets.VBox([widgets.HBox([self.slider, self.button, self.clear]),
                                    self.status, self.image])
        for lr in learning_rates:
            self.train(lr)

    def train(self, lr: float) -> History:
        self.status.value = say({"es": f"entrenando con lr = {lr:.1e} …",
                                 "en": f"training with lr = {lr:.1e} …"})
        history = self.train_run(lr)
        self.runs[f"lr={lr:.1e}"] = history
        self._redraw()
        final = history.val_acc[-1] if history.val_acc else float("nan")
        runs = len(self.runs)
        self.status.value = say({
            "es": f"lr = {lr:.1e}: exactitud de validación {final:.1%} ({runs} "
                  f"{'entrenamiento' if runs == 1 else 'entrenamientos'})",
            "en": f"lr = {lr:.1e}: validation accuracy {final:.1%} ({runs} runs)"})
        return history

    def reset(self) -> None:
        self.runs.clear()
        self.image.value = b""
        self.status.value = say({"es": "borrado", "en": "cleared"})

    def _redraw(self) -> None:
        self.image.value = _history_png(self.runs, per_step=True, smooth=self.smooth,
                                        title=say({"es": "mismo modelo, mismos datos: solo cambia la tasa "
                                                         "de aprendizaje",
                                                   "en": "same model, same data, only the learning rate "
                                                         "changes"}))

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)
