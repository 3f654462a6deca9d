"""course.training: loaders, models, the reference loop, pictures and the widget.

Small synthetic tensors everywhere, except one test that reads a few batches of the real data.
"""

import copy
from types import SimpleNamespace

import matplotlib
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from course import timing, training

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_and_closed():
    training.set_progress(False)
    yield
    training.set_progress(True)
    plt.close("all")


def _images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)


def _blobs(n=96, features=6, classes=3, seed=0):
    """Separable classes: each one a cloud around its own centre."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=g) * 3
    y = torch.randint(0, classes, (n,), generator=g)
    return centres[y] + torch.randn(n, features, generator=g) * 0.5, y


def _tiny_model(features=6, classes=3, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, classes))


# -------------------------------------------------------------------------------------------- data
def test_normalize_matches_totensor_and_normalize():
    from torchvision import transforms

    images = _images(5)
    to_input = transforms.Compose([transforms.ToTensor(),
                                   transforms.Normalize((training.FASHION_MEAN,), (training.FASHION_STD,))])
    expected = torch.stack([to_input(img.numpy()) for img in images])
    got = training.normalize(images)
    assert got.shape == (5, 1, 28, 28) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected)


def test_compute_mean_std_scales_to_unit_interval():
    images = torch.tensor([[0, 255], [0, 255]], dtype=torch.uint8)
    mean, std = training.compute_mean_std(images)
    assert mean == pytest.approx(0.5)
    assert std == pytest.approx(torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64).std().item())


def test_fashion_tensors_item_and_batch():
    images, labels = _images(10), torch.arange(10) % 10
    data = training.FashionTensors(images, labels)
    x, y = data[3]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and y == 3
    xb, yb = data.__getitems__([1, 4, 7])
    assert xb.shape == (3, 1, 28, 28)
    assert yb.tolist() == [1, 4, 7]
    torch.testing.assert_close(xb[1], training.normalize(images[4:5])[0])
    assert len(data.subset([0, 2])) == 2


def test_fashion_tensors_rejects_wrong_inputs():
    with pytest.raises(ValueError, match="uint8"):
        training.FashionTensors(torch.zeros(2, 28, 28), torch.zeros(2))
    with pytest.raises(ValueError, match="labels"):
        training.FashionTensors(_images(3), torch.zeros(2))


def test_make_loader_batches_shuffles_reproducibly_and_pins_only_for_cuda():
    data = training.FashionTensors(_images(50), torch.arange(50) % 10)
    loader = training.make_loader(data, batch_size=16, shuffle=True, seed=3, device="cpu")
    assert loader.pin_memory is False
    batches = list(loader)
    assert [len(y) for _, y in batches] == [16, 16, 16, 2]
    assert batches[0][0].shape == (16, 1, 28, 28)
    order = torch.cat([y for _, y in batches])
    assert sorted(order.tolist()) == sorted((torch.arange(50) % 10).tolist())
    again = torch.cat([y for _, y in training.make_loader(data, batch_size=16, shuffle=True, seed=3)])
    assert torch.equal(order, again)
    plain = training.make_loader(data, batch_size=16, shuffle=False)
    assert torch.equal(torch.cat([y for _, y in plain]), torch.arange(50) % 10)


def test_collate_batch_also_stacks_ordinary_samples():
    samples = [(torch.zeros(2), 1), (torch.ones(2), 0)]
    x, y = training.collate_batch(samples)
    assert x.shape == (2, 2) and y.tolist() == [1, 0]
    already = (torch.zeros(3, 2), torch.zeros(3))
    assert training.collate_batch(already) is already


def test_random_shift_flip_keeps_shape_and_content():
    g = torch.Generator().manual_seed(0)
    images = torch.zeros(64, 1, 28, 28, dtype=torch.uint8)
    images[:, :, 10:18, 6:12] = 200                           # away from the border
    assert torch.equal(training.random_shift_flip(images, max_shift=0, flip=False), images)
    moved = training.random_shift_flip(images, max_shift=2, flip=True, generator=g)
    assert moved.shape == images.shape and moved.dtype == torch.uint8
    assert torch.equal(moved.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))   # nothing lost
    assert not torch.equal(moved, images)
    flipped = training.random_shift_flip(images, max_shift=0, flip=True, generator=g)
    same = (flipped == images).flatten(1).all(dim=1)
    mirrored = (flipped == images.flip(-1)).flatten(1).all(dim=1)
    assert bool((same | mirrored).all()) and mirrored.any() and same.any()


def test_fast_subset_is_seeded_and_keeps_small_sets_whole():
    data = training.FashionTensors(_images(30), torch.arange(30) % 10)
    a, b = training.fast_subset(data, 10, seed=1), training.fast_subset(data, 10, seed=1)
    assert isinstance(a, training.FashionTensors) and len(a) == 10
    assert torch.equal(a.images, b.images)
    assert training.fast_subset(data, 30) is data
    plain = TensorDataset(torch.arange(20))
    subset = training.fast_subset(plain, 5)
    assert isinstance(subset, Subset) and len(subset) == 5


def test_real_data_loaders_yield_normalised_batches():
    splits = training.fashion_splits(fast=True, sizes={"train": 2000, "val": 200, "test": 300})
    assert [len(splits[k]) for k in ("train", "val", "test")] == [2000, 200, 300]
    loader = training.make_loader(splits["train"], batch_size=500, shuffle=True, seed=0)
    x, y = next(iter(loader))
    assert x.shape == (500, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0 <= y.min() and y.max() <= 9
    pixels = torch.cat([x for x, _ in loader])
    assert abs(pixels.mean().item()) < 0.05
    assert abs(pixels.std().item() - 1) < 0.05


# ------------------------------------------------------------------------------------------ models
@pytest.mark.parametrize("model", [training.make_mlp(), training.make_mlp(64, dropout=0.1),
                                   training.make_cnn(), training.make_cnn((8, 8, 8), dropout=0.2)])
def test_models_map_images_to_ten_logits(model):
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


# ---------------------------------------------------------------------------------- reference loop
def test_run_epoch_trains_and_reports_mean_loss_per_example():
    x, y = _blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=20)        # last batch smaller
    model = _tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    first = training.run_epoch(model, loader, loss_fn=nn.CrossEntropyLoss(), device="cpu",
                               optimizer=optimizer, step_losses=losses)
    sizes = [len(b) for b in y.split(20)]
    assert first.loss == pytest.approx(sum(v * s for v, s in zip(losses, sizes, strict=True)) / len(y))
    assert first.images == len(y) and len(losses) == len(sizes)
    for _ in range(5):
        last = training.run_epoch(model, loader, loss_fn=nn.CrossEntropyLoss(), device="cpu",
                                  optimizer=optimizer)
    assert last.loss < first.loss / 2
    assert last.accuracy > 0.9


def test_run_epoch_evaluation_leaves_no_trace():
    x, y = _blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=32)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 3))
    outputs = []
    model.register_forward_hook(lambda m, i, o: outputs.append(o.requires_grad))
    for mode in (True, False):
        model.train(mode)
        before = copy.deepcopy(model.state_dict())
        first = training.run_epoch(model, loader, loss_fn=nn.CrossEntropyLoss(), device="cpu")
        second = training.run_epoch(model, loader, loss_fn=nn.CrossEntropyLoss(), device="cpu")
        assert (first.loss, first.accuracy) == (second.loss, second.accuracy)  # Dropout off
        assert model.training is mode
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert outputs and not any(outputs)
    assert all(p.grad is None for p in model.parameters())


def test_run_epoch_clips_and_steps_the_scheduler_per_batch():
    x, y = _blobs(n=40)
    loader = DataLoader(TensorDataset(x * 100, y), batch_size=10)
    model = _tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    norms = []
    optimizer.register_step_pre_hook(lambda *_: norms.append(
        torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()))
    training.run_epoch(model, loader, loss_fn=nn.CrossEntropyLoss(), device="cpu", optimizer=optimizer,
                       scheduler=scheduler, clip_norm=0.1)
    assert max(norms) <= 0.1 + 1e-5
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5 ** 4)


def test_run_epoch_refuses_an_empty_loader():
    with pytest.raises(ValueError, match="no examples"):
        training.run_epoch(_tiny_model(), [], loss_fn=nn.CrossEntropyLoss(), device="cpu")


class _PlannedValidation:
    """Labels chosen so that the model's validation accuracy follows ``plan`` pass after pass."""

    def __init__(self, model, plan):
        self.model, self.plan, self.passes = model, plan, []
        self.x = torch.randn(8, 6, generator=torch.Generator().manual_seed(5))

    def __iter__(self):
        state = copy.deepcopy(self.model.state_dict())
        self.passes.append(state)
        with torch.no_grad():
            predicted = self.model(self.x).argmax(dim=1)
        right = round(self.plan[len(self.passes) - 1] * len(self.x))
        labels = torch.where(torch.arange(8) < right, predicted, (predicted + 1) % 3)
        return iter([(self.x, labels)])


def test_fit_model_keeps_the_best_epoch_and_reports_each_one():
    x, y = _blobs(n=32)
    model = _tiny_model()
    plan = [0.25, 0.875, 0.5, 0.875]
    validation = _PlannedValidation(model, plan)
    seen = []
    history = training.fit_model(model, DataLoader(TensorDataset(x, y), batch_size=8), validation,
                                 loss_fn=nn.CrossEntropyLoss(),
                                 optimizer=torch.optim.SGD(model.parameters(), lr=0.5), epochs=4,
                                 device="cpu", on_epoch=lambda h: seen.append(h.epochs))
    assert seen == [1, 2, 3, 4]
    assert history.val_acc == pytest.approx(plan)
    assert history.best_epoch == 1 and history.best_val_acc == pytest.approx(0.875)
    assert len(history.step_loss) == 16 and len(history.lr) == 4 and history.seconds > 0
    for key, value in model.state_dict().items():
        assert torch.equal(value, validation.passes[1][key])
    assert not torch.equal(model.state_dict()["0.weight"], validation.passes[3]["0.weight"])


def test_predict_and_confusion_matrix():
    x, y = _blobs(n=50)
    model = _tiny_model()
    model.train()
    predictions, targets = training.predict(model, DataLoader(TensorDataset(x, y), batch_size=16),
                                            device="cpu")
    assert model.training and torch.equal(targets, y)
    with torch.no_grad():
        assert torch.equal(predictions, model.eval()(x).argmax(dim=1))
    matrix = training.confusion_matrix(torch.tensor([0, 1, 1, 2, 2, 2]), torch.tensor([0, 1, 2, 2, 2, 0]),
                                       num_classes=3)
    assert matrix.tolist() == [[1, 0, 1], [0, 1, 0], [0, 1, 2]]
    assert matrix.dtype == torch.int64
    with pytest.raises(ValueError, match="predictions"):
        training.confusion_matrix(torch.tensor([0, 1]), torch.tensor([0]))
    with pytest.raises(ValueError, match="classes"):
        training.confusion_matrix(torch.tensor([0, 5]), torch.tensor([0, 1]), num_classes=3)


# -------------------------------------------------------------------------------------- pictures
def test_figures_draw_without_a_display():
    matrix = training.confusion_matrix(torch.arange(10).repeat(3), torch.arange(10).repeat(3))
    fig = training.plot_confusion(matrix)
    assert "100.0%" in fig.axes[0].get_title()
    history = training.History(train_loss=[1.0, 0.5], train_acc=[0.5, 0.8], val_loss=[0.9, 0.7],
                               val_acc=[0.6, 0.7], step_loss=[1.0, 0.8, 0.6, 0.5], best_epoch=1)
    assert len(training.plot_history(history).axes) == 2
    assert len(training.plot_history({"a": history, "b": history}, per_step=True, smooth=2).axes) == 2
    images = _images(10)
    fig = training.plot_samples(images, torch.arange(10), predictions=torch.zeros(10, dtype=torch.int64),
                                columns=5)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0] == "T-shirt/top" and "(true: Trouser)" in titles[1]
    training.plot_samples(training.normalize(images), torch.arange(10))


def test_live_curves_draw_after_every_epoch(capsys):
    curves = training.LiveCurves("test")
    history = training.History(train_loss=[1.0], train_acc=[0.5], val_loss=[1.0], val_acc=[0.5])
    curves(history)
    for values in (history.train_loss, history.train_acc, history.val_loss, history.val_acc):
        values.append(0.6)
    curves(history)
    assert curves.frames == 2       # outside a notebook IPython prints instead of updating in place


# ------------------------------------------------------------------------------ progress, measures
def test_progress_can_be_silenced():
    items = [1, 2, 3]
    assert training.progress(items) is items                     # silenced by the fixture
    bar = training.progress(items, enabled=True, desc="x")
    assert list(bar) == items
    training.set_progress(True)
    assert training.progress(items, enabled=False) is items


@pytest.fixture
def fake_clock(monkeypatch):
    """The clock course.timing reads, advanced by hand: ``clock[0]`` seconds."""
    clock = [0.0]
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    return clock


def _model_taking(seconds, clock):
    """A tiny model whose every forward pass advances ``clock`` by ``seconds``."""
    model = _tiny_model()
    model.register_forward_hook(lambda *_: clock.__setitem__(0, clock[0] + seconds))
    return model


class _SlowDataset(TensorDataset):
    """A per-example transform that costs ``seconds`` of the fake clock."""

    def __init__(self, *tensors, seconds, clock):
        super().__init__(*tensors)
        self.seconds, self.clock = seconds, clock

    def __getitem__(self, index):
        self.clock[0] += self.seconds
        return super().__getitem__(index)


def test_compare_loading_reports_both_rates(fake_clock):
    x, y = _blobs(n=256)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = _model_taking(0.5, fake_clock)
    result = training.compare_loading(model, loader, loss_fn=nn.CrossEntropyLoss(),
                                      optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                      device="cpu", batches=4, repeats=2)
    assert set(result) == {"loader_images_per_s", "memory_images_per_s", "ratio"}
    # loading costs no time here: both feeds run at 32 images per 0.5 s step
    assert result["loader_images_per_s"] == result["memory_images_per_s"] == 64.0
    assert result["ratio"] == 1.0


def test_compare_loading_sees_a_slow_loader(fake_clock):
    x, y = _blobs(n=128)
    model = _model_taking(0.01, fake_clock)
    slow = _SlowDataset(x, y, seconds=0.002, clock=fake_clock)
    result = training.compare_loading(model, DataLoader(slow, batch_size=32),
                                      loss_fn=nn.CrossEntropyLoss(),
                                      optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                      device="cpu", batches=4, repeats=1, chunk=2)
    # from memory a step costs the forward pass; from the loader also 32 examples of 2 ms each
    assert result["memory_images_per_s"] == pytest.approx(32 / 0.01)
    assert result["loader_images_per_s"] == pytest.approx(32 / (0.01 + 32 * 0.002))
    assert result["ratio"] == pytest.approx(0.01 / (0.01 + 32 * 0.002))


def test_learning_rate_explorer_builds_headless_and_trains_on_click():
    calls = []

    def fake_run(lr):
        calls.append(lr)
        return training.History(train_loss=[1.0], val_acc=[min(lr, 1.0)], val_loss=[1.0],
                                step_loss=[1.0, 0.9, 0.8, 0.7, 0.6, 0.5])

    explorer = training.LearningRateExplorer(fake_run, learning_rates=(1e-3, 1e-2))
    assert calls == [1e-3, 1e-2] and len(explorer.runs) == 2
    assert explorer.image.value[:4] == b"\x89PNG"
    explorer.slider.value = 0.1
    explorer.button.click()
    assert calls[-1] == pytest.approx(0.1) and len(explorer.runs) == 3
    assert "10.0%" in explorer.status.value
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    explorer.clear.click()
    assert explorer.runs == {}


# ------------------------------------------------------------------------------------ two languages
def _history():
    return training.History(train_loss=[1.0, 0.5], train_acc=[0.5, 0.8], val_loss=[0.9, 0.7],
                            val_acc=[0.6, 0.7], step_loss=[1.0, 0.8, 0.6, 0.5], best_epoch=1)


def _plot_texts(fig):
    return [(ax.get_title(), ax.get_xlabel(), ax.get_ylabel(),
             [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else [])
            for ax in fig.axes]


def test_pictures_speak_the_edition_language(english):
    import course

    matrix = training.confusion_matrix(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 2]))
    course.set_language("es")
    history = _plot_texts(training.plot_history(_history()))
    steps = _plot_texts(training.plot_history({"a": _history()}, per_step=True, smooth=2))
    confusion = training.plot_confusion(matrix).axes[0]
    samples = training.plot_samples(_images(2), torch.tensor([0, 1]), predictions=torch.tensor([0, 0]))
    course.set_language("en")
    (_, loss_x, loss_y, loss_legend), (acc_title, acc_x, acc_y, acc_legend) = history
    assert (loss_x, loss_y, acc_x, acc_y) == ("época", "pérdida", "época", "exactitud")
    assert loss_legend == ["entrenamiento", "validación"] and acc_legend == ["validación", "entrenamiento"]
    assert acc_title == "★ = mejor época en validación (la que se conserva)"
    assert steps[0][1:3] == ("paso de entrenamiento", "pérdida (media móvil)") and steps[0][3] == ["a"]
    assert confusion.get_title() == "matriz de confusión (exactitud 66.7%)"
    assert (confusion.get_xlabel(), confusion.get_ylabel()) == ("clase predicha", "clase real")
    assert confusion.get_xticklabels()[1].get_text() == "Pantalón"
    titles = [ax.get_title() for ax in samples.axes if ax.get_title()]
    assert titles == ["Camiseta/top", "Camiseta/top\n(real: Pantalón)"]

    (_, loss_x, loss_y, loss_legend), (acc_title, acc_x, acc_y, _) = _plot_texts(
        training.plot_history(_history()))
    assert (loss_x, loss_y, acc_y) == ("epoch", "loss", "accuracy") and loss_legend == ["train", "validation"]
    assert acc_title == "★ = best validation epoch (the one kept)"
    confusion = training.plot_confusion(matrix, classes=[str(i) for i in range(10)]).axes[0]
    assert confusion.get_xlabel() == "predicted" and confusion.get_xticklabels()[1].get_text() == "1"


def test_progress_bars_and_explorer_speak_the_edition_language(english, monkeypatch):
    import course

    descs = []

    def recording_progress(iterable, *, desc=None, **kwargs):
        descs.append(desc)
        return iterable

    monkeypatch.setattr(training, "progress", recording_progress)
    data = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    model = nn.Linear(4, 2)
    kwargs = dict(loss_fn=nn.functional.cross_entropy, device="cpu", epochs=1,
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    course.set_language("es")
    training.fit_model(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4), **kwargs)
    training.run_epoch(model, DataLoader(data, batch_size=4), loss_fn=kwargs["loss_fn"], device="cpu")
    explorer = training.LearningRateExplorer(lambda lr: _history(), learning_rates=(1e-3,))
    course.set_language("en")
    assert descs == ["épocas", "época 1 entrenamiento", "época 1 validación", "evaluación"]
    assert explorer.status.value == "lr = 1.0e-03: exactitud de validación 70.0% (1 entrenamiento)"
    assert (explorer.button.description, explorer.clear.description) == ("entrenar", "borrar")
    training.fit_model(model, DataLoader(data, batch_size=4), DataLoader(data, batch_size=4), **kwargs)
    assert descs[4:] == ["epochs", "epoch 1 train", "epoch 1 val"]
