"""graders.lesson_checks.training_loop: each visible check passes a right answer and fails typical
wrong ones with expected / got / hint; the harnesses record what they should.

The answers below are written here, as a student would; none of them lives in the module.
"""

import copy

import pytest
import torch
from check_messages import failure
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import course
from course import training
from graders import checks
from graders.checks import CheckFailed
from graders.lesson_checks import training_loop as lesson

pytestmark = pytest.mark.usefixtures("english")


# ------------------------------------------------------------------------------------- right answers
def accuracy(logits, targets):
    return (logits.argmax(dim=1) == targets).float().mean().item()


def train_one_epoch(model, loader, loss_fn, optimizer, device):
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def evaluate(model, loader, loss_fn, device):
    mode = model.training
    model.eval()
    total, hits, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            total += loss_fn(logits, y.to(device)).item() * len(y)
            hits += (logits.argmax(1) == y.to(device)).sum().item()
            seen += len(y)
    model.train(mode)
    return total / seen, hits / seen


def fit(model, train_loader, val_loader, loss_fn, optimizer, device, epochs, scheduler=None):
    history = {"train_loss": [], "val_loss": [], "val_acc": [], "best_epoch": -1}
    best, kept = float("-inf"), None
    for epoch in range(epochs):
        history["train_loss"].append(train_one_epoch(model, train_loader, loss_fn, optimizer, device))
        loss, acc = evaluate(model, val_loader, loss_fn, device)
        history["val_loss"].append(loss)
        history["val_acc"].append(acc)
        if scheduler:
            scheduler.step()
        if acc > best:
            best, kept, history["best_epoch"] = acc, copy.deepcopy(model.state_dict()), epoch
    model.load_state_dict(kept)
    return history


def accumulation_step(model, loss_fn, optimizer, micro_batches):
    n = sum(len(y) for _, y in micro_batches)
    optimizer.zero_grad()
    losses = [loss_fn(model(x), y) * len(y) / n for x, y in micro_batches]
    for loss in losses:
        loss.backward()
    optimizer.step()
    return float(sum(loss.item() for loss in losses))


def make_classifier():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(),
                         nn.Linear(4 * 7 * 7, 10))


# ------------------------------------------------------------------------------------------ accuracy
def test_accuracy_check_passes_a_right_answer_and_fails_wrong_ones():
    lesson.check_accuracy(accuracy)
    lesson.check_accuracy(accuracy, seed=7, examples=40, classes=10)
    failure(lesson.check_accuracy,
                 lambda logits, targets: (logits.argmax(1) == targets).float().mean(),
                 says="the type is not the expected one")
    failure(lesson.check_accuracy,
                 lambda logits, targets: (logits.argmin(1) == targets).float().mean().item(),
                 says="the values differ")
    failure(lesson.check_accuracy, lambda logits, targets: 0.5, says="accuracy(logits (12, 5)")


def test_planned_logits_agree_on_exactly_the_planned_rows():
    logits, targets, right = lesson.planned_logits(3, 20, 4)
    assert 1 <= right < 20
    assert (logits.argmax(1) == targets).sum().item() == right


# ----------------------------------------------------------------------------------- train_one_epoch
def _without_clearing(model, loader, loss_fn, optimizer, device):
    model.train()
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    return 0.0


def _clearing_before_the_step(model, loader, loss_fn, optimizer, device):
    model.train()
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.zero_grad()
        optimizer.step()
    return 0.0


def _stepping_before_backward(model, loader, loss_fn, optimizer, device):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        optimizer.step()
        loss.backward()
    return 0.0


def _course_loop(model, loader, loss_fn, optimizer, device):
    return training.run_epoch(model, loader, loss_fn=loss_fn, device=device, optimizer=optimizer,
                              show_progress=False).loss


def _mean_of_means(model, loader, loss_fn, optimizer, device):
    model.train()
    losses = []
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def test_train_one_epoch_checks_pass_a_right_answer():
    lesson.check_train_one_epoch_steps(train_one_epoch)
    lesson.check_train_one_epoch_steps(train_one_epoch, seed=5, examples=23, batch_size=5,
                                       widths=(6, 4, 4, 5))
    lesson.check_train_one_epoch_loss(train_one_epoch)
    lesson.check_train_one_epoch_loss(train_one_epoch, seed=5, examples=31, batch_size=8, widths=(3, 6, 4))


def test_train_one_epoch_steps_check_names_each_typical_mistake():
    steps = lesson.check_train_one_epoch_steps
    failure(steps, _without_clearing, says="found another batch's gradients")
    failure(steps, _clearing_before_the_step, says="steps with an empty .grad")
    message = failure(lesson.check_train_one_epoch_steps, _stepping_before_backward,
                           says="the steps are out of order")
    assert "forward → loss → step → backward" in message
    failure(lesson.check_train_one_epoch_steps, _eval_mode_loop, says="the model's mode")


def _eval_mode_loop(model, loader, loss_fn, optimizer, device):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return 0.0


def test_train_one_epoch_checks_switch_the_course_loop_off():
    message = failure(lesson.check_train_one_epoch_steps, _course_loop, says="raised an exception")
    assert "training.run_epoch is switched off" in message
    assert training.run_epoch.__name__ == "run_epoch"   # given back afterwards


def test_train_one_epoch_loss_check_wants_the_mean_per_example():
    failure(lesson.check_train_one_epoch_loss, _mean_of_means, says="the values differ")


# ------------------------------------------------------------------------------------------ evaluate
def _train_mode_evaluate(model, loader, loss_fn, device):
    with torch.no_grad():
        results = [(loss_fn(model(x), y).item() * len(y), (model(x).argmax(1) == y).sum().item(), len(y))
                   for x, y in loader]
    n = sum(r[2] for r in results)
    return sum(r[0] for r in results) / n, sum(r[1] for r in results) / n


def _with_graph(model, loader, loss_fn, device):
    mode = model.training
    model.eval()
    total, hits, seen = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        total += loss_fn(logits, y).item() * len(y)
        hits += (logits.argmax(1) == y).sum().item()
        seen += len(y)
    model.train(mode)
    return total / seen, hits / seen


def _left_in_eval(model, loader, loss_fn, device):
    result = evaluate(model, loader, loss_fn, device)
    model.eval()
    return result


def test_evaluate_checks_pass_a_right_answer():
    lesson.check_evaluate_values(evaluate)
    lesson.check_evaluate_values(evaluate, seed=9, examples=29, batch_size=6)
    lesson.check_evaluate_leaves_no_trace(evaluate)


def test_evaluate_checks_name_each_typical_mistake():
    failure(lesson.check_evaluate_values, _train_mode_evaluate, says="(accuracy)")
    failure(lesson.check_evaluate_leaves_no_trace, _train_mode_evaluate, says="must not change")
    failure(lesson.check_evaluate_leaves_no_trace, _with_graph, says="the model's outputs")
    failure(lesson.check_evaluate_leaves_no_trace, _left_in_eval, says="model.training afterwards")
    failure(lesson.check_evaluate_values, lambda *args: list(evaluate(*args)), says="type")
    course_loop = lambda model, loader, loss_fn, device: tuple(vars(training.run_epoch(  # noqa: E731
        model, loader, loss_fn=loss_fn, device=device, show_progress=False)).values())[:2]
    failure(lesson.check_evaluate_values, course_loop, says="switched off")


def test_evaluation_case_accuracy_depends_on_the_mode():
    model, loader, right = lesson.evaluation_case(1404, 10, 4)
    assert evaluate(model, loader, nn.CrossEntropyLoss(), "cpu")[1] == right / 10
    assert _train_mode_evaluate(model, loader, nn.CrossEntropyLoss(), "cpu")[1] != right / 10


# ----------------------------------------------------------------------------------------------- fit
def _fit_keeping_a_reference(model, train_loader, val_loader, loss_fn, optimizer, device, epochs,
                             scheduler=None):
    history = {"train_loss": [], "val_loss": [], "val_acc": [], "best_epoch": -1}
    best, kept = -1.0, None
    for epoch in range(epochs):
        history["train_loss"].append(train_one_epoch(model, train_loader, loss_fn, optimizer, device))
        loss, acc = evaluate(model, val_loader, loss_fn, device)
        history["val_loss"].append(loss)
        history["val_acc"].append(acc)
        if acc > best:
            best, kept, history["best_epoch"] = acc, model.state_dict(), epoch
    model.load_state_dict(kept)
    return history


def _fit_without_scheduler(model, train_loader, val_loader, loss_fn, optimizer, device, epochs,
                           scheduler=None):
    return fit(model, train_loader, val_loader, loss_fn, optimizer, device, epochs)


def _fit_with_the_course_loop(model, train_loader, val_loader, loss_fn, optimizer, device, epochs,
                              scheduler=None):
    result = training.fit_model(model, train_loader, val_loader, loss_fn=loss_fn, optimizer=optimizer,
                                epochs=epochs, device=device, show_progress=False)
    return {"train_loss": result.train_loss, "val_loss": result.val_loss, "val_acc": result.val_acc,
            "best_epoch": result.best_epoch}


def test_fit_checks_pass_a_right_answer():
    lesson.check_fit_keeps_best(fit)
    lesson.check_fit_keeps_best(fit, seed=3, plan=(0.5, 0.875, 0.875, 0.25, 0.625))
    lesson.check_fit_history(fit)
    lesson.check_fit_history(fit, seed=4, plan=(0.125, 0.25), use_scheduler=False)


def test_fit_checks_name_each_typical_mistake():
    keeps_best = lesson.check_fit_keeps_best
    failure(keeps_best, _fit_keeping_a_reference, says="expected: the weights of epoch 1")
    failure(lesson.check_fit_history, _fit_without_scheduler, says="learning rate after 3 epochs")
    failure(keeps_best, _fit_with_the_course_loop, says="training.fit_model is switched off")


def test_fit_history_check_records_the_students_own_functions_and_gives_them_back():
    original = globals()["train_one_epoch"]
    with lesson.recording(fit, "train_one_epoch", "evaluate", "no_such_function") as calls:
        assert globals()["train_one_epoch"] is not original
        lesson.check_fit_keeps_best(fit)
    assert globals()["train_one_epoch"] is original and "no_such_function" not in globals()
    assert len(calls["train_one_epoch"].returned) == 4 and calls["no_such_function"].returned == []


def test_planned_validation_follows_its_plan():
    model = nn.Linear(4, 3)
    validation = lesson.PlannedValidation(model, torch.randn(8, 4), [0.25, 0.75], 3)
    for share in (0.25, 0.75):
        assert evaluate(model, validation, nn.CrossEntropyLoss(), "cpu")[1] == share
    assert len(validation.snapshots) == 2


# --------------------------------------------------------------------------------- accumulation_step
def _step_per_micro_batch(model, loss_fn, optimizer, micro_batches):
    n = sum(len(y) for _, y in micro_batches)
    total = 0.0
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) * len(y) / n
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


def _keeping_leftovers(model, loss_fn, optimizer, micro_batches):
    n = sum(len(y) for _, y in micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) * len(y) / n).backward()
    optimizer.step()
    return 0.0


def _unweighted(model, loss_fn, optimizer, micro_batches):
    optimizer.zero_grad()
    losses = [loss_fn(model(x), y) for x, y in micro_batches]
    sum(losses).backward()
    optimizer.step()
    return sum(loss.item() for loss in losses)


def test_accumulation_checks_pass_a_right_answer():
    lesson.check_accumulation_step(accumulation_step)
    lesson.check_accumulation_step(accumulation_step, seed=2, sizes=(5, 3, 8, 1), widths=(4, 6, 5))
    lesson.check_accumulation_loss(accumulation_step)
    lesson.check_accumulation_loss(accumulation_step, seed=2, sizes=(6,), widths=(3, 3, 2))


def test_accumulation_checks_name_each_typical_mistake():
    failure(lesson.check_accumulation_step, _step_per_micro_batch, says="optimizer steps")
    failure(lesson.check_accumulation_step, _keeping_leftovers, says="vs the large batch's gradient")
    failure(lesson.check_accumulation_step, _unweighted, says="vs the large batch's gradient")
    failure(lesson.check_accumulation_loss, _unweighted, says="the values differ")
    failure(lesson.check_accumulation_loss, lambda *args: torch.tensor(accumulation_step(*args)),
                 says="type")


# ---------------------------------------------------------------------------------- make_classifier
def _trained_enough():
    """A classifier that is right on every test image: a stand-in for a trained one."""
    x = torch.randn(20, 1, 28, 28)
    y = torch.randint(0, 10, (20,))

    class Lookup(nn.Module):
        def forward(self, images):
            return nn.functional.one_hot(y[:len(images)], 10).float() * 5

    return Lookup(), DataLoader(TensorDataset(x, y), batch_size=20)


def test_classifier_checks_pass_a_right_answer_and_fail_wrong_ones():
    classifier, test_loader = _trained_enough()
    lesson.check_classifier(make_classifier, classifier, test_loader, "cpu")
    lesson.check_classifier_is_new(make_classifier, classifier)
    failure(lesson.check_classifier, lambda: training.make_cnn(), classifier, test_loader, "cpu",
                 says="training.make_cnn is switched off")
    failure(lesson.check_classifier, lambda: nn.Linear(784, 10), classifier, test_loader, "cpu",
                 says="raised an exception")
    failure(lesson.check_classifier, make_classifier, make_classifier(), test_loader, "cpu",
                 says="classifier accuracy on 20 test images")
    trained = make_classifier()
    failure(lesson.check_classifier_is_new, lambda: trained, trained, says="two new models")


# ------------------------------------------------------------------------------------------- harness
def test_switched_off_blocks_the_helper_and_its_aliases_and_gives_them_back():
    run_epoch = training.run_epoch
    namespace = {"alias": run_epoch, "other": 1}
    student = type(lambda: 0)((lambda: 0).__code__, namespace)
    with lesson.switched_off(["run_epoch"], student):
        with pytest.raises(checks.ShortcutUsed):
            training.run_epoch()
        with pytest.raises(checks.ShortcutUsed):
            namespace["alias"]()
    assert training.run_epoch is run_epoch and namespace == {"alias": run_epoch, "other": 1}


def test_loop_recorder_records_events_modes_and_gradients():
    recorder = lesson.LoopRecorder()
    model = recorder.watch(nn.Linear(3, 2))
    optimizer = lesson.SpySGD(model.parameters(), recorder)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    for _ in range(2):
        recorder.loss(model(x), y).backward()
        optimizer.step()
    assert recorder.events == ["forward", "loss", "backward", "step"] * 2
    assert recorder.modes == [True, True] and recorder.outputs_in_graph == [True, True]
    assert recorder.stale_backwards == 1 and recorder.empty_steps() == 0
    assert recorder.sizes == [4, 4] and recorder.weighted_loss() == pytest.approx(sum(recorder.losses) / 2)


def test_messages_speak_spanish_in_the_spanish_edition():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_train_one_epoch_loss(_mean_of_means)
    assert "esperado" in str(caught.value) and "pista: cada lote aporta" in str(caught.value)


def test_every_hint_speaks_both_languages():
    for texts in [*lesson.HINTS.values(), *lesson.MORE_HINTS.values()]:
        assert texts["es"].strip() and texts["en"].strip()
