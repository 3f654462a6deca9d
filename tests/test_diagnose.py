"""``course.diagnose`` against the broken training steps of lesson 05 and their repairs.

Each broken step below is the step form of one bug of the debugging lab (the lab shows the same
code); diagnose must name that bug. Each repaired step must leave it silent.
"""

import functools
import math
import pickle
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course.diagnose import CODES, Finding, diagnose, format_findings


def classification():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(16, 4, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)), (x, y)


def regression():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(16, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(16, generator=g)
    torch.manual_seed(7)
    return nn.Linear(3, 1), (x, y)


def binary(sigmoid_at_the_end=False):
    """Two clouds and 0/1 labels; the model's output is squeezed to (N,), after a sigmoid or not."""
    g = torch.Generator().manual_seed(12)
    y = torch.randint(0, 2, (16,), generator=g).float()
    x = torch.randn(16, 2, generator=g) + 3 * y[:, None]
    torch.manual_seed(12)
    layers = [nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1), *([nn.Sigmoid()] if sigmoid_at_the_end else [])]
    return nn.Sequential(*layers, nn.Flatten(0)), (x, y)


def binary_with_a_sigmoid():
    return binary(sigmoid_at_the_end=True)


def with_dropout_and_batchnorm():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(16, 4, generator=g)
    y = torch.randint(0, 3, (16,), generator=g)
    torch.manual_seed(9)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 3))
    return model, (x, y)


def codes(findings):
    return [finding.code for finding in findings]


def update(model, batch, optimizer):
    """One correct training step on a classification batch; returns the loss tensor."""
    x, y = batch
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def step_of(loss_of):
    """The step zero_grad → loss → backward → step around ``loss_of(model, x, y)``, named after it.

    Several steps below differ only in how they compute the loss: they are written as that loss.
    """

    @functools.wraps(loss_of)
    def step(model, batch, optimizer):
        x, y = batch
        optimizer.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


# ---------------------------------------------------------------- the repaired steps
def train_step(model, batch, optimizer):
    return update(model, batch, optimizer).item()


def clipped_step(model, batch, optimizer):
    x, y = batch
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y.view(-1, 1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def device_agnostic_step(model, batch, optimizer):
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    return train_step(model, (x, y), optimizer)


def step_with_monitoring(model, batch, optimizer):
    loss = train_step(model, batch, optimizer)
    model.eval()
    with torch.no_grad():
        predictions = model(batch[0])
    model.train()
    MONITOR.append(predictions)
    return loss


def step_with_checkpoint(model, batch, optimizer):
    loss = train_step(model, batch, optimizer)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(model.state_dict(), Path(tmp) / "model.pt")
        model.load_state_dict(torch.load(Path(tmp) / "model.pt"))
    return loss


@step_of
def regression_step(model, x, y):
    return F.mse_loss(model(x).squeeze(-1), y)


def step_keeping_a_float_total(model, batch, optimizer):
    loss = train_step(model, batch, optimizer)
    RUNNING["total"] += loss
    return loss


class ResidualBlock(nn.Module):
    def __init__(self, dim, inplace):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.inplace = inplace

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if self.inplace:
            h += x  # overwrites relu's output, which relu saved for backward
            return h
        return h + x


MONITOR = []
RUNNING = {"total": 0.0}


# ---------------------------------------------------------------- the broken steps
def no_zero_grad(model, batch, optimizer):  # bug 1
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def step_before_backward(model, batch, optimizer):  # bug 2
    x, y = batch
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y.view(-1, 1))
    optimizer.step()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return loss.item()


def batch_on_another_device(model, batch, optimizer):  # bug 3: "meta" stands in for "cuda"
    x, y = (t.to("meta") for t in batch)
    return train_step(model, (x, y), optimizer)


def monitoring_without_no_grad(model, batch, optimizer):  # bug 4
    loss = train_step(model, batch, optimizer)
    model.eval()
    predictions = model(batch[0])
    model.train()
    MONITOR.append(predictions.argmax(dim=1))
    return loss


def checkpoint_whole_model(model, batch, optimizer):  # bug 5
    loss = train_step(model, batch, optimizer)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(model, Path(tmp) / "model.pt")
        torch.load(Path(tmp) / "model.pt")
    return loss


@step_of
def softmax_then_cross_entropy(model, x, y):  # bug 6
    return F.cross_entropy(torch.softmax(model(x), dim=1), y)


@step_of
def bce_with_logits(model, x, y):  # bug 12 when the model ends in a sigmoid; its repair otherwise
    return nn.BCEWithLogitsLoss()(model(x), y)


@step_of
def sigmoid_then_bce_with_logits(model, x, y):  # bug 12, the sigmoid in the step
    return F.binary_cross_entropy_with_logits(torch.sigmoid(model(x)).squeeze(-1), y)


@step_of
def mse_with_broadcasting(model, x, y):  # bug 7
    return nn.MSELoss()(model(x), y)


@step_of
def handwritten_mse_with_broadcasting(model, x, y):  # bug 7, by hand
    return ((model(x) - y) ** 2).mean()


def accumulating_loss_tensors(model, batch, optimizer):  # bug 8
    loss = update(model, batch, optimizer)
    RUNNING["total"] += loss
    return loss.item()


def returning_the_loss_tensor(model, batch, optimizer):  # bug 8, left to the caller
    return update(model, batch, optimizer)


def evaluate_without_restoring(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def left_in_eval_mode(model, batch, optimizer):  # bug 9
    x, y = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    evaluate_without_restoring(model, x, y)
    return loss.item()


def two_bugs(model, batch, optimizer):  # the lab's last exercise
    x, y = batch
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean()
    return loss.item(), accuracy.item()


def inplace_block():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(8, 5, generator=g)
    y = torch.randn(8, 5, generator=g)
    return x, y


@step_of
def residual_step(model, x, y):
    return F.mse_loss(model(x), y)


@pytest.fixture(autouse=True)
def _fresh_state():
    MONITOR.clear()
    RUNNING["total"] = 0.0
    yield
    MONITOR.clear()
    RUNNING["total"] = 0.0


BROKEN = [
    ("grads_not_cleared", no_zero_grad, classification, {}),
    ("step_before_backward", step_before_backward, regression, {}),
    ("device_mismatch", batch_on_another_device, classification, {}),
    ("no_grad_missing", monitoring_without_no_grad, classification, {}),
    ("pickled_model", checkpoint_whole_model, classification, {}),
    ("softmax_before_loss", softmax_then_cross_entropy, classification, {}),
    ("sigmoid_before_logits_loss", bce_with_logits, binary_with_a_sigmoid, {}),
    ("sigmoid_before_logits_loss", sigmoid_then_bce_with_logits, binary, {}),
    ("shape_mismatch", mse_with_broadcasting, regression, {}),
    ("shape_mismatch", handwritten_mse_with_broadcasting, regression, {}),
    ("graph_kept", accumulating_loss_tensors, classification, {}),
    ("graph_kept", returning_the_loss_tensor, classification, {}),
    ("eval_mode", left_in_eval_mode, with_dropout_and_batchnorm, {}),
    ("nan_or_inf", regression_step, regression,
     {"optimizer": lambda params: torch.optim.SGD(params, lr=50.0), "steps": 40}),
]

REPAIRED = [
    (train_step, classification, {}),
    (clipped_step, regression, {}),
    (device_agnostic_step, classification, {}),
    (step_with_monitoring, classification, {}),
    (step_with_checkpoint, classification, {}),
    (train_step, with_dropout_and_batchnorm, {}),
    (regression_step, regression, {}),
    (step_keeping_a_float_total, classification, {}),
    (bce_with_logits, binary, {}),
    (regression_step, regression,
     {"optimizer": lambda params: torch.optim.SGD(params, lr=0.05), "steps": 40}),
    (train_step, classification, {"optimizer": torch.optim.Adam}),
]


@pytest.mark.parametrize(("code", "step", "make", "options"), BROKEN, ids=[b[1].__name__ for b in BROKEN])
def test_diagnose_names_the_bug_of_each_broken_step(code, step, make, options):
    model, batch = make()
    findings = diagnose(step, model, batch, show=False, language="en", **options)
    assert code in codes(findings), findings
    assert all(isinstance(f, Finding) and f.code in CODES for f in findings)


@pytest.mark.parametrize(("step", "make", "options"), REPAIRED,
                         ids=[f"{r[0].__name__}-{r[1].__name__}" for r in REPAIRED])
def test_diagnose_is_silent_on_the_repaired_steps(step, make, options):
    model, batch = make()
    assert diagnose(step, model, batch, show=False, language="en", **options) == []


def test_inplace_operation_is_named_and_its_repair_is_silent():
    torch.manual_seed(3)
    found = diagnose(residual_step, ResidualBlock(5, inplace=True), inplace_block(), show=False)
    assert codes(found) == ["inplace_modified"]
    assert "inplace" in found[0].message
    assert diagnose(residual_step, ResidualBlock(5, inplace=False), inplace_block(), show=False) == []


def test_two_bugs_at_once_are_both_named():
    model, batch = with_dropout_and_batchnorm()
    found = codes(diagnose(two_bugs, model, batch, show=False))
    assert sorted(found) == ["eval_mode", "grads_not_cleared"]


def test_the_first_non_finite_step_is_reported():
    model, batch = regression()
    options = {"optimizer": lambda params: torch.optim.SGD(params, lr=50.0), "steps": 40}
    (finding,) = diagnose(regression_step, model, batch, show=False, **options)
    optimizer = torch.optim.SGD(model.parameters(), lr=50.0)
    first_bad = None
    for step in range(1, 41):  # the same run, watched by hand: the loss, then the updated weights
        loss = regression_step(model, batch, optimizer)
        weights_finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
        if not math.isfinite(loss) or not weights_finite:
            first_bad = step
            break
    assert finding.code == "nan_or_inf"
    assert first_bad is not None and finding.step == first_bad > 1


def test_an_unchanged_parameter_is_named():
    model, batch = classification()
    model[2].bias.requires_grad_(True)

    def forgets_the_step(model, batch, optimizer):
        x, y = batch
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss.item()

    (finding,) = diagnose(forgets_the_step, model, batch, show=False)
    assert finding.code == "params_unchanged" and finding.step is None
    assert "0.weight" in finding.message


def test_the_callers_model_and_random_state_are_left_alone():
    model, batch = with_dropout_and_batchnorm()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    diagnose(no_zero_grad, model, batch, show=False)
    torch.testing.assert_close(torch.rand(3), expected_next)
    assert model.training is False
    assert all(p.grad is None for p in model.parameters())
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_two_runs_give_the_same_findings():
    model, batch = with_dropout_and_batchnorm()
    first = diagnose(two_bugs, model, batch, show=False)
    second = diagnose(two_bugs, model, batch, show=False)
    assert [(f.code, f.step, f.message) for f in first] == [(f.code, f.step, f.message) for f in second]


def test_findings_follow_the_lesson_language_and_print_readably(capsys, spanish):
    model, batch = classification()
    with spanish():
        found = diagnose(no_zero_grad, model, batch)
    printed = capsys.readouterr().out
    assert found[0].language == "es"
    assert "paso 2" in printed and "zero_grad()" in printed and "arreglo" in printed
    assert "no_zero_grad" in printed
    english = diagnose(no_zero_grad, model, batch, language="en")
    printed = capsys.readouterr().out
    assert "step 2" in printed and "fix:" in printed
    assert english[0].message != found[0].message
    assert repr(english[0]) == "Finding(code='grads_not_cleared', step=2)"
    diagnose(train_step, model, batch, language="en")
    assert "no problems found" in capsys.readouterr().out


def test_every_code_has_text_in_both_languages():
    from course.diagnose.messages import MESSAGES

    for language in ("es", "en"):
        for code in CODES:
            message, advice = MESSAGES[language][code]
            assert message and advice
    assert format_findings([], "step", 3, "es").endswith("ningún problema encontrado.")


def test_nothing_reaches_stderr(capsys):
    model, batch = regression()
    diagnose(mse_with_broadcasting, model, batch, show=False)
    assert capsys.readouterr().err == ""


def test_bad_arguments_are_explained():
    model, batch = classification()
    with pytest.raises(TypeError, match="optimizer class or a function"):
        diagnose(train_step, model, batch, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="language"):
        diagnose(train_step, model, batch, language="fr")
    with pytest.raises(TypeError, match="nn.Module"):
        diagnose(train_step, "model", batch)


def test_a_pickled_model_load_is_named():
    model, batch = classification()
    (finding,) = diagnose(checkpoint_whole_model, model, batch, show=False)
    assert finding.code == "pickled_model"
    assert "state_dict" in finding.advice
    # the reason torch.load gave: the class it refused to unpickle
    assert "Unsupported global: GLOBAL torch.nn.modules.container.Sequential" in finding.message

    def unpickling_fails(model, batch, optimizer):
        raise pickle.UnpicklingError("invalid load key, 'x'.")

    # recognised by the error's type alone, whatever its text
    (finding,) = diagnose(unpickling_fails, model, batch, show=False)
    assert finding.code == "pickled_model" and finding.step == 1


def test_argument_errors_and_shapes_speak_the_edition_language(spanish, capsys):
    model, batch = classification()
    with pytest.raises(TypeError, match="nn.Module; recibió str"):
        diagnose(train_step, "model", batch, language="es")
    with spanish():
        with pytest.raises(TypeError, match="pasa una clase de optimizador"):
            diagnose(train_step, model, batch, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))

        def returns_the_loss_tensor(model, batch, optimizer):
            x, y = batch
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss

        found = diagnose(returns_the_loss_tensor, model, batch, show=False)
    kept = next(f for f in found if f.code == "graph_kept")
    assert "forma ()" in kept.message and "shape" not in kept.message
