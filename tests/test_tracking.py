"""course.tracking: run folders, TensorBoard event files read back as written, and their curves."""

import subprocess
import sys

import matplotlib
import pytest

from course import tracking

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _write(folder, points: dict, *, flush_only: bool = False):
    writer = tracking.SummaryWriter(folder)
    for tag, values in points.items():
        for step, value in values:
            writer.add_scalar(tag, value, step)
    if flush_only:
        writer.flush()
        return writer
    writer.close()
    return None


def test_scalars_come_back_as_written(tmp_path):
    run = tracking.new_run("demo", root=tmp_path)
    _write(run, {"loss/train": [(0, 2.5), (1, 1.25), (2, 0.75)], "lr": [(0, 0.1), (1, 0.05)]})
    scalars = tracking.read_scalars(run)
    assert scalars == {"loss/train": [(0, 2.5), (1, 1.25), (2, 0.75)], "lr": [(0, pytest.approx(0.1)),
                                                                         (1, pytest.approx(0.05))]}
    assert [path.name.startswith("events.out.tfevents.") for path in tracking.event_files(run)] == [True]


def test_a_flushed_writer_is_readable_before_it_is_closed(tmp_path):
    writer = _write(tmp_path, {"accuracy/val": [(0, 0.5), (1, 0.75)]}, flush_only=True)
    try:
        assert tracking.read_scalars(tmp_path) == {"accuracy/val": [(0, 0.5), (1, 0.75)]}
    finally:
        writer.close()


def test_every_point_is_kept_even_past_tensorboards_sample_and_backwards_steps(tmp_path, capfd):
    many = [(step, float(step % 7)) for step in range(10_050)]
    _write(tmp_path / "many", {"loss": many})
    assert len(tracking.read_scalars(tmp_path / "many")["loss"]) == 10_050
    _write(tmp_path / "restarted", {"loss": [(0, 3.0), (1, 2.0), (2, 1.0), (1, 2.5)]})
    assert [step for step, _ in tracking.read_scalars(tmp_path / "restarted")["loss"]] == [0, 1, 2, 1]
    assert capfd.readouterr().err == ""   # TensorBoard's purge warning is not printed either


def test_subfolders_are_runs_of_their_own(tmp_path):
    writer = tracking.SummaryWriter(tmp_path)
    writer.add_scalars("loss", {"train": 1.0, "val": 2.0}, 0)   # writes into loss_train/, loss_val/
    writer.add_scalar("lr", 0.1, 0)
    writer.close()
    assert sorted(tracking.read_scalars(tmp_path)) == ["lr"]
    assert tracking.read_scalars(tmp_path / "loss_train") == {"loss": [(0, 1.0)]}


def test_a_folder_without_event_files_says_what_to_check(tmp_path, english):
    with pytest.raises(FileNotFoundError, match="flush"):
        tracking.read_scalars(tmp_path)
    with pytest.raises(FileNotFoundError, match="events.out.tfevents"):
        tracking.read_scalars(tmp_path / "missing")


def test_new_run_never_reuses_a_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking.time, "strftime", lambda _: "20260101-000000")
    first, second = tracking.new_run("mlp", root=tmp_path), tracking.new_run("mlp", root=tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    assert (first.name, second.name) == ("mlp-20260101-000000", "mlp-20260101-000000-1")


def test_runs_go_under_runs_or_the_environments_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.RUNS_ENV, raising=False)
    assert str(tracking.default_runs_dir()) == "runs"
    monkeypatch.setenv(tracking.RUNS_ENV, str(tmp_path / "elsewhere"))
    assert tracking.default_runs_dir() == tmp_path / "elsewhere"
    assert tracking.new_run("x").parent == tmp_path / "elsewhere"


def test_plot_runs_draws_a_panel_per_tag_and_a_line_per_run(tmp_path, english):
    for name, scale in (("slow", 1.0), ("fast", 0.5)):
        _write(tmp_path / name, {"loss/train": [(s, scale / (s + 1)) for s in range(30)],
                                 "accuracy/val": [(0, 0.5), (1, 0.7 * scale + 0.2)]})
    fig = tracking.plot_runs({"slow": tmp_path / "slow", "fast": tmp_path / "fast"},
                             tags=["loss/train", "accuracy/val"], title="two runs")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_title() for ax in panels] == ["loss/train", "accuracy/val"]
    assert [len(ax.get_lines()) for ax in panels] == [2, 2]
    assert [t.get_text() for t in panels[0].get_legend().get_texts()] == ["slow", "fast"]
    assert panels[0].get_xlabel() == "step"
    fig.canvas.draw()
    plt.close(fig)


def test_plot_runs_takes_a_folder_or_scalars_and_speaks_the_editions_language(tmp_path, english):
    import course

    _write(tmp_path, {"b": [(0, 1.0)], "a": [(0, 2.0), (1, 3.0)]})
    fig = tracking.plot_runs(tmp_path)
    assert [ax.get_title() for ax in fig.axes] == ["a", "b"]            # all tags, sorted
    assert fig.axes[0].get_legend() is None                              # one run: no legend
    plt.close(fig)
    course.set_language("es")
    fig = tracking.plot_runs(tracking.read_scalars(tmp_path), tags=["a"])
    assert fig.axes[0].get_xlabel() == "paso (step)"
    plt.close(fig)
    with pytest.raises(ValueError, match="ninguna etiqueta"):
        tracking.plot_runs({})
    course.set_language("en")


@pytest.mark.subprocess
def test_importing_the_module_writes_nothing_on_stderr():
    result = subprocess.run([sys.executable, "-W", "default", "-c",
                             "import course.tracking, logging; "
                             "logging.getLogger('tensorboard').warning('x') "],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
