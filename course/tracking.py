"""Experiment tracking: TensorBoard runs read back from their event files and drawn in the notebook.

Taught in lesson 04 (training_loop), section 12.

A training loop logs its scalars with ``torch.utils.tensorboard.SummaryWriter`` into a *run* folder
(one folder per experiment, holding ``events.out.tfevents.*`` files). TensorBoard draws them in the
browser; this module reads the same files with TensorBoard's own reader (``EventAccumulator``) so
that a lesson can draw them inline and a check can look at what was written, without starting a
TensorBoard server.

- :func:`new_run` makes a fresh run folder under ``runs/`` (or ``$COURSE_RUNS_DIR``);
- :func:`read_scalars` returns ``{tag: [(step, value), ...]}`` for one run folder;
- :func:`plot_runs` draws one panel per tag, one line per run.
"""

import itertools
import logging
import math
import os
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from course.settings import say

# TensorBoard's event reader and torch's SummaryWriter load protobuf code generated for one protobuf
# version; with another protobuf runtime installed, importing it can print a UserWarning about the
# "Protobuf gencode version", and some torch/setuptools pairs add DeprecationWarnings. Both land on
# stderr, and nbgrader fails a graded cell that writes there, so they are silenced for this import
# only (the rest of the kernel keeps its warnings).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=UserWarning, message=r".*[Pp]rotobuf")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from tensorboard.backend.event_processing import event_accumulator
    from torch.utils.tensorboard import SummaryWriter

# The reader reports oddities (a step that goes backwards, a restarted run) on the "tensorboard"
# logger; in a notebook kernel no handler is configured, so Python would print those records on
# stderr. Errors still show.
logging.getLogger("tensorboard").setLevel(logging.ERROR)

RUNS_ENV = "COURSE_RUNS_DIR"

__all__ = ["RUNS_ENV", "SummaryWriter", "default_runs_dir", "event_files", "new_run", "plot_runs",
           "read_scalars"]


def default_runs_dir() -> Path:
    """``$COURSE_RUNS_DIR`` when set, else ``runs/`` in the current folder (TensorBoard's habit)."""
    return Path(os.environ.get(RUNS_ENV) or "runs").expanduser()


def new_run(name: str, root=None) -> Path:
    """A new, empty run folder ``root/name-YYYYmmdd-HHMMSS`` (a suffix keeps it new); created.

    Each execution of a cell gets its own run, so running a cell again adds a run to compare in
    TensorBoard instead of mixing two trainings in one folder.
    """
    root = Path(root) if root is not None else default_runs_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in itertools.count():
        folder = root / (f"{name}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue


def event_files(run_dir) -> list[Path]:
    """The event files directly inside ``run_dir`` (not in its subfolders), sorted by name."""
    folder = Path(run_dir)
    return sorted(folder.glob("events.out.tfevents.*")) if folder.is_dir() else []


def read_scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}``: every scalar written into ``run_dir``, in the order written.

    Only the event files directly inside ``run_dir`` are read, as TensorBoard treats each folder as
    one run (``add_scalars`` writes into subfolders, which are runs of their own). Nothing is
    dropped: TensorBoard's reader keeps a random sample of 10,000 points per tag unless told
    otherwise, and discards points when a step goes backwards; here every point is kept as written.
    """
    folder = Path(run_dir)
    if not event_files(folder):
        raise FileNotFoundError(say({
            "es": f"no hay archivos de eventos (events.out.tfevents.*) en {folder}: ¿se escribió "
                  "algo con un SummaryWriter en esa carpeta y se llamó a flush() o close()?",
            "en": f"no event files (events.out.tfevents.*) in {folder}: did a SummaryWriter write "
                  "into that folder, and was flush() or close() called?",
        }))
    reader = event_accumulator.EventAccumulator(
        str(folder), size_guidance={event_accumulator.SCALARS: 0}, purge_orphaned_data=False)
    reader.Reload()
    return {tag: [(event.step, event.value) for event in reader.Scalars(tag)]
            for tag in reader.Tags()[event_accumulator.SCALARS]}


def _as_runs(runs) -> dict[str, dict]:
    """``{label: {tag: [(step, value)]}}`` from a run folder, scalars, or ``{label: folder or scalars}``."""
    if isinstance(runs, (str, os.PathLike)):
        return {Path(runs).name: read_scalars(runs)}
    runs = dict(runs)
    if runs and all(isinstance(points, list) for points in runs.values()):
        return {"": runs}   # the scalars of a single run
    return {label: read_scalars(run) if isinstance(run, (str, os.PathLike)) else dict(run)
            for label, run in runs.items()}


def plot_runs(runs, tags=None, *, columns: int = 3, title: str | None = None):
    """One panel per tag, one line per run: what TensorBoard's Scalars page shows, drawn here.

    ``runs``: a run folder, the scalars :func:`read_scalars` returned, or ``{label: folder or
    scalars}`` to compare runs. ``tags``: which tags to draw, in order (default: all, sorted).
    """
    runs = _as_runs(runs)
    if tags is None:
        tags = sorted({tag for scalars in runs.values() for tag in scalars})
    tags = list(tags)
    if not tags:
        raise ValueError(say({"es": "no hay ninguna etiqueta (tag) que dibujar",
                              "en": "there is no tag to draw"}))
    columns = max(1, min(columns, len(tags)))
    rows = math.ceil(len(tags) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.8 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, tag in zip(axes.flat, tags, strict=False):   # more panels than tags
        for (label, scalars), color in zip(runs.items(), itertools.cycle(colors)):
            points = scalars.get(tag, [])
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, "-o" if len(points) <= 20 else "-", ms=3, lw=1.2, color=color,
                    label=label or None)
        ax.set_title(tag, fontsize=10)
        ax.set_xlabel(say({"es": "paso (step)", "en": "step"}), fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if len(runs) > 1 and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(tags):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig
