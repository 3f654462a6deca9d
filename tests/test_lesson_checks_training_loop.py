"""graders.lesson_checks.training_loop: each visible check passes a right answer and fails typical
wrong ones with expected / got / hint; the harnesses record what they should.

The answers below are written here, as a student would; none of them lives in the module.
"""

import copy
import math

import pytest
import torch
from check_messages import failure
from torch import nn
from torch.utils.data import DataLoader, Subset

import course
from course import resumable, training
from graders import checks
from graders.checks import CheckFailed
from graders.lesson_checks import training_loop as lesson

pytestmark = pytest.mark.usefixtures("english")


# How test_harness calls each check with a given answer.
CHECK_CALLS = {
    "check_make_transform": lesson.check_make_transform,
    "check_loaders_batches": lesson.check_loaders_batches,
    "check_loaders_order": lesson.check_loaders_order,
    "check_accuracy": lesson.check_accuracy,
    "check_train_one_epoch_steps": lesson.check_train_one_epoch_steps,
    "check_train_one_epoch_loss": lesson.check_train_one_epoch_loss,
    "check_evaluate_values": lesson.check_evaluate_values,
    "check_evaluate_leaves_no_trace": lesson.check_evaluate_leaves_no_trace,
    "check_adamw_step_moments": lesson.check_adamw_step_moments,
    "check_adamw_step_decay": lesson.check_adamw_step_decay,
    "check_warmup_cosine": lesson.check_warmup_cosine,
    "check_warmup_cosine_scheduler": lesson.check_warmup_cosine_scheduler,
    "check_fit_keeps_best": lesson.check_fit_keeps_best,
    "check_fit_history": lesson.check_fit_history,
    "check_accumulation_step": lesson.check_accumulation_step,
    "check_accumulation_loss": lesson.check_accumulation_loss,
    "check_classifier_builds": lesson.check_classifier_builds,
    "check_classifier_learns": lesson.check_classifier_learns,
    "check_augmented_train_output": lesson.check_augmented_train_output,
    "check_augmented_train_random": lesson.check_augmented_train_random,
    "check_augmented_test_fixed": lesson.check_augmented_test_fixed,
    "check_log_epoch_steps": lesson.check_log_epoch_steps,
    "check_log_epoch_metrics": lesson.check_log_epoch_metrics,
    # one answer cell defines save_checkpoint and resume: the answer given stands for both
    "check_resume_model_and_optimizer": lambda answer: lesson.check_resume_model_and_optimizer(
        answer, answer),
    "check_resume_schedule_and_scaler": lambda answer: lesson.check_resume_schedule_and_scaler(
        answer, answer),
    "check_resume_random_state_and_order": lambda answer: lesson.check_resume_random_state_and_order(
        answer, answer),
    "check_concepts": lesson.check_concepts,
}


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


class SmallCNN(nn.Module):
    """A CNN written as a class, pooling with the functional form: another way to the same answer."""

    def __init__(self):
        super().__init__()
        self.first, self.first_norm = nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.second, self.second_norm = nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.head = nn.Linear(16 * 7 * 7, 10)

    def forward(self, images):
        x = nn.functional.max_pool2d(torch.relu(self.first_norm(self.first(images))), 2)
        x = nn.functional.max_pool2d(torch.relu(self.second_norm(self.second(x))), 2)
        return self.head(x.flatten(1))


def make_classifier():
    return SmallCNN()


# ------------------------------------------------------------------------------------------ accuracy
def test_accuracy_check_passes_a_right_answer_and_fails_wrong_ones():
    lesson.check_accuracy(accuracy)
    lesson.check_accuracy(accuracy, seed=7, examples=40, classes=10)
    failure(lesson.check_accuracy,
            lambda logits, targets: (logits.argmax(1) == targets).float().mean(),
            says=["the type is not the expected one", "expected: float", "got: tensor("])
    failure(lesson.check_accuracy,
            lambda logits, targets: (logits.argmin(1) == targets).float().mean().item(),
            says=["accuracy(logits (4, 3), targets): the values differ"])
    failure(lesson.check_accuracy, lambda logits, targets: 0.5,
            says=["accuracy(logits (12, 5), targets): the values differ"])


def test_accuracy_check_plans_a_share_neither_none_nor_all():
    for seed in range(8):
        lesson.check_accuracy(accuracy, seed=seed, examples=20, classes=4)
        for constant in (0.0, 1.0):
            failure(lesson.check_accuracy, lambda logits, targets, c=constant: c, seed=seed,
                    says=["the values differ"])


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
    failure(steps, _without_clearing, says=["backward passes that found another batch's gradients",
                                            "got: 2 (int)"])
    failure(steps, _clearing_before_the_step, says=["optimizer steps with an empty .grad", "got: 3 (int)"])
    failure(steps, _stepping_before_backward,
            says=["the steps are out of order", "got: forward → loss → step → backward"])
    failure(steps, _eval_mode_loop,
            says=["the model's mode", "model.training per pass: [False, False, False]"])


def _eval_mode_loop(model, loader, loss_fn, optimizer, device):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    return 0.0


def test_train_one_epoch_checks_switch_the_course_loop_off():
    failure(lesson.check_train_one_epoch_steps, _course_loop,
            says=["raised an exception", "training.run_epoch is not available in this exercise"])
    assert training.run_epoch.__name__ == "run_epoch"   # given back afterwards


def test_train_one_epoch_loss_check_wants_the_mean_per_example():
    failure(lesson.check_train_one_epoch_loss, _mean_of_means,
            says=["train_one_epoch(...) (10 examples, batches of 4): the values differ"])


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
    failure(lesson.check_evaluate_values, _train_mode_evaluate, says=["[1] (accuracy)", "the values differ"])
    failure(lesson.check_evaluate_leaves_no_trace, _train_mode_evaluate,
            says=["model.state_dict()['1.running_mean'], which must not change", "got: the input modified"])
    failure(lesson.check_evaluate_leaves_no_trace, _with_graph,
            says=["the model's outputs", "expected: no graph", "requires_grad: [True"])
    failure(lesson.check_evaluate_leaves_no_trace, _left_in_eval,
            says=["with the model in train(): model.training afterwards", "got: [False]"])
    failure(lesson.check_evaluate_values, lambda *args: list(evaluate(*args)),
            says=["the type is not the expected one", "expected: tuple"])
    course_loop = lambda model, loader, loss_fn, device: tuple(vars(training.run_epoch(  # noqa: E731
        model, loader, loss_fn=loss_fn, device=device, show_progress=False)).values())[:2]
    failure(lesson.check_evaluate_values, course_loop, says=["training.run_epoch is not available"])


def test_evaluate_checks_run_a_train_mode_answer_the_same_every_time():
    messages = {failure(lesson.check_evaluate_values, _train_mode_evaluate, says=["(accuracy)"])
                for _ in range(3)}
    assert len(messages) == 1, messages


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
    failure(keeps_best, _fit_keeping_a_reference, says=["the values differ",
                                                         "expected: the weights of epoch 1"])
    failure(lesson.check_fit_history, _fit_without_scheduler,
            says=["learning rate after 3 epochs of StepLR", "the values differ"])
    failure(keeps_best, _fit_with_the_course_loop, says=["training.fit_model is not available"])


def _fit_with_made_up_losses(*args):
    history = fit(*args)
    return {**history, "train_loss": [1.0] * len(history["train_loss"])}


def test_fit_history_check_records_the_students_own_functions_and_gives_them_back():
    original = globals()["train_one_epoch"]
    lesson.check_fit_history(fit)
    assert globals()["train_one_epoch"] is original and globals()["evaluate"] is evaluate
    failure(lesson.check_fit_history, _fit_with_made_up_losses,
            says=["history['train_loss']: the values differ", "got: tensor(shape=(3,)", "[1.0, 1.0, 1.0]"])
    assert globals()["train_one_epoch"] is original


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
    failure(lesson.check_accumulation_step, _step_per_micro_batch,
            says=["micro-batches of sizes [4, 4, 4]): optimizer steps", "got: 3 (int)"])
    failure(lesson.check_accumulation_step, _keeping_leftovers,
            says=["vs the large batch's gradient", "the values differ"])
    failure(lesson.check_accumulation_step, _unweighted, says=["vs the large batch's gradient",
                                                               "the values differ"])
    failure(lesson.check_accumulation_loss, _unweighted,
            says=["micro-batches of sizes [3, 5, 4]): the values differ"])
    failure(lesson.check_accumulation_loss, lambda *args: torch.tensor(accumulation_step(*args)),
            says=["the type is not the expected one", "expected: float"])


# ---------------------------------------------------------------------------------------- adamw_step
def _moments(grad, state, betas):
    """Both running averages, kept in ``state``, and their bias-corrected values."""
    if not state:
        state.update(step=0, m=torch.zeros_like(grad), v=torch.zeros_like(grad))
    state["step"] += 1
    state["m"].mul_(betas[0]).add_(grad, alpha=1 - betas[0])
    state["v"].mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    return state["m"] / (1 - betas[0] ** state["step"]), state["v"] / (1 - betas[1] ** state["step"])


def adamw_step(param, grad, state, lr, betas, eps, weight_decay):
    m_hat, v_hat = _moments(grad, state, betas)
    param.mul_(1 - lr * weight_decay)
    param -= lr * m_hat / (v_hat.sqrt() + eps)


def _adam_with_l2(param, grad, state, lr, betas, eps, weight_decay):
    adamw_step(param, grad + weight_decay * param, state, lr, betas, eps, 0.0)


def _no_bias_correction(param, grad, state, lr, betas, eps, weight_decay):
    state.setdefault("m", torch.zeros_like(param)).mul_(betas[0]).add_(grad, alpha=1 - betas[0])
    state.setdefault("v", torch.zeros_like(param)).mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    param.mul_(1 - lr * weight_decay)
    param -= lr * state["m"] / (state["v"].sqrt() + eps)


def _eps_inside_the_root(param, grad, state, lr, betas, eps, weight_decay):
    m_hat, v_hat = _moments(grad, state, betas)
    param.mul_(1 - lr * weight_decay)
    param -= lr * m_hat / (v_hat + eps).sqrt()


def _decay_without_lr(param, grad, state, lr, betas, eps, weight_decay):
    adamw_step(param, grad, state, lr, betas, eps, 0.0)
    param.mul_(1 - weight_decay)


def _rebinding(param, grad, state, lr, betas, eps, weight_decay):
    param = param - lr * grad.sign()   # noqa: F841 (the caller's tensor is left as it was)


def _torch_adamw(param, grad, state, lr, betas, eps, weight_decay):
    weights = nn.Parameter(param.clone())
    optimizer = state.setdefault("optimizer", torch.optim.AdamW([weights], lr=lr, betas=betas, eps=eps,
                                                                weight_decay=weight_decay))
    weights.grad = grad
    optimizer.step()
    param.copy_(weights.detach())


def test_adamw_checks_pass_a_right_answer_with_any_settings():
    lesson.check_adamw_step_moments(adamw_step)
    lesson.check_adamw_step_moments(adamw_step, seed=3, steps=7, lr=3e-3, betas=(0.8, 0.99), eps=1e-3)
    lesson.check_adamw_step_decay(adamw_step)
    lesson.check_adamw_step_decay(adamw_step, seed=4, steps=5, lr=0.05, betas=(0.5, 0.9), eps=1e-6,
                                  weight_decay=0.3)


def test_adamw_checks_fail_wrong_moments_with_expected_got_and_hint():
    for wrong in (_no_bias_correction, _eps_inside_the_root, _rebinding):
        message = failure(lesson.check_adamw_step_moments, wrong, says=("vs torch.optim.AdamW",
                                                                          "the values differ"))
        assert "bias correction" in message
    failure(lesson.check_adamw_step_moments, _torch_adamw,
            says=["torch.optim.AdamW is not available in this exercise"])


def test_adamw_decay_check_tells_decoupled_decay_from_adam_with_l2():
    lesson.check_adamw_step_moments(_adam_with_l2)   # without weight decay the two are the same
    for wrong in (_adam_with_l2, _decay_without_lr):
        message = failure(lesson.check_adamw_step_decay, wrong, says=("with a zero gradient",
                                                                       "the values differ"))
        assert "lr·weight_decay" in message
    failure(lesson.check_adamw_step_decay, lambda *args: adamw_step(*args[:-1], 0.0),
            says=["with a zero gradient (each weight × (1 − lr·weight_decay))", "the values differ"])


def test_adamw_shortcuts_are_switched_off_only_inside_the_check():
    adam_class = torch.optim.AdamW
    failure(lesson.check_adamw_step_decay, _torch_adamw, says=["torch.optim.AdamW is not available"])
    assert torch.optim.AdamW is adam_class
    lesson.check_adamw_step_decay(adamw_step)   # its reference, torch's AdamW, works again


# ------------------------------------------------------------------------------------- warmup_cosine
def warmup_cosine(step, total_steps, warmup_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    done = (step - warmup_steps) / (total_steps - 1 - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * done)) / 2


def warmup_cosine_scheduler(optimizer, total_steps, warmup_steps, min_lr):
    top = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, top, min_lr) / top)


def _cosine_to_total_steps(step, total_steps, warmup_steps, max_lr, min_lr):
    return warmup_cosine(step, total_steps + 1, warmup_steps, max_lr, min_lr)


def _linear_decay(step, total_steps, warmup_steps, max_lr, min_lr):
    done = (step - warmup_steps) / (total_steps - 1 - warmup_steps)
    return max_lr * step / warmup_steps if step < warmup_steps else max_lr - (max_lr - min_lr) * done


def _warmup_from_one_step(step, total_steps, warmup_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps
    return warmup_cosine(step, total_steps, warmup_steps, max_lr, min_lr)


def test_schedule_checks_pass_a_right_answer_for_any_lengths():
    for _ in range(10):
        lesson.check_warmup_cosine(warmup_cosine)
        lesson.check_warmup_cosine_scheduler(warmup_cosine_scheduler)
    for case in [(9, 0, 1.0, 0.0), (2, 0, 0.1, 0.01), (30, 28, 0.5, 0.1), (101, 20, 3e-4, 3e-5)]:
        rates = lesson.check_warmup_cosine(warmup_cosine, case=case)
        scheduled = lesson.check_warmup_cosine_scheduler(warmup_cosine_scheduler, case=case)
        assert scheduled == pytest.approx(rates)


def test_schedule_check_fails_wrong_schedules_with_expected_got_and_hint():
    for wrong in (_cosine_to_total_steps, _linear_decay, _warmup_from_one_step):
        failure(lesson.check_warmup_cosine, wrong, says=("warmup_cosine(", "the values differ",
                                                         "half a cosine"))
    failure(lesson.check_warmup_cosine, lambda *args: torch.tensor(warmup_cosine(*args)),
            says="the type is not the expected one")
    # a quarter of the decay: (2 + √2)/4, not 0.75
    failure(lesson.check_warmup_cosine, _linear_decay, case=(23, 2, 1.0, 0.0), says="rate at step 7 of")


def test_schedule_check_finds_a_rise_and_a_lopsided_cosine_between_the_known_steps():
    def swapped(step, *args):   # known at 0-2, 5, 8, 11, 14 of (15, 2, 1.0, 0.0): not at 9 and 10
        return warmup_cosine({9: 10, 10: 9}.get(step, step), *args)

    def bumped(step, *args):
        return warmup_cosine(step, *args) + (0.01 if step == 9 else 0.0)

    failure(lesson.check_warmup_cosine, swapped, case=(15, 2, 1.0, 0.0),
            says=("a rate that never rises", "it rises at steps [9]"))
    failure(lesson.check_warmup_cosine, bumped, case=(15, 2, 1.0, 0.0),
            says=("rate(step) + rate(mirrored step) = max_lr + min_lr", "it fails at steps [7, 9]"))
    rates = [warmup_cosine(step, 15, 2, 1.0, 0.0) for step in range(15)]
    failure(lesson._check_schedule_shape, rates[:-1], 15, 2, 1.0, 0.0, label="rates",
            hint=lesson.HINTS["warmup_cosine"], says=["number of rates of rates", "got: 14 (int)"])


def test_scheduler_check_fails_a_rate_used_as_a_factor_and_the_course_schedulers():
    def rate_as_factor(optimizer, total_steps, warmup_steps, min_lr):
        top = optimizer.param_groups[0]["lr"]
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, top, min_lr))

    def plain_cosine(optimizer, total_steps, warmup_steps, min_lr):
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps - 1, eta_min=min_lr)

    def not_a_lambda(optimizer, total_steps, warmup_steps, min_lr):
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)

    failure(lesson.check_warmup_cosine_scheduler, rate_as_factor,
            says=("get_last_lr()", "a factor, not a rate"))
    failure(lesson.check_warmup_cosine_scheduler, plain_cosine,
            says="CosineAnnealingLR is switched off during this check")
    failure(lesson.check_warmup_cosine_scheduler, not_a_lambda,
            says=("the type is not the expected one", "expected: LambdaLR", "StepLR"))
    assert torch.optim.lr_scheduler.CosineAnnealingLR.__name__ == "CosineAnnealingLR"


# ---------------------------------------------------------------------------------- make_classifier
def _mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def test_classifier_builds_check_passes_a_cnn_and_fails_wrong_ones():
    lesson.check_classifier_builds(make_classifier)
    lesson.check_classifier_builds(make_classifier, batch=1)
    failure(lesson.check_classifier_builds, lambda: training.make_cnn(),
            says="training.make_cnn is not available in this exercise")
    failure(lesson.check_classifier_builds, lambda: nn.Linear(784, 10),
            says=["raised an exception", "cannot be multiplied"])
    failure(lesson.check_classifier_builds, _mlp,
            says=["expected: a convolutional network: at least one nn.Conv2d among its layers", "Flatten"])
    built = make_classifier()
    failure(lesson.check_classifier_builds, lambda: built,
            says=["two new models, sharing no parameters", "got: the same model"])
    twins = nn.Sequential(make_classifier())
    failure(lesson.check_classifier_builds, lambda: nn.Sequential(*twins), says="got: 8 shared parameters")


def test_classifier_learns_check_trains_what_the_builder_returns():
    lesson.check_classifier_learns(make_classifier, seed=7)
    for not_a_cnn in (lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)), _mlp):
        failure(lesson.check_classifier_learns, not_a_cnn, seed=7,
                says=["accuracy on 5000 test images", f"expected: ≥ {lesson.CLASSIFIER_BAR:.1%}"])
    failure(lesson.check_classifier_learns, lambda: training.make_cnn(), seed=7,
            says="training.make_cnn is not available in this exercise")


def test_classifier_learns_check_refuses_a_model_trained_beforehand():
    with checks.seeded(0):
        model = make_classifier()
    lesson.check_classifier_learns(lambda: model, seed=8)   # trains this very model
    failure(lesson.check_classifier_learns, lambda: copy.deepcopy(model), seed=8,
            says=["expected: a new, untrained model", "before the check trains it"])


# ------------------------------------------------------------------------- make_augmented_transforms
def _transforms(*random, mean, std, test=None):
    from torchvision import transforms

    to_input = [transforms.ToTensor(), transforms.Normalize((mean,), (std,))]
    return transforms.Compose([*random, *to_input]), test or transforms.Compose(to_input)


def make_augmented_transforms(mean, std, max_shift=2):
    """The RandomAffine way: a shift of up to max_shift pixels is that fraction of the side."""
    from torchvision import transforms

    share = max_shift / 28
    return _transforms(transforms.RandomAffine(degrees=0, translate=(share, share)),
                       transforms.RandomHorizontalFlip(), mean=mean, std=std)


def _cropping(mean, std, max_shift=2, *, padding=None, flip=True):
    from torchvision import transforms

    padding = max_shift if padding is None else padding
    flips = [transforms.RandomHorizontalFlip()] if flip else []
    return _transforms(*flips, transforms.RandomCrop(28, padding=padding), mean=mean, std=std)


def _normalised_first(mean, std, max_shift=2):
    from torchvision import transforms

    to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize((mean,), (std,))])
    return transforms.Compose([to_input, transforms.RandomHorizontalFlip(),
                               transforms.RandomCrop(28, padding=max_shift)]), to_input


def _upside_down(mean, std, max_shift=2):
    from torchvision import transforms

    return _transforms(transforms.RandomVerticalFlip(), transforms.RandomCrop(28, padding=max_shift),
                       mean=mean, std=std)


def test_augmentation_checks_pass_right_answers_written_either_way():
    for answer in (make_augmented_transforms, _cropping):
        lesson.check_augmented_train_output(answer)
        lesson.check_augmented_train_output(answer, seed=1, max_shift=3)
        lesson.check_augmented_train_random(answer)
        lesson.check_augmented_train_random(answer, seed=2, max_shift=1)
        lesson.check_augmented_test_fixed(answer)


def _unchanged(mean, std, max_shift=2):
    return _transforms(mean=mean, std=std)


def _one_transform(mean, std, max_shift=2):
    return _unchanged(mean, std)[0]


def _without_flips(mean, std, max_shift=2):
    return _cropping(mean, std, max_shift, flip=False)


def _sideways_only(mean, std, max_shift=2):
    return _cropping(mean, std, max_shift, padding=(max_shift, 0))   # left and right, not up and down


def _always_two(mean, std, max_shift=2):
    return _cropping(mean, std, padding=2)   # max_shift ignored


def test_augmentation_output_check_finds_images_not_placed_as_asked():
    failure(lesson.check_augmented_train_output, _normalised_first, seed=3, max_shift=2,
            says=["the values are not the image's, placed", "values match the closest placement",
                  "the border that comes in at background (pixel 0)"])
    failure(lesson.check_augmented_train_output, _upside_down, seed=3, max_shift=2,
            says="values match the closest placement")
    failure(lesson.check_augmented_train_output, _unchanged,
            says=["expected: augmented images: not always the same placement",
                  "got: always (mirrored, down, right) = (False, 0, 0)"])
    failure(lesson.check_augmented_train_output, _one_transform,
            says=["the type is not the expected one", "Compose"])


def test_augmentation_random_check_counts_flips_and_shifts_over_many_draws():
    failure(lesson.check_augmented_train_random, _without_flips, seed=4,
            says=["mirrored", "expected: about half (between 35 % and 65 %)", "got: 0%"])
    failure(lesson.check_augmented_train_random, _sideways_only, seed=4, max_shift=2,
            says=["vertical shifts seen (pixels)", "from -2 to 2, both ends included", "got: [0]"])
    failure(lesson.check_augmented_train_random, _always_two, seed=4, max_shift=3,
            says=["shifts seen (pixels)", "from -3 to 3", "got: [-2, -1, 0, 1, 2]"])
    failure(lesson.check_augmented_train_random, _always_two, seed=4, max_shift=1,
            says=["from -1 to 1", "got: [-2, -1, 0, 1, 2]"])


def test_augmentation_test_check_wants_the_image_as_it_is_every_time():
    def augmented_test(mean, std, max_shift=2):
        train_transform, _ = _cropping(mean, std, max_shift)
        return train_transform, train_transform

    failure(lesson.check_augmented_test_fixed, augmented_test, seed=5, max_shift=2,
            says=["test_transform(PIL image), call", "the image as it is, normalised", "the values differ"])
    lesson.check_augmented_test_fixed(_unchanged)


def test_augmentation_checks_switch_the_courses_batch_augmentation_off():
    def by_batches(mean, std, max_shift=2):
        from torchvision import transforms

        def shift_flip(image):
            return training.random_shift_flip(transforms.functional.pil_to_tensor(image)[None], max_shift)[0]
        return _transforms(shift_flip, transforms.ToPILImage(), mean=mean, std=std)

    failure(lesson.check_augmented_train_output, by_batches,
            says="training.random_shift_flip is switched off during this check")
    assert training.random_shift_flip.__name__ == "random_shift_flip"


# ------------------------------------------------------------------------------------------- harness
def test_shortcuts_off_blocks_the_course_loop_and_its_aliases_and_gives_them_back():
    run_epoch = training.run_epoch
    namespace = {"alias": run_epoch, "other": 1}
    student = type(lambda: 0)((lambda: 0).__code__, namespace)
    with checks.shortcuts_off(lesson.SHORTCUTS["check_train_one_epoch_steps"], student):
        with pytest.raises(checks.ShortcutUsed, match="training.run_epoch is not available"):
            training.run_epoch()
        with pytest.raises(checks.ShortcutUsed, match="alias is not available"):
            namespace["alias"]()
    assert training.run_epoch is run_epoch and namespace == {"alias": run_epoch, "other": 1}


def test_messages_speak_spanish_in_the_spanish_edition():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_train_one_epoch_loss(_mean_of_means)
    assert "esperado" in str(caught.value) and "pista: cada lote aporta" in str(caught.value)


def test_every_hint_speaks_both_languages():
    for texts in [*lesson.HINTS.values(), *lesson.MORE_HINTS.values()]:
        assert texts["es"].strip() and texts["en"].strip()


# ------------------------------------------------------------------ make_transform and make_loaders
def make_transform(mean, std):
    from torchvision import transforms

    return transforms.Compose([transforms.ToTensor(), transforms.Normalize((mean,), (std,))])


def make_loaders(root, transform, batch_size, num_workers=0, device="cpu", *, shuffle=(True, False),
                 pin=None, train_splits=(True, False)):
    from torchvision import datasets

    pin = torch.device(device).type == "cuda" if pin is None else pin
    sets = [datasets.FashionMNIST(root, train=split, transform=transform, download=False)
            for split in train_splits]
    return tuple(DataLoader(data, batch_size=batch_size, shuffle=mix, num_workers=num_workers,
                            pin_memory=pin) for data, mix in zip(sets, shuffle, strict=True))


def _variant(**options):
    return lambda root, transform, batch_size, num_workers=0, device="cpu": make_loaders(
        root, transform, batch_size, num_workers, device, **options)


def test_make_transform_check_passes_a_right_answer_and_fails_wrong_ones():
    from torchvision import transforms

    lesson.check_make_transform(make_transform)
    lesson.check_make_transform(make_transform, mean=0.5, std=0.25, size=(7, 13))
    failure(lesson.check_make_transform, lambda mean, std: transforms.ToTensor(),
            says=["uint8 pixels): the values differ"])
    failure(lesson.check_make_transform, lambda mean, std: make_transform(0.5, 0.5),
            says=["uint8 pixels): the values differ"])
    unscaled = lambda mean, std: transforms.Compose([  # noqa: E731 (normalising 0-255 pixels)
        transforms.PILToTensor(), transforms.ConvertImageDtype(torch.float32),
        lambda t: (t * 255 - mean) / std])
    failure(lesson.check_make_transform, unscaled, says=["uint8 pixels): the values differ"])
    failure(lesson.check_make_transform, lambda mean, std: transforms.PILToTensor(),
            says=["the dtype is not the expected one", "expected: torch.float32", "got: torch.uint8"])
    failure(lesson.check_make_transform, lambda mean, std: None,
            says=["expected: a transform: something you call with an image", "got: None"])


def test_make_loaders_checks_pass_a_right_answer():
    lesson.check_loaders_batches(make_loaders)
    lesson.check_loaders_batches(make_loaders, batch_size=100)
    lesson.check_loaders_order(make_loaders)
    lesson.check_loaders_order(make_loaders, batch_size=33, workers=4)


def test_make_loaders_checks_name_each_typical_mistake():
    failure(lesson.check_loaders_order, _variant(shuffle=(False, False)),
            says=["expected: different (reshuffled every epoch)", "got: the same examples"])
    failure(lesson.check_loaders_order, _variant(shuffle=(True, True)),
            says=["test_loader: labels of the first batch of pass 1", "the values differ"])
    failure(lesson.check_loaders_order, _variant(pin=True),
            says=["train_loader.pin_memory (make_loaders(", "device='cpu')", "got: True (bool)"])
    failure(lesson.check_loaders_order, _variant(pin=False),
            says=["train_loader.pin_memory (make_loaders(", "device='cuda:0')", "got: False (bool)"])
    ignoring_workers = lambda root, transform, batch_size, num_workers=0, device="cpu": make_loaders(  # noqa: E731
        root, transform, batch_size, 0, device)
    failure(lesson.check_loaders_order, ignoring_workers, says=["train_loader.num_workers", "got: 0 (int)"])
    failure(lesson.check_loaders_batches, _variant(train_splits=(True, True)),
            says=["len(test_loader.dataset)", "expected: 10000 (int)", "got: 60000 (int)"])
    failure(lesson.check_loaders_batches, _variant(train_splits=(False, False)),
            says=["len(train_loader.dataset)", "expected: 60000 (int)", "got: 10000 (int)"])

    def test_from_train(root, transform, batch_size, num_workers=0, device="cpu"):
        train, _ = make_loaders(root, transform, batch_size, num_workers, device)
        return train, DataLoader(Subset(train.dataset, range(10_000)), batch_size=batch_size)

    failure(lesson.check_loaders_batches, test_from_train, says="an image that is not in test")
    own_transform = lambda root, transform, batch_size, num_workers=0, device="cpu": make_loaders(  # noqa: E731
        root, make_transform(0.286, 0.353), batch_size, num_workers, device)
    failure(lesson.check_loaders_batches, own_transform,
            says=["image 0 of the first batch (with the transform PixelsPlus(",
                  "an image that is not in train"])
    failure(lesson.check_loaders_batches, lambda *args, **kwargs: make_loaders(*args, **kwargs)[0],
            says=["the type is not the expected one", "expected: tuple | list", "got: <torch.utils.data"])


def test_make_loaders_checks_switch_the_courses_data_helpers_off():
    def with_course_helpers(root, transform, batch_size, num_workers=0, device="cpu"):
        return tuple(training.make_loader(course.fashion_mnist(train=split, transform=transform),
                                          batch_size=batch_size, shuffle=split, device=device)
                     for split in (True, False))

    failure(lesson.check_loaders_batches, with_course_helpers,
            says=["raised an exception", "fashion_mnist is switched off during this check",
                  "build the data with torchvision and DataLoader"])
    assert course.fashion_mnist.__name__ == "fashion_mnist" and training.make_loader.__name__ == "make_loader"


# -------------------------------------------------------------------------------------- log_epoch
def log_epoch(writer, epoch, batch_losses, metrics):
    n = len(batch_losses)
    for i, loss in enumerate(batch_losses):
        writer.add_scalar("loss/train", loss, epoch * n + i)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, epoch)
    writer.flush()


def _restarting_steps(writer, epoch, batch_losses, metrics):
    for i, loss in enumerate(batch_losses):
        writer.add_scalar("loss/train", loss, i)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, epoch)
    writer.flush()


def _metrics_at_the_global_step(writer, epoch, batch_losses, metrics):
    n = len(batch_losses)
    for i, loss in enumerate(batch_losses):
        writer.add_scalar("loss/train", loss, epoch * n + i)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, (epoch + 1) * n)
    writer.flush()


def _without_flush(writer, epoch, batch_losses, metrics):
    n = len(batch_losses)
    for i, loss in enumerate(batch_losses):
        writer.add_scalar("loss/train", loss, epoch * n + i)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, epoch)


def _grouped_with_add_scalars(writer, epoch, batch_losses, metrics):
    n = len(batch_losses)
    for i, loss in enumerate(batch_losses):
        writer.add_scalars("loss", {"train": loss}, epoch * n + i)
    writer.add_scalars("epoch", metrics, epoch)
    writer.flush()


def test_log_epoch_checks_pass_a_right_answer():
    lesson.check_log_epoch_steps(log_epoch)
    lesson.check_log_epoch_steps(log_epoch, epochs=4, batches=7, tags=("loss/val",))
    lesson.check_log_epoch_steps(log_epoch, epochs=2, batches=1, tags=())
    lesson.check_log_epoch_metrics(log_epoch)
    lesson.check_log_epoch_metrics(log_epoch, epochs=5, batches=3, tags=("accuracy/val", "loss/val", "lr"))


def test_log_epoch_checks_name_each_typical_mistake():
    failure(lesson.check_log_epoch_steps, _restarting_steps,
            says=["per-batch losses of 3 epochs of 4 batches ('loss/train'): steps", "got: [0, 1, 2, 3, 0"])
    lesson.check_log_epoch_metrics(_restarting_steps)   # the metrics part is right
    failure(lesson.check_log_epoch_metrics, _metrics_at_the_global_step,
            says=["epoch metric after 3 epochs ('accuracy/val'): steps", "got: [2, 4, 6]"])
    lesson.check_log_epoch_steps(_metrics_at_the_global_step)
    lesson.check_log_epoch_steps(_without_flush)     # the check flushes: not flushing is no race to lose
    lesson.check_log_epoch_metrics(_without_flush)
    failure(lesson.check_log_epoch_steps, _grouped_with_add_scalars,
            says=["expected: 'loss/train'", "got: tags in the writer's folder: []"])
    failure(lesson.check_log_epoch_steps, lambda *args: 1 / 0,
            says=["raised an exception", "ZeroDivisionError"])


# ---------------------------------------------------------------------- save_checkpoint and resume
_PARTS = ("model", "optimizer", "scheduler", "scaler")


def save_checkpoint(path, run):   # another way than the reference's: one flat list, torch.random's names
    torch.save([getattr(run, part).state_dict() for part in _PARTS]
               + [torch.random.get_rng_state(), run.seed, run.epoch, run.step], str(path))


def resume(path, run):
    *states, generator, run.seed, run.epoch, run.step = torch.load(path, weights_only=True)
    for part, state in zip(_PARTS, states, strict=True):
        getattr(run, part).load_state_dict(state)
    torch.random.set_rng_state(generator)


_CARRYING = """
def save_checkpoint(path, run):
    state = {key: getattr(run, key).state_dict() for key in OBJECTS}
    state.update({key: getattr(run, key) for key in NUMBERS})
    if RANDOM:
        state["random"] = torch.get_rng_state()
    torch.save(state, path)


def resume(path, run):
    state = torch.load(path)
    for key in OBJECTS:
        getattr(run, key).load_state_dict(state[key])
    for key in NUMBERS:
        setattr(run, key, state[key])
    if RANDOM:
        torch.set_rng_state(state["random"])
"""


def _carrying(objects=_PARTS, numbers=("seed", "epoch", "step"), random=True):
    """``(save_checkpoint, resume)`` of a cell whose checkpoint carries only these parts of a run; the
    second is in the first's globals, as in a notebook."""
    namespace = {"torch": torch, "OBJECTS": objects, "NUMBERS": numbers, "RANDOM": random}
    exec(_CARRYING, namespace)
    return namespace["save_checkpoint"], namespace["resume"]


RESUME_CHECKS = (lesson.check_resume_model_and_optimizer, lesson.check_resume_schedule_and_scaler,
                 lesson.check_resume_random_state_and_order)


def _whole_object(path, run):
    torch.save(run, path)


def test_resume_checks_pass_right_answers_written_either_way():
    for pair in [(save_checkpoint, resume), _carrying()]:
        for check in RESUME_CHECKS:
            check(*pair)
    lesson.check_resume_model_and_optimizer(save_checkpoint, resume, seed=1450, stop=1)
    lesson.check_resume_schedule_and_scaler(save_checkpoint, resume, seed=1453, stop=17)
    lesson.check_resume_random_state_and_order(save_checkpoint, resume, seed=1455, stop=16)


def test_resume_checks_give_each_part_of_the_state_its_own_point():
    no_random = _carrying(random=False)
    lesson.check_resume_model_and_optimizer(*no_random)
    lesson.check_resume_schedule_and_scaler(*no_random)
    failure(lesson.check_resume_random_state_and_order, *no_random,
            says=["the global random state at the end", "the same dropout masks", "hint('resume')"])
    no_seed = _carrying(numbers=("epoch", "step"))
    lesson.check_resume_schedule_and_scaler(*no_seed)
    failure(lesson.check_resume_random_state_and_order, *no_seed, says=["weights 0.weight at the end"])
    no_schedule = _carrying(objects=("model", "optimizer"))
    lesson.check_resume_model_and_optimizer(*no_schedule)
    lesson.check_resume_random_state_and_order(*no_schedule)
    failure(lesson.check_resume_schedule_and_scaler, *no_schedule, says=["the last learning rate"])
    no_scaler = _carrying(objects=("model", "optimizer", "scheduler"))
    failure(lesson.check_resume_schedule_and_scaler, *no_scaler, says=["the GradScaler's"])
    # stopped before its first growth, a scaler started anew grows as often: only its count tells
    failure(lesson.check_resume_schedule_and_scaler, *no_scaler, seed=1452, stop=1,
            says=["the GradScaler's steps since it last grew"])
    weights_only = _carrying(objects=("model",))
    failure(lesson.check_resume_model_and_optimizer, *weights_only,
            says=["the reference: the same run never stopped", "values differ", "hint('resume')"])
    # both the schedule and the scaler are lost: which one the check meets first depends on the draw
    lost = failure(lesson.check_resume_schedule_and_scaler, *weights_only, says=["hint('resume')"])
    assert "the last learning rate" in lost or "the GradScaler's" in lost, lost
    failure(lesson.check_resume_random_state_and_order, *weights_only, says=["values differ"])


def test_resume_checks_name_what_an_answer_that_does_nothing_or_pickles_the_run_did():
    for check in RESUME_CHECKS:
        failure(check, lambda path, run: None, lambda path, run: None,
                says=["expected: a file at path", "got: no file at"])
        failure(check, save_checkpoint, lambda path, run: None, says=["never stopped"])
    failure(lesson.check_resume_model_and_optimizer, _whole_object, lambda path, run: torch.load(path),
            says=["saving: raised an exception"])   # the constant rate's lambda does not pickle
    failure(lesson.check_resume_schedule_and_scaler, _whole_object, lambda path, run: torch.load(path),
            says=["resuming: raised an exception", "UnpicklingError"])   # weights_only refuses the objects


def test_the_course_loop_goes_on_from_a_run_s_epoch_and_step_and_orders_each_epoch_from_its_seed():
    data = resumable.make_data(seed=3, examples=20)        # 3 batches of 8, the last one of 4
    assert torch.equal(resumable.epoch_order(5, 2, 20), resumable.epoch_order(5, 2, 20))
    assert not torch.equal(resumable.epoch_order(5, 2, 20), resumable.epoch_order(5, 3, 20))
    assert torch.equal(resumable.epoch_order(5, 2, 20, shuffle=False), torch.arange(20))
    with checks.seeded(0):
        whole = resumable.make_run(7, total_steps=10)
        losses = resumable.train(whole, data, 10)
        state = torch.get_rng_state()
    with checks.seeded(0):
        parts = resumable.make_run(7, total_steps=10)
        first = resumable.train(parts, data, 10, stop_after=4)
        assert (parts.epoch, parts.step, resumable.steps_taken(parts, 20)) == (1, 1, 4)
        rest = resumable.train(parts, data, 10)
        assert torch.equal(torch.get_rng_state(), state)
    assert first + rest == losses and len(losses) == 10 and (whole.epoch, whole.step) == (3, 1)
    assert all(torch.equal(a, b)
               for a, b in zip(whole.model.parameters(), parts.model.parameters(), strict=True))
    assert resumable.train(whole, data, 10) == []


# ------------------------------------------------------------------------------ the judge's calls
# What the judge (graders/judge) decides from the kernel's data: the module's outcomes run here as in a
# kernel, on the inputs a class's secret draws, and their results go through the wire.
from graders.judge import calls, wire  # noqa: E402  (this section's own tools)
from graders.lessons import solution_path  # noqa: E402

LESSON = "04_training_loop"
SECRET = "a term's secret"


def _judged(function: str, answer) -> dict:
    """``{grade cell: the judge's score}`` of the cells that call ``function``, for a kernel holding
    ``answer`` under that name."""
    asked = [call for call in calls.probe_calls(LESSON, SECRET) if call["function"] == function]
    namespace = {function: answer}
    exec(wire.probe([], asked), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged(LESSON)}
    scores = calls.cell_scores(LESSON, SECRET, solution_path(LESSON), returned, points)
    return {call["cell"]: scores[call["cell"]] for call in asked}


def _lost(function: str, answer) -> set:
    return {cell for cell, score in _judged(function, answer).items() if score == 0}


def _trained_linear(steps: int = 60) -> nn.Module:
    """A linear classifier trained for a moment on 2,000 training images: near 80 % on the test set."""
    split = course.fashion_mnist(train=True)
    index = torch.randperm(len(split.targets), generator=torch.Generator().manual_seed(0))[:2000]
    images, labels = training.normalize(split.data[index]), split.targets[index]
    with checks.seeded(0):
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()
    return model


def _augmented_test_is_random(mean, std, max_shift=2):
    train_transform, _ = _cropping(mean, std, max_shift)
    return train_transform, train_transform


def _rate_as_factor(optimizer, total_steps, warmup_steps, min_lr):
    top = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, top, min_lr))


def _loaders_ignoring_workers(root, transform, batch_size, num_workers=0, device="cpu"):
    return make_loaders(root, transform, batch_size, 0, device)


def _loaders_with_own_transform(root, transform, batch_size, num_workers=0, device="cpu"):
    return make_loaders(root, make_transform(0.286, 0.353), batch_size, num_workers, device)


RIGHT_ANSWERS = {   # written here, each another way than the reference's
    "make_transform": make_transform, "make_loaders": make_loaders, "accuracy": accuracy,
    "train_one_epoch": train_one_epoch, "evaluate": evaluate, "adamw_step": adamw_step,
    "warmup_cosine": warmup_cosine, "warmup_cosine_scheduler": warmup_cosine_scheduler, "fit": fit,
    "accumulation_step": accumulation_step, "make_classifier": make_classifier,
    "make_augmented_transforms": make_augmented_transforms, "log_epoch": log_epoch,
    "save_checkpoint": save_checkpoint}   # its resume is beside it, in this module's globals


@pytest.mark.parametrize("function", RIGHT_ANSWERS)
def test_the_judge_gives_a_right_answer_written_another_way_every_cell_it_decides(function):
    scores = _judged(function, RIGHT_ANSWERS[function])
    assert scores and set(scores.values()) == {1.0}, scores


_BUILT = make_classifier()
LOADER_BATCHES, LOADER_ORDER = "test_make_loaders_batches", "test_make_loaders_order"
EPOCH_STEPS, EPOCH_LOSS = "test_train_one_epoch_steps", "test_train_one_epoch_loss"
EVALUATE_VALUES, EVALUATE_TRACE = "test_evaluate_values", "test_evaluate_leaves_no_trace"
ADAM_MOMENTS, ADAM_DECAY = "test_adamw_step_moments", "test_adamw_step_decay"
ACCUMULATION = {"test_accumulation_step", "test_accumulation_loss"}
AUGMENT_OUTPUT, AUGMENT_RANDOM = "test_augmented_train_output", "test_augmented_train_random"
AUGMENT_TEST = "test_augmented_test_fixed"
LOG_STEPS, LOG_METRICS = "test_log_epoch_steps", "test_log_epoch_metrics"
RESUME_MODEL, RESUME_SCHEDULE = "test_resume_model_and_optimizer", "test_resume_schedule_and_scaler"
RESUME_RANDOM = "test_resume_random_state_and_order"
WRONG_ANSWERS = [   # (the notebook's name, a wrong answer, the judged cells it loses)
    ("make_transform", lambda mean, std: make_transform(0.5, 0.5), {"test_make_transform"}),
    ("make_transform", lambda mean, std: __import__("torchvision").transforms.PILToTensor(),
     {"test_make_transform"}),
    ("make_loaders", _variant(shuffle=(False, False)), {LOADER_ORDER}),
    ("make_loaders", _variant(shuffle=(True, True)), {LOADER_ORDER}),
    ("make_loaders", _variant(pin=True), {LOADER_ORDER}),
    ("make_loaders", _variant(pin=False), {LOADER_ORDER}),
    ("make_loaders", _loaders_ignoring_workers, {LOADER_ORDER}),
    ("make_loaders", _variant(train_splits=(True, True)), {LOADER_BATCHES, LOADER_ORDER}),
    ("make_loaders", _loaders_with_own_transform, {LOADER_BATCHES, LOADER_ORDER}),
    ("accuracy", lambda logits, targets: float((logits.argmax(dim=1) == targets).sum()), {"test_accuracy"}),
    ("train_one_epoch", _without_clearing, {EPOCH_STEPS, EPOCH_LOSS}),
    ("train_one_epoch", _clearing_before_the_step, {EPOCH_STEPS, EPOCH_LOSS}),
    ("train_one_epoch", _stepping_before_backward, {EPOCH_STEPS, EPOCH_LOSS}),
    ("train_one_epoch", _eval_mode_loop, {EPOCH_STEPS, EPOCH_LOSS}),
    ("train_one_epoch", _mean_of_means, {EPOCH_LOSS}),
    ("evaluate", _train_mode_evaluate, {EVALUATE_VALUES, EVALUATE_TRACE}),
    ("evaluate", _with_graph, {EVALUATE_TRACE}),
    ("evaluate", _left_in_eval, {EVALUATE_TRACE}),
    ("adamw_step", _adam_with_l2, {ADAM_DECAY}),
    ("adamw_step", _decay_without_lr, {ADAM_DECAY}),
    ("adamw_step", _no_bias_correction, {ADAM_MOMENTS, ADAM_DECAY}),
    ("adamw_step", _eps_inside_the_root, {ADAM_MOMENTS, ADAM_DECAY}),
    ("adamw_step", _rebinding, {ADAM_MOMENTS, ADAM_DECAY}),
    ("warmup_cosine", _cosine_to_total_steps, {"test_warmup_cosine"}),
    ("warmup_cosine", _linear_decay, {"test_warmup_cosine"}),
    ("warmup_cosine", _warmup_from_one_step, {"test_warmup_cosine"}),
    ("warmup_cosine_scheduler", _rate_as_factor, {"test_warmup_cosine_scheduler"}),
    ("fit", _fit_keeping_a_reference, {"test_fit_keeps_best", "test_fit_history"}),   # nor the scheduler
    ("fit", _fit_without_scheduler, {"test_fit_history"}),
    ("fit", _fit_with_made_up_losses, {"test_fit_history"}),
    ("accumulation_step", _step_per_micro_batch, ACCUMULATION),
    ("accumulation_step", _keeping_leftovers, ACCUMULATION),
    ("accumulation_step", _unweighted, ACCUMULATION),
    ("make_classifier", _mlp, {"test_classifier_builds"}),
    ("make_classifier", lambda: nn.Linear(784, 10), {"test_classifier_builds"}),
    ("make_classifier", lambda: _BUILT, {"test_classifier_builds"}),
    ("make_augmented_transforms", _normalised_first, {AUGMENT_OUTPUT, AUGMENT_RANDOM}),
    ("make_augmented_transforms", _upside_down, {AUGMENT_OUTPUT, AUGMENT_RANDOM}),
    ("make_augmented_transforms", _unchanged, {AUGMENT_OUTPUT, AUGMENT_RANDOM}),
    ("make_augmented_transforms", _without_flips, {AUGMENT_RANDOM}),
    ("make_augmented_transforms", _sideways_only, {AUGMENT_RANDOM}),
    ("make_augmented_transforms", _augmented_test_is_random, {AUGMENT_TEST}),
    ("make_augmented_transforms", _one_transform, {AUGMENT_OUTPUT, AUGMENT_RANDOM, AUGMENT_TEST}),
    ("log_epoch", _restarting_steps, {LOG_STEPS}),
    ("log_epoch", _metrics_at_the_global_step, {LOG_METRICS}),
    ("log_epoch", _grouped_with_add_scalars, {LOG_STEPS, LOG_METRICS}),
    ("save_checkpoint", _carrying(random=False)[0], {RESUME_RANDOM}),
    ("save_checkpoint", _carrying(numbers=("epoch", "step"))[0], {RESUME_RANDOM}),
    ("save_checkpoint", _carrying(objects=("model", "optimizer"))[0], {RESUME_SCHEDULE}),
    ("save_checkpoint", _carrying(objects=("model", "optimizer", "scheduler"))[0], {RESUME_SCHEDULE}),
    ("save_checkpoint", _carrying(objects=("model",))[0], {RESUME_MODEL, RESUME_SCHEDULE, RESUME_RANDOM}),
    ("save_checkpoint", lambda path, run: None, {RESUME_MODEL, RESUME_SCHEDULE, RESUME_RANDOM}),
]


@pytest.mark.parametrize(("function", "answer", "lost"), WRONG_ANSWERS,
                         ids=[f"{function}-{getattr(answer, '__name__', '')}-{i}"
                              for i, (function, answer, _) in enumerate(WRONG_ANSWERS)])
def test_the_judge_takes_from_a_wrong_answer_the_cells_its_mistake_shows_in(function, answer, lost):
    assert _lost(function, answer) == lost


# What only the kernel's spy sees: the course's own helpers or torch's optimizer doing the work give the
# right data; the kernel's check refuses them, and a judged cell scores the lower of the two verdicts.
def _kept_torch_adamw(param, grad, state, lr, betas, eps, weight_decay):
    if not state:
        state["weights"] = nn.Parameter(param.clone())
        state["optimizer"] = torch.optim.AdamW([state["weights"]], lr=lr, betas=betas, eps=eps,
                                               weight_decay=weight_decay)
    state["weights"].grad = grad.clone()
    state["optimizer"].step()
    param.copy_(state["weights"].detach())


SPY_ONLY = [("train_one_epoch", _course_loop), ("adamw_step", _kept_torch_adamw),
            ("log_epoch", _without_flush)]


@pytest.mark.parametrize(("function", "answer"), SPY_ONLY, ids=[f for f, _ in SPY_ONLY])
def test_what_only_the_kernels_spy_sees_leaves_the_judged_cells_alone(function, answer):
    assert _lost(function, answer) == set()


def test_the_judge_wants_a_trained_classifier_and_holds_the_labels_itself():
    trained = _trained_linear()
    assert _judged("classifier", trained) == {"test_classifier_accuracy": 1.0}
    assert trained.training, "the model's mode is given back"
    with checks.seeded(0):
        untrained = make_classifier()
    assert _judged("classifier", untrained) == {"test_classifier_accuracy": 0.0}
    assert untrained.training
    assert _judged("classifier", _trained_linear(steps=1)) == {"test_classifier_accuracy": 0.0}
    # the kernel sees the images, never the labels: what it sends back is all the judge takes from it
    (images,), _ = calls.requests(LESSON, SECRET)["test_classifier_accuracy"]
    assert images.dtype == torch.uint8 and images.shape == (lesson.JUDGED_IMAGES, 28, 28)


def test_the_outcomes_give_back_the_notebooks_random_state_and_names():
    namespace = globals()
    original = namespace["train_one_epoch"], namespace["evaluate"]
    torch.manual_seed(5)
    before = torch.get_rng_state()
    for call in calls.judged(LESSON):
        if call.function in RIGHT_ANSWERS and call.outcome:
            for args in calls.requests(LESSON, SECRET)[call.grade_cell][:1]:
                call.outcome(RIGHT_ANSWERS[call.function], *args)
    assert torch.equal(torch.get_rng_state(), before)
    assert (namespace["train_one_epoch"], namespace["evaluate"]) == original


def test_the_inputs_differ_from_one_term_to_the_next():
    this_term, next_term = calls.requests(LESSON, SECRET), calls.requests(LESSON, "next term")
    for cell in ("test_make_loaders_order", "test_fit_keeps_best", "test_augmented_train_random",
                 "test_log_epoch_steps"):
        assert repr(this_term[cell]) != repr(next_term[cell]), cell
