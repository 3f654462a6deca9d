"""graders.lesson_checks.debugging_lab: each visible check passes a right answer and fails a typical
wrong one with expected / got / hint; its spies and recorders are seen at work through the checks.

The answers below are written here, as a student would; none of them lives in the module.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from check_messages import failure
from lesson_files import read_solution
from torch import nn
from wrong_answers import defined

import course
from course import training
from course.training import predict as course_predict
from course.training import run_epoch as course_run_epoch
from graders import checks
from graders.checks import CheckFailed
from graders.judge import calls, wire
from graders.lesson_checks import debugging_lab as lesson
from graders.lessons import solution_path

pytestmark = pytest.mark.usefixtures("english")


# ------------------------------------------------------------------------------------- right answers
def good_step(model, batch, optimizer):
    x, y = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def probe_step_keeping(clear_before_the_batch, probe_after_the_step=False):
    """A step with a probe measured through ``.grad``: right when the probe's gradient is cleared
    before the batch's backward pass and measured before the update."""
    def step_with_probe(model, batch, optimizer, probe):
        def probe_norm():
            optimizer.zero_grad()
            F.cross_entropy(model(probe[0]), probe[1]).backward()
            return torch.cat([param.grad.flatten() for param in model.parameters()]).norm().item()

        norm = None if probe_after_the_step else probe_norm()
        if clear_before_the_batch:
            optimizer.zero_grad()
        loss = F.cross_entropy(model(batch[0]), batch[1])
        loss.backward()
        optimizer.step()
        return loss.item(), probe_norm() if probe_after_the_step else norm

    return step_with_probe


good_probe_step = probe_step_keeping(clear_before_the_batch=True)
# The held-out batch's gradient left in .grad: the update learns from it too.
probe_gradient_in_the_update = probe_step_keeping(clear_before_the_batch=False)
# The probe measured at the weights after the update.
probe_after_the_step = probe_step_keeping(clear_before_the_batch=True, probe_after_the_step=True)


def probe_by_autograd_grad(model, batch, optimizer, probe):
    """Right, another way: the probe's gradient taken with torch.autograd.grad, which leaves .grad
    alone, and the gradients set to None by hand."""
    probe_grads = torch.autograd.grad(F.cross_entropy(model(probe[0]), probe[1]), list(model.parameters()))
    for param in model.parameters():
        param.grad = None
    loss = F.cross_entropy(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.item(), math.sqrt(sum(float((grad ** 2).sum()) for grad in probe_grads))


def epoch_keeping(loss_kept, outputs_kept, returned):
    """An epoch of training steps that keeps ``loss_kept(loss)`` and ``outputs_kept(logits)`` of each
    batch and returns ``returned(losses, outputs)``: right, or one of the ways to keep a graph."""
    def epoch(model, batches, loss_fn, optimizer):
        losses, outputs = [], []
        for x, y in batches:
            optimizer.zero_grad()
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            optimizer.step()
            losses.append(loss_kept(loss))
            outputs.append(outputs_kept(logits))
        return returned(losses, outputs)

    return epoch


def _joined(losses, outputs):
    return losses, torch.cat(outputs)


good_epoch = epoch_keeping(torch.Tensor.item, torch.Tensor.detach, _joined)


def epoch_into_a_buffer(model, batches, loss_fn, optimizer):
    """Right, another way: the gradients set to None, the losses kept detached in a float64 tensor,
    the outputs copied under no_grad into one tensor allocated at the first batch."""
    losses = torch.zeros(len(batches), dtype=torch.float64)
    outputs, start = None, 0
    for index, (x, y) in enumerate(batches):
        for param in model.parameters():
            param.grad = None
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        if outputs is None:
            outputs = torch.empty(sum(len(inputs) for inputs, _ in batches), logits.shape[1])
        with torch.no_grad():
            outputs[start:start + len(x)] = logits
            losses[index] = loss
        start += len(x)
    return losses.tolist(), outputs


class GoodBinaryClassifier(nn.Module):
    def __init__(self, n_in, n_hidden):
        super().__init__()
        self.hidden = nn.Linear(n_in, n_hidden)
        self.out = nn.Linear(n_hidden, 1)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))[:, 0]

    def predict_proba(self, x):
        scores = self(x)
        return torch.exp(scores) / (1 + torch.exp(scores))


class SigmoidBinaryClassifier(GoodBinaryClassifier):
    def forward(self, x):
        return torch.sigmoid(super().forward(x))


class SqueezedEverything(GoodBinaryClassifier):
    def forward(self, x):
        return self.out(torch.relu(self.hidden(x))).squeeze()


class ProbabilitiesAsLogits(GoodBinaryClassifier):
    def predict_proba(self, x):
        return self(x)


class GoodBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x).relu() + x


class InPlaceBlock(GoodBlock):
    def forward(self, x):
        h = torch.relu(self.fc(x))
        h += x
        return h


def good_first_bad_step(train_step, model, batch, optimizer, max_steps):
    step = 0
    while step < max_steps:
        step += 1
        if not math.isfinite(float(train_step(model, batch, optimizer))):
            return step
    return None


# ------------------------------------------------------------------------------ how test_harness calls
def _reference_forward(block, x):
    return x + torch.relu(F.linear(x, block.fc.weight, block.fc.bias))


def _like_reference(answer):
    with checks.seeded(0):
        model = lesson.mlp(2, 3, 2)
    batch, probe = (lesson.classification_batch(4, 2, 2, checks.seeded_generator(seed)) for seed in (0, 1))
    lesson.check_like_reference(answer, good_probe_step, model, batch, 0.1, extra=(probe,),
                                label="MLP 2-3-2, batch, optimizer, probe", exercise="step_with_probe",
                                calls=1)


CHECK_CALLS = {
    "check_probe_step_update": lesson.check_probe_step_update,
    "check_probe_step_returns": lesson.check_probe_step_returns,
    "check_like_reference": _like_reference,
    "check_logits_on_model_device": lambda answer: lesson.check_logits_on_model_device(answer, "cpu"),
    "check_binary_classifier_learns": lesson.check_binary_classifier_learns,
    "check_binary_predict_proba": lesson.check_binary_predict_proba,
    "check_regression_loss": lambda answer: lesson.check_regression_loss(
        answer, torch.ones(2, 1), torch.zeros(2), torch.tensor(1.0), torch.ones(2)),
    "check_regression_loss_by_hand": lesson.check_regression_loss_by_hand,
    "check_epoch_steps": lesson.check_epoch_steps,
    "check_epoch_outputs": lesson.check_epoch_outputs,
    "check_block": lambda answer: lesson.check_block(answer, 2, torch.ones(1, 2), _reference_forward,
                                                     lesson.grads_of(_reference_forward), torch.ones(1, 2)),
    "check_residual_by_hand": lesson.check_residual_by_hand,
    "check_first_bad_step_scripted": lambda answer: lesson.check_first_bad_step_scripted(
        answer, [1.0, math.nan], 2, 2),
    "check_first_bad_step_by_hand": lesson.check_first_bad_step_by_hand,
    "check_first_bad_step_on_training": lesson.check_first_bad_step_on_training,
    "check_layer_statistics_forward": lambda answer: lesson.check_layer_statistics_forward(answer, (3,)),
    "check_layer_statistics_backward": lambda answer: lesson.check_layer_statistics_backward(answer, (3,)),
    "check_layer_statistics_update": lambda answer: lesson.check_layer_statistics_update(answer, (3,)),
    "check_diagnose_vanishing": lambda answer: lesson.check_diagnose_vanishing(answer, runs=1),
    "check_diagnose_lr_too_high": lambda answer: lesson.check_diagnose_lr_too_high(answer, runs=1),
    "check_overfit_one_batch_fits": lesson.check_overfit_one_batch_fits,
    "check_overfit_one_batch_losses": lesson.check_overfit_one_batch_losses,
    "check_lr_range_test_steps": lesson.check_lr_range_test_steps,
    "check_lr_range_test_restores": lesson.check_lr_range_test_restores,
    "check_concepts": lesson.check_concepts,
    "check_fit_regressor_one_batch": lesson.check_fit_regressor_one_batch,
    "check_fit_regressor_one_epoch": lesson.check_fit_regressor_one_epoch,
    "check_fit_regressor_epochs": lesson.check_fit_regressor_epochs,
    "check_train_and_evaluate_one_step": lesson.check_train_and_evaluate_one_step,
    "check_train_and_evaluate_epochs": lesson.check_train_and_evaluate_epochs,
    "check_train_and_evaluate_returned": lesson.check_train_and_evaluate_returned,
    "check_fault_names": lambda answer: lesson.check_fault_names(answer, "FAULTS_FIT_REGRESSOR"),
}


# ------------------------------------------------------------------ the spies, seen through the checks
def test_the_hooks_on_the_parameters_go_away_after_the_check():
    seen = []
    lesson.check_probe_step_update(lambda model, *rest: seen.append(model) or good_probe_step(model, *rest))
    assert all(not param._backward_hooks for param in seen[0].parameters())


def test_course_loops_are_unavailable_while_an_answer_runs_and_back_afterwards():
    def through_the_course(model, batch, optimizer, probe):
        training.run_epoch(model, [batch], loss_fn=F.cross_entropy, device="cpu", optimizer=optimizer)
        return 0.0, 0.0

    failure(lesson.check_probe_step_update, through_the_course,
            says=["ShortcutUsed", "write the loop yourself: course.training.run_epoch is unavailable"])
    assert training.run_epoch.__module__ == "course.training"


def epoch_through_run_epoch(model, batches, loss_fn, optimizer):
    """The steps left to course.training.run_epoch, imported here as course_run_epoch."""
    losses = []
    course_run_epoch(model, batches, loss_fn=loss_fn, device="cpu", optimizer=optimizer, show_progress=False,
                     step_losses=losses)
    with torch.no_grad():
        return losses, torch.cat([model(x) for x, _ in batches])


def epoch_with_predict(model, batches, loss_fn, optimizer):
    """The steps by hand, then course.training.predict, imported here as course_predict."""
    losses, _ = good_epoch(model, batches, loss_fn, optimizer)
    predictions, _ = course_predict(model, batches, device="cpu")
    return losses, predictions


@pytest.mark.parametrize("check", [lesson.check_epoch_steps, lesson.check_epoch_outputs])
@pytest.mark.parametrize(("answer", "alias"), [(epoch_through_run_epoch, "course_run_epoch"),
                                               (epoch_with_predict, "course_predict")])
def test_a_course_loop_imported_under_another_name_is_unavailable_too(check, answer, alias):
    model = lesson.mlp(2, 4, 3)           # outside a check, the alias is the course's loop and runs
    batches = [lesson.classification_batch(4, 2, 3, checks.seeded_generator(seed)) for seed in (1, 2)]
    losses, outputs = answer(model, batches, F.cross_entropy, torch.optim.SGD(model.parameters(), lr=0.1))
    assert len(losses) == 2 and len(outputs) == 8
    failure(check, answer, says=["ShortcutUsed", f"{alias} is unavailable"])
    assert course_predict is training.predict and course_run_epoch is training.run_epoch


# ---------------------------------------------------------------------------- each exercise's checks
@pytest.mark.parametrize("answer", [good_probe_step, probe_by_autograd_grad])
def test_right_probe_steps_pass_both_checks_visible_and_hidden(answer):
    for check in (lesson.check_probe_step_update, lesson.check_probe_step_returns):
        check(answer)
    lesson.check_probe_step_update(answer, seed=1501, n_in=5, n_classes=4, calls=3)
    lesson.check_probe_step_returns(answer, seed=1502, n_in=6, n_classes=2, calls=3)
    g = torch.Generator().manual_seed(1501)
    for n_in, n_out, lr in [(5, 4, 0.05), (3, 2, 0.3)]:
        batch, probe = (lesson.classification_batch(n, n_in, n_out, g) for n in (20, 7))
        lesson.check_like_reference(answer, good_probe_step, lesson.mlp(n_in, 6, n_out, activation=nn.Tanh),
                                    batch, lr, extra=(probe,), label="MLP", exercise="step_with_probe")


def test_a_probe_gradient_left_in_grad_loses_the_update_only():
    failure(lesson.check_probe_step_update, probe_gradient_in_the_update,
            says=["gradient of inner.0.weight that step() used [call 1]", "the values differ"])
    lesson.check_probe_step_returns(probe_gradient_in_the_update)


def test_a_probe_measured_after_the_update_loses_the_returns_only():
    lesson.check_probe_step_update(probe_after_the_step)
    failure(lesson.check_probe_step_returns, probe_after_the_step,
            says=["step_with_probe(MLP 4-8-5, batch, optimizer, probe) [call 1][1]", "the values differ"])


def test_a_probe_step_that_does_nothing_or_steps_twice_earns_nothing():
    def stub(model, batch, optimizer, probe):
        pass

    def twice(model, batch, optimizer, probe):
        returned = good_probe_step(model, batch, optimizer, probe)
        optimizer.step()
        return returned

    calls_to_step = ["calls to step()", "expected: 1 (int)"]
    failure(lesson.check_probe_step_update, stub, says=[*calls_to_step, "got: 0 (int)"])
    failure(lesson.check_probe_step_returns, stub, says=["the type is not", "expected: tuple"])
    failure(lesson.check_probe_step_update, twice, says=[*calls_to_step, "got: 2 (int)"])


def test_a_probe_step_that_returns_tensors_is_told_so():
    def tensors(model, batch, optimizer, probe):
        return tuple(torch.tensor(value) for value in good_probe_step(model, batch, optimizer, probe))

    failure(lesson.check_probe_step_returns, tensors,
            says=["[call 1][0]", "the type is not the expected one", "expected: float"])


def test_like_reference_finds_a_different_update():
    def twice_the_rate(model, batch, optimizer):
        loss = good_step(model, batch, optimizer)
        optimizer.step()
        return loss

    batch = lesson.classification_batch(8, 3, 2, checks.seeded_generator(1))
    lesson.check_like_reference(good_step, good_step, lesson.mlp(3, 4, 2), batch, 0.1, label="MLP",
                                exercise="step_with_probe")
    failure(lesson.check_like_reference, twice_the_rate, good_step, lesson.mlp(3, 4, 2), batch, 0.1,
            label="MLP", exercise="step_with_probe", says=["0.weight after call 1", "the values differ"])


def test_logits_on_model_device_check():
    lesson.check_logits_on_model_device(lambda model, x: model(x.to(next(model.parameters()).device)), "cpu")
    failure(lesson.check_logits_on_model_device, lambda model, x: model(x), "cpu",
            says=["on meta, x on cpu", "raised an exception", "is not on the expected device"])


def test_binary_classifier_checks():
    lesson.check_binary_classifier_learns(GoodBinaryClassifier)
    lesson.check_binary_classifier_learns(GoodBinaryClassifier, seed=1517, n_in=5)
    lesson.check_binary_predict_proba(GoodBinaryClassifier)
    lesson.check_binary_predict_proba(GoodBinaryClassifier, seed=1518, n_in=5, n=7)
    failure(lesson.check_binary_classifier_learns, SigmoidBinaryClassifier,
            says=["BCEWithLogitsLoss after 40 Adam steps",
                  "with a sigmoid inside the model it cannot go below"])
    failure(lesson.check_binary_classifier_learns, SqueezedEverything,
            says=["BinaryClassifier(2, 16)(x[:1])", "expected: (1,)", "got: ()"])
    failure(lesson.check_binary_predict_proba, SigmoidBinaryClassifier,
            says=["predict_proba(x) after 40 Adam steps", "some below 0.1 and some above 0.9",
                  "got: min 0.5"])
    failure(lesson.check_binary_predict_proba, ProbabilitiesAsLogits,
            says=["BinaryClassifier(3, 8).predict_proba(x)", "values between 0 and 1"])


def test_regression_loss_check():
    lesson.check_regression_loss_by_hand(lambda pred, target: F.mse_loss(pred.flatten(), target.flatten()))
    failure(lesson.check_regression_loss_by_hand, F.mse_loss,
            says=["warnings from regression_loss(pred (3, 1), target (3,))", "broadcasting"])
    failure(lesson.check_regression_loss_by_hand,
            lambda pred, target: (pred.flatten() - target.flatten()).abs().mean(),
            says=["the values differ", "expected: tensor(shape=(), dtype=torch.float32, device=cpu) 1.666"])


def _squeeze_the_last_if_two(t):
    return t.squeeze(-1) if t.dim() == 2 else t


# Right answers written other ways: every one pairs (N, 1) with (N,), one example included.
RIGHT_REGRESSION_LOSSES = {
    "reshape(-1)": lambda pred, target: F.mse_loss(pred.reshape(-1), target.reshape(-1)),
    "view(-1) and nn.MSELoss": lambda pred, target: nn.MSELoss()(pred.view(-1), target.view(-1)),
    "by hand": lambda pred, target: ((torch.flatten(pred) - torch.flatten(target)) ** 2).mean(),
    "squeeze only a second dimension": lambda pred, target: F.mse_loss(_squeeze_the_last_if_two(pred),
                                                                       _squeeze_the_last_if_two(target)),
    "both as (N, 1)": lambda pred, target: F.mse_loss(pred.reshape(-1, 1), target.reshape(-1, 1)),
}


@pytest.mark.parametrize("form", sorted(RIGHT_REGRESSION_LOSSES))
def test_regression_loss_right_answers_pass_visible_and_hidden(form):
    answer = RIGHT_REGRESSION_LOSSES[form]
    lesson.check_regression_loss_by_hand(answer)
    g = torch.Generator().manual_seed(1508)
    for n in [1, 7, 40]:                          # as the hidden tests call it
        pred, target = torch.randn(n, 1, generator=g), torch.randn(n, generator=g)
        expected, grad = ((pred[:, 0] - target) ** 2).mean(), 2 * (pred[:, 0] - target) / n
        lesson.check_regression_loss(answer, pred, target, expected, grad)
        lesson.check_regression_loss(answer, pred[:, 0], target[:, None], expected, grad)


def test_the_visible_regression_check_shows_the_one_example_case():
    """Squeezing every size-1 dimension passes with N = 3 but not with a single example: the visible
    check says so, as the hidden one-example case would."""
    failure(lesson.check_regression_loss_by_hand,
            lambda pred, target: F.mse_loss(pred.squeeze(), target.view(-1)),
            says=["warnings from regression_loss(pred (1, 1), target (1,))",
                  "with a single example too (N = 1)"])
    failure(lesson.check_regression_loss_by_hand,
            lambda pred, target: F.mse_loss(pred.squeeze(-1), target.squeeze(-1)),
            says=["warnings from regression_loss(pred (1, 1), target (1,))", "broadcasting"])


# Detached only at the end: every batch's graph lives until the epoch returns.
outputs_kept_with_their_graph = epoch_keeping(torch.Tensor.item, lambda logits: logits,
                                              lambda losses, outputs: (losses, torch.cat(outputs).detach()))
outputs_not_detached = epoch_keeping(torch.Tensor.item, lambda logits: logits, _joined)
# Section 8's bug: the loss tensors are kept, turned into floats only at the end, and each keeps its
# batch's graph alive until then.
losses_kept_as_tensors = epoch_keeping(lambda loss: loss, torch.Tensor.detach,
                                       lambda losses, outputs: ([loss.item() for loss in losses],
                                                                torch.cat(outputs)))


def outputs_from_a_second_forward(model, batches, loss_fn, optimizer):
    """The outputs computed again, after the update, without a graph."""
    losses, kept = [], []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        with torch.no_grad():
            kept.append(model(x))
    return losses, torch.cat(kept)


def only_the_losses(model, batches, loss_fn, optimizer):
    return good_epoch(model, batches, loss_fn, optimizer)[0]


def the_mean_loss(model, batches, loss_fn, optimizer):
    """The exercise's first draft: the mean of the losses instead of their list."""
    losses, outputs = good_epoch(model, batches, loss_fn, optimizer)
    return sum(losses) / len(losses), outputs


KEPT = []


def keeps_its_last_loss(model, batches, loss_fn, optimizer):
    def remembering(outputs, targets):
        KEPT[:] = [loss_fn(outputs, targets)]          # still there when the epoch returns
        return KEPT[0]

    return good_epoch(model, batches, remembering, optimizer)


def _both_epoch_checks(answer):
    """The visible calls of both grade cells, then the hidden ones."""
    lesson.check_epoch_steps(answer)
    lesson.check_epoch_steps(answer, seed=1509, n_batches=3, n_in=4)
    lesson.check_epoch_outputs(answer)
    lesson.check_epoch_outputs(answer, seed=1517, n_batches=7, n_in=3, batch_size=5)
    lesson.check_epoch_outputs(answer, seed=1518, n_batches=2, n_in=5, batch_size=11)


@pytest.mark.parametrize("answer", [good_epoch, epoch_into_a_buffer])
def test_epoch_right_answers_pass_both_checks_visible_and_hidden(answer):
    _both_epoch_checks(answer)


def _reference_epoch(model, batches, optimizer):
    return tuple(good_epoch(model, batches, F.cross_entropy, optimizer)[0])


def _like_the_reference_epoch(answer, n_batches, n_in, generator):
    batches = [lesson.classification_batch(6, n_in, 3, generator) for _ in range(n_batches)]
    lesson.check_like_reference(lesson.epoch_losses_as_step(answer), _reference_epoch,
                                lesson.mlp(n_in, 5, 3, activation=nn.Tanh), batches, 0.2, calls=1,
                                label=f"MLP {n_in}-5-3, {n_batches} batches",
                                exercise="train_epoch_with_outputs")


@pytest.mark.parametrize("answer", [good_epoch, epoch_into_a_buffer])
def test_epoch_right_answers_step_like_the_reference(answer):
    """As the hidden test of test_epoch_outputs_steps calls them, through epoch_losses_as_step."""
    g = torch.Generator().manual_seed(1509)
    for n_batches, n_in in [(3, 4), (9, 2)]:
        _like_the_reference_epoch(answer, n_batches, n_in, g)


GRAPHS_ALIVE = ["earlier batches whose graph is still alive during the epoch", "expected: 0 (int)"]


@pytest.mark.parametrize(("answer", "says"), [
    (outputs_kept_with_their_graph, GRAPHS_ALIVE),
    (outputs_not_detached, ["[1].requires_grad", "expected: False", "got: True"]),
    (losses_kept_as_tensors, GRAPHS_ALIVE),
    (keeps_its_last_loss, ["batches whose graph is still alive when train_epoch_with_outputs(",
                           "got: 1 (int)"]),
], ids=["outputs detached at the end", "outputs not detached", "losses kept as tensors", "last loss kept"])
def test_a_graph_kept_past_its_batch_loses_only_the_outputs_point(answer, says):
    lesson.check_epoch_steps(answer)
    failure(lesson.check_epoch_outputs, answer, says=says)


def test_outputs_from_a_second_forward_fail_both_checks():
    failure(lesson.check_epoch_steps, outputs_from_a_second_forward,
            says=["per batch: forward pass (training mode) → backward pass",
                  "got: forward pass (training mode) → backward pass → forward pass (training mode), "
                  "no graph"])
    failure(lesson.check_epoch_outputs, outputs_from_a_second_forward,
            says=["train_epoch_with_outputs(MLP 2-8-3, 5 batches of 6, loss_fn, optimizer)[1]",
                  "the values differ"])


def test_an_epoch_that_returns_only_its_losses_earns_no_point():
    for check in (lesson.check_epoch_steps, lesson.check_epoch_outputs):
        failure(check, only_the_losses,
                says=["train_epoch_with_outputs(MLP 2-8-3, 5 batches of", "the type is not the expected one",
                      "expected: tuple", "(list)"])


def test_the_mean_loss_instead_of_the_list_loses_the_steps_point():
    failure(lesson.check_epoch_steps, the_mean_loss,
            says=["train_epoch_with_outputs(MLP 2-8-3, 5 batches of 8, loss_fn, optimizer)[0]",
                  "the type is not the expected one", "expected: list", "(float)"])
    lesson.check_epoch_outputs(the_mean_loss)


def test_an_epoch_that_ignores_the_loss_it_is_given_is_told_so():
    def own_loss(model, batches, loss_fn, optimizer):
        return good_epoch(model, batches, F.cross_entropy, optimizer)

    for check in (lesson.check_epoch_steps, lesson.check_epoch_outputs):
        failure(check, own_loss, says=["calls to loss_fn [train_epoch_with_outputs(", "expected: 5 (int)",
                                       "got: 0 (int)"])


def test_an_epoch_that_does_nothing_earns_no_point():
    def stub(model, batches, loss_fn, optimizer):
        pass

    failure(lesson.check_epoch_steps, stub,
            says=["calls to step() [train_epoch_with_outputs(", "expected: 5 (int)", "got: 0 (int)"])
    failure(lesson.check_epoch_outputs, stub, says=["the type is not the expected one", "expected: tuple"])


def test_residual_check():
    lesson.check_residual_by_hand(GoodBlock)
    failure(lesson.check_residual_by_hand, InPlaceBlock,
            says=["and its backward pass: raised an exception", "modified by an inplace operation"])

    class IgnoresFc(GoodBlock):
        def forward(self, x):
            return x + torch.relu(x) + 0 * self.fc(x)

    failure(lesson.check_residual_by_hand, IgnoresFc,
            says=["ResidualBlockFixed(2)(x (2, 2))", "the values differ"])


def test_residual_against_a_reference_forward():
    def reference(block, x):
        return x + torch.relu(F.linear(x, block.fc.weight, block.fc.bias))

    x, out_grad = torch.randn(3, 5), torch.randn(3, 5)
    lesson.check_block(GoodBlock, 5, x, reference, lesson.grads_of(reference), out_grad)


def test_first_bad_step_checks():
    lesson.check_first_bad_step_by_hand(good_first_bad_step)
    lesson.check_first_bad_step_on_training(good_first_bad_step)

    def off_by_one(train_step, model, batch, optimizer, max_steps):
        for step in range(max_steps):
            if not math.isfinite(float(train_step(model, batch, optimizer))):
                return step
        return None

    def keeps_training(train_step, model, batch, optimizer, max_steps):
        found = None
        for step in range(1, max_steps + 1):
            if not math.isfinite(float(train_step(model, batch, optimizer))) and found is None:
                found = step
        return found

    failure(lesson.check_first_bad_step_by_hand, off_by_one, says=["expected: 4 (int)", "got: 3 (int)"])
    failure(lesson.check_first_bad_step_by_hand, keeps_training,
            says=["calls to train_step", "expected: 4 (int)", "got: 6 (int)"])


def test_messages_speak_spanish_in_the_spanish_edition():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_probe_step_returns(lambda *args: (0.0, 0.0))
    message = str(caught.value)
    assert "\n  esperado: " in message and "\n  obtenido: " in message and "\n  pista: " in message
    assert "los valores no coinciden" in message and "secciones 1 y 2" in message


def test_every_hint_speaks_both_languages_and_names_a_section():
    for exercise, texts in lesson.HINTS.items():
        assert texts["es"].strip() and texts["en"].strip(), exercise
        if exercise != "concept_check":
            assert "secci" in texts["es"] and "section" in texts["en"], exercise
    assert set(lesson.MORE_HINTS) == {texts["more"] for texts in lesson.HINTS.values() if "more" in texts}


# ------------------------------------------------------------ exercises 9 and 10: hooks and a diagnosis
def statistics_by_hand(model, inputs, targets, loss_fn, optimizer, dead=None, clear=True):
    """No hooks: the layers run one by one, each output keeping its gradient (``retain_grad``)."""
    outputs, signal = [], inputs
    for layer in model:
        signal = layer(signal)
        signal.retain_grad()
        outputs.append((layer, signal))
    start = {layer: layer.weight.detach().clone() for layer in model if isinstance(layer, nn.Linear)}
    if clear:
        for param in model.parameters():
            param.grad = None
    loss_fn(signal, targets).backward()
    optimizer.step()
    dead = dead or (lambda out: float((out > 0).sum(dim=0).eq(0).sum()) / out.shape[1])
    linear = [out for layer, out in outputs if isinstance(layer, nn.Linear)]
    return {"activation_std": [out.detach().std().item() for out in linear],
            "dead_share": [dead(out.detach()) for layer, out in outputs if isinstance(layer, nn.ReLU)],
            "grad_norm": [torch.linalg.vector_norm(out.grad).item() for out in linear],
            "update_ratio": [(torch.linalg.vector_norm(layer.weight.detach() - weight)
                              / torch.linalg.vector_norm(weight)).item() for layer, weight in start.items()]}


def other_diagnosis(run):
    """The first step's ratios on a log scale, and the gradient at the first layer against the largest."""
    first = run["update_ratio"][0]
    if sum(math.log10(max(ratio, 1e-30)) for ratio in first) / len(first) > -1.7:
        return "lr_too_high"
    arriving = run["grad_norm"][0]
    return "vanishing" if arriving[0] < 0.05 * max(arriving) else "healthy"


def dead_per_example(*args):
    return statistics_by_hand(*args, dead=lambda out: out.eq(0).float().mean().item())


def grad_norm_of_the_weights(model, *args):
    found = statistics_by_hand(model, *args)
    found["grad_norm"] = [layer.weight.grad.norm().item() for layer in model if isinstance(layer, nn.Linear)]
    return found


def ratio_of_the_gradient(model, *args):
    found = statistics_by_hand(model, *args)
    found["update_ratio"] = [(layer.weight.grad.norm() / layer.weight.norm()).item()
                             for layer in model if isinstance(layer, nn.Linear)]
    return found


def without_clearing(*args):
    return statistics_by_hand(*args, clear=False)


def leaves_a_hook(model, *args):
    model[0].register_forward_hook(lambda *hook_args: None)
    return statistics_by_hand(model, *args)


def loss_only(run):
    loss = run["loss"]
    return "lr_too_high" if loss[-1] > loss[0] else "vanishing" if loss[-1] > 0.9 * loss[0] else "healthy"


DIAGNOSIS_CELLS = {"test_diagnose_vanishing", "test_diagnose_lr_too_high"}


def _reference_diagnosis():
    call = next(call for call in calls.judged(LESSON) if call.grade_cell == "test_diagnose_vanishing")
    return calls.reference_answer(read_solution(LESSON), call)
STATISTICS_CHECKS = {"forward": lesson.check_layer_statistics_forward,
                     "backward": lesson.check_layer_statistics_backward,
                     "update": lesson.check_layer_statistics_update}


@pytest.mark.parametrize(("answer", "failing"), [
    (statistics_by_hand, set()), (dead_per_example, {"forward"}), (grad_norm_of_the_weights, {"backward"}),
    (ratio_of_the_gradient, {"update"}), (without_clearing, {"update"}), (leaves_a_hook, {"update"})])
def test_layer_statistics_checks(answer, failing):
    for part, check in STATISTICS_CHECKS.items():
        if part in failing:
            failure(check, answer, says=["layer_statistics(", "hint", "section 14"])
        else:
            check(answer)


def test_the_statistics_checks_measure_the_same_nets_as_the_student():
    """The copy the check measures starts where the student's net does: a hook that watches the
    original sees the outputs the check expected."""
    kept = []

    def watching(model, *args):
        kept.append(model)
        return statistics_by_hand(model, *args)

    lesson.check_layer_statistics_forward(watching, depths=(4,))
    (model,) = kept
    assert isinstance(model[3], nn.Tanh) and not lesson._hooks_left(model)


def test_the_diagnosis_checks_take_the_reference_and_another_rule_and_refuse_the_loss_alone():
    reference = _reference_diagnosis()
    for answer in (reference, other_diagnosis):
        lesson.check_diagnose_vanishing(answer)
        lesson.check_diagnose_lr_too_high(answer)
    # the loss alone is right on all six runs of a draw in 3 draws of 60; on twenty, about 1 in 20,000
    failure(lesson.check_diagnose_lr_too_high, loss_only, runs=10,
            says=["diagnose_run(run", "hint", "section 14"])
    for label in lesson.KINDS:
        for check in (lesson.check_diagnose_vanishing, lesson.check_diagnose_lr_too_high):
            failure(check, lambda run, label=label: label, says=["expected", "got"])


def test_the_reference_labels_fifty_seeds_runs_right():
    reference = _reference_diagnosis()
    wrong = [(kind, seed) for seed in range(50) for kind in lesson.KINDS
             if reference(lesson.training_run(kind, seed)) != kind]
    assert wrong == []


def test_a_borderline_draw_is_drawn_again_so_the_kinds_stay_apart():
    with checks.one_thread(), checks.seeded(459):  # a healthy draw whose first layer gets 8 % of the largest
        drawn = lesson._training_run("healthy", 459, lesson.RUN_STEPS)
    first = drawn["grad_norm"][0]
    assert first[0] < lesson.HEALTHY_FIRST_LAYER * max(first)
    run = lesson.training_run("healthy", 459)
    assert run != drawn and run["grad_norm"][0][0] > lesson.HEALTHY_FIRST_LAYER * max(run["grad_norm"][0])


def test_a_run_is_plain_data_cut_before_its_first_non_finite_step():
    for kind in lesson.KINDS:
        run = lesson.training_run(kind, 7)
        assert set(run) == {"loss", *lesson.STATISTICS}
        steps = len(run["loss"])
        assert 1 <= steps <= lesson.RUN_STEPS and all(len(run[key]) == steps for key in lesson.STATISTICS)
        assert all(type(value) is float and math.isfinite(value) for value in run["loss"])
        assert lesson.training_run(kind, 7) == run


# ------------------------------------------------------ exercises 11 and 12: two checks before a long run
def overfit_with_momentum(model, inputs, targets, loss_fn, max_steps):
    """Another optimizer, and the early stop decided before the step (that loss gets no step)."""
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(max_steps):
        sgd.zero_grad()
        loss = loss_fn(model(inputs), targets)
        losses.append(loss.item())
        if losses[-1] < 1e-3:
            break
        loss.backward()
        sgd.step()
    return losses


def overfit_too_slowly(model, inputs, targets, loss_fn, max_steps):
    sgd = torch.optim.SGD(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(max_steps):
        sgd.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        sgd.step()
        losses.append(loss.item())
    return losses


def overfit_reporting_after(model, inputs, targets, loss_fn, max_steps):
    """The loss measured again after each step: not the one the step used."""
    adam = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(max_steps):
        adam.zero_grad()
        loss_fn(model(inputs), targets).backward()
        adam.step()
        with torch.no_grad():
            losses.append(loss_fn(model(inputs), targets).item())
        if losses[-1] < 1e-3:
            break
    return losses


def range_on_copies(model, optimizer, batches, loss_fn, lrs):
    """The run on copies of the model and its optimizer: the originals are never touched."""
    model, optimizer = copy.deepcopy((model, optimizer))
    losses = []
    for k, (x, y) in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = lrs[k]
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        losses.append(loss.item())
        if math.isnan(losses[-1]) or math.isinf(losses[-1]) or losses[-1] > 4 * min(losses):
            break
        loss.backward()
        optimizer.step()
    return losses


# every step right, the model left trained
range_never_restored = defined("05_debugging_lab", "lr_range_test", math=math, torch=torch)["lr_range_test"]


def range_loss_after_the_step(model, optimizer, batches, loss_fn, lrs):
    weights, state = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    losses = []
    for lr, (x, y) in zip(lrs, batches, strict=True):
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            losses.append(loss_fn(model(x), y).item())
        if not math.isfinite(losses[-1]) or losses[-1] > 4 * min(losses):
            break
    model.load_state_dict(weights)
    optimizer.load_state_dict(state)
    return losses


def range_to_the_end(model, optimizer, batches, loss_fn, lrs):
    """Never stops: every rate runs, however the loss blows up."""
    weights, state = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    losses = []
    for lr, (x, y) in zip(lrs, batches, strict=True):
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    model.load_state_dict(weights)
    optimizer.load_state_dict(state)
    return losses


def test_overfit_one_batch_checks():
    for answer in (overfit_with_momentum, _reference_answer("overfit_one_batch")):
        lesson.check_overfit_one_batch_fits(answer)
        lesson.check_overfit_one_batch_losses(answer)
    failure(lesson.check_overfit_one_batch_fits, overfit_too_slowly,
            says=["expected: below 0.05", "section 15", "hint('overfit_one_batch')"])
    lesson.check_overfit_one_batch_losses(overfit_too_slowly)
    failure(lesson.check_overfit_one_batch_losses, overfit_reporting_after,
            says=["the losses returned are not the real ones", "loss 0: the model's with the weights"])
    for check in (lesson.check_overfit_one_batch_fits, lesson.check_overfit_one_batch_losses):
        failure(check, lambda *args: None, says=["expected", "got"])


def test_lr_range_test_checks():
    for answer in (range_on_copies, _reference_answer("lr_range_test")):
        lesson.check_lr_range_test_steps(answer)
        lesson.check_lr_range_test_restores(answer)
    lesson.check_lr_range_test_steps(range_never_restored)
    failure(lesson.check_lr_range_test_restores, range_never_restored,
            says=["after lr_range_test(", "section 15"])
    # At the smallest rates a step barely moves the loss, so which step first shows it is drawn.
    failure(lesson.check_lr_range_test_steps, range_loss_after_the_step,
            says=["the loss of batches[", "with the weights before step"])
    failure(lesson.check_lr_range_test_steps, range_to_the_end, says=["losses recorded by lr_range_test("])
    for check in (lesson.check_lr_range_test_steps, lesson.check_lr_range_test_restores):
        failure(check, lambda *args: None, says=["expected", "got"])


def _reference_answer(function):
    call = next(call for call in calls.judged(LESSON) if call.function == function)
    return calls.reference_answer(read_solution(LESSON), call)


# ------------------------------------------------------- section 16: scripts with unnamed faults
# Each script written as a student might, with any of its three faults repaired (``fixed`` names them).
def fit_regressor_with(*fixed):
    def fit_regressor(model, batches, epochs, lr):
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        history = []
        for _ in range(epochs):
            total = 0.0
            for x, y in batches:
                if "cleared" in fixed:
                    optimizer.zero_grad()
                prediction = model(x)
                loss = nn.MSELoss()(prediction[:, 0] if "shapes" in fixed else prediction, y)
                loss.backward()
                optimizer.step()
                if "per epoch" not in fixed:
                    scheduler.step()
                total += loss.item()
            if "per epoch" in fixed:
                scheduler.step()
            history.append(total / len(batches))
        return history
    return fit_regressor


def train_and_evaluate_with(*fixed):
    def train_and_evaluate(model, train_batches, test_batches, epochs, lr):
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        model.train()
        for _ in range(epochs):
            if "modes" in fixed:
                model.train()
            for x, y in train_batches:
                optimizer.zero_grad()
                logits = model(x)
                loss = F.cross_entropy(logits if "logits" in fixed else logits.softmax(dim=1), y)
                loss.backward()
                optimizer.step()
            model.eval()
            with torch.no_grad():
                hits = [(model(x).argmax(dim=1) == y).float() for x, y in test_batches]
            accuracy = (torch.cat(hits).mean().item() if "examples" in fixed
                        else sum(hit.mean().item() for hit in hits) / len(hits))
        return accuracy
    return train_and_evaluate


def fit_regressor_other_way(model, batches, epochs, lr):
    """Another honest repair: the rate set by hand each epoch, the gradients set to None, targets reshaped."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = []
    for epoch in range(epochs):
        for group in optimizer.param_groups:
            group["lr"] = lr * 0.5 ** epoch
        losses = []
        for x, y in batches:
            for param in model.parameters():
                param.grad = None
            loss = F.mse_loss(model(x), y.reshape(-1, 1))
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        history.append(sum(losses) / len(losses))
    return history


def train_and_evaluate_other_way(model, train_batches, test_batches, epochs, lr):
    """Another honest repair: nn.CrossEntropyLoss, the evaluation on a copy, the accuracy counted."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for x, y in train_batches:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        judge = copy.deepcopy(model).eval()
        with torch.inference_mode():
            right = sum(int((judge(x).argmax(dim=1) == y).sum()) for x, y in test_batches)
        accuracy = right / sum(len(y) for _, y in test_batches)
    return accuracy


SCRIPT_CHECKS = {
    "fit_regressor": (fit_regressor_with, fit_regressor_other_way, {
        "cleared": lesson.check_fit_regressor_one_epoch, "shapes": lesson.check_fit_regressor_one_batch,
        "per epoch": lesson.check_fit_regressor_epochs}),
    "train_and_evaluate": (train_and_evaluate_with, train_and_evaluate_other_way, {
        "logits": lesson.check_train_and_evaluate_one_step, "modes": lesson.check_train_and_evaluate_epochs,
        "examples": lesson.check_train_and_evaluate_returned}),
}


def _earned(script, answer) -> set:
    """The repairs whose cells ``answer`` earns, visible and hidden checks alike."""
    earned = set()
    for fix, check in SCRIPT_CHECKS[script][2].items():
        try:
            check(answer)
            check(answer, seed=1611)
        except CheckFailed:
            continue
        earned.add(fix)
    return earned


@pytest.mark.parametrize("script", sorted(SCRIPT_CHECKS))
def test_each_repair_earns_its_own_cell_and_no_other(script):
    write, other_way, cells = SCRIPT_CHECKS[script]
    assert _earned(script, _reference_answer(f"{script}_fixed")) == set(cells)
    assert _earned(script, other_way) == set(cells)
    assert _earned(script, write()) == set()
    for fix in cells:
        assert _earned(script, write(fix)) == {fix}, fix
    for check in cells.values():
        failure(check, lambda *args: None, says=["expected", "got", "section 0"])


def test_the_scripts_checks_say_what_they_measured():
    failure(lesson.check_fit_regressor_one_epoch, fit_regressor_with("shapes", "per epoch"),
            says=["model.weight after fit_regressor_fixed(", "SGD worked out by hand gives",
                  "hint('fit_regressor_fixed')"])
    failure(lesson.check_train_and_evaluate_epochs, train_and_evaluate_with("logits", "examples"),
            says=["Dropout).training", "all with training=True", "hint('train_and_evaluate_fixed')"])
    failure(lesson.check_train_and_evaluate_returned, train_and_evaluate_with("logits", "modes"),
            says=["the trained model's accuracy over 1 + "])


FAULTS = {"fit_regressor": {"gradients_never_cleared", "scheduler_stepped_per_batch",
                            "target_shape_broadcast"},
          "train_and_evaluate": {"accuracy_averaged_over_batches", "eval_mode_never_undone",
                                 "softmax_before_cross_entropy"}}


def _naming_points(script, value) -> int:
    name = f"FAULTS_{script.upper()}"
    points = 0
    for fault in sorted(FAULTS[script]):
        try:
            lesson.check_fault_names(value, name)
            lesson.grade_fault_named(value, FAULTS[script], fault, name)
        except CheckFailed:
            continue
        points += 1
    return points


@pytest.mark.parametrize("script", sorted(FAULTS))
def test_naming_earns_a_point_per_fault_and_nothing_with_a_wrong_name(script):
    right = FAULTS[script]
    other = sorted(set(lesson.FAULT_KINDS) - right)
    assert _naming_points(script, set(right)) == 3
    assert _naming_points(script, sorted(right)) == 3
    assert _naming_points(script, right | {other[0]}) == 0
    assert _naming_points(script, set(sorted(right)[:2])) == 2
    assert _naming_points(script, set(lesson.FAULT_KINDS)) == 0
    assert _naming_points(script, set()) == 0
    assert FAULTS["fit_regressor"] & FAULTS["train_and_evaluate"] == set()
    name = f"FAULTS_{script.upper()}"
    message = failure(lesson.grade_fault_named, right | {other[0]}, right, sorted(right)[0], name,
                      says=["1 of the names are not faults of this script"])
    assert not any(key in message for key in lesson.FAULT_KINDS), message
    message = failure(lesson.grade_fault_named, set(sorted(right)[1:]), right, sorted(right)[0], name,
                      says=["a fault of the script is not named"])
    assert not any(key in message for key in lesson.FAULT_KINDS), message
    failure(lesson.check_fault_names, right | {"gradient_not_cleared"}, name,
            says=["not in the menu", "'gradient_not_cleared'", *map(repr, lesson.FAULT_KINDS)])
    failure(lesson.check_fault_names, "gradients_never_cleared", name,
            says=["the type is not the expected one"])


def test_the_menu_holds_both_scripts_faults_and_others_in_both_languages():
    assert set().union(*FAULTS.values()) < set(lesson.FAULT_KINDS)
    assert len(lesson.FAULT_KINDS) >= 12
    assert all(text["es"].strip() and text["en"].strip() for text in lesson.FAULT_KINDS.values())


# ------------------------------------------------------------------------- the judge's outcomes
# What the judge compares (graders/judge/calls.py): the reference's answers in a namespace, some of
# them replaced, probed as a grading kernel is, the results decoded from the wire and scored.
LESSON = "05_debugging_lab"
JUDGED_CELLS = {call.grade_cell for call in calls.judged(LESSON)}


def _lost(**answers) -> set:
    """The judged cells a kernel holding the reference's answers, ``answers`` in place of some, loses."""
    wanted = dict.fromkeys(cell for call in calls.judged(LESSON) for cell in calls.answer_cells(call))
    namespace = calls.reference_namespace(read_solution(LESSON), tuple(wanted))
    namespace.update(answers)
    exec(wire.probe([], calls.probe_calls(LESSON, "term")), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged(LESSON)}
    scores = calls.cell_scores(LESSON, "term", solution_path(LESSON), returned, points)
    return {cell for cell, score in scores.items() if score == 0}


def test_every_grade_cell_but_the_concept_questions_is_judged_from_an_outcome():
    total, decided, left = calls.coverage(LESSON)
    assert decided == total and left == []
    assert all(call.outcome.__module__ == lesson.__name__ for call in calls.judged(LESSON))


RIGHT_ANSWERS = {
    "as in the notebook": {},
    "written other ways": {
        "step_with_probe": probe_by_autograd_grad,
        "logits_on_model_device": lambda model, x: model(x.to(next(model.parameters()).device)),
        "regression_loss": RIGHT_REGRESSION_LOSSES["by hand"], "train_epoch_with_outputs": good_epoch,
        "ResidualBlockFixed": GoodBlock,
        "first_bad_step": good_first_bad_step, "BinaryClassifier": GoodBinaryClassifier,
        "overfit_one_batch": overfit_with_momentum, "lr_range_test": range_on_copies,
        "layer_statistics": statistics_by_hand,
        "diagnose_run": other_diagnosis, "fit_regressor_fixed": fit_regressor_other_way,
        "train_and_evaluate_fixed": train_and_evaluate_other_way,
        "FAULTS_FIT_REGRESSOR": sorted(FAULTS["fit_regressor"]),
        "FAULTS_TRAIN_AND_EVALUATE": tuple(FAULTS["train_and_evaluate"])},
    "others still": {
        "regression_loss": RIGHT_REGRESSION_LOSSES["squeeze only a second dimension"],
        "train_epoch_with_outputs": epoch_into_a_buffer},
}


@pytest.mark.parametrize("way", sorted(RIGHT_ANSWERS))
def test_right_answers_earn_every_judged_cell(way):
    assert _lost(**RIGHT_ANSWERS[way]) == set()


# ------------------------------------------------------------------ wrong behaviours, as plain data
def off_by_one(train_step, model, batch, optimizer, max_steps):
    for step in range(max_steps):
        if not math.isfinite(float(train_step(model, batch, optimizer))):
            return step
    return None


def keeps_training(train_step, model, batch, optimizer, max_steps):
    found = None
    for step in range(1, max_steps + 1):
        if not math.isfinite(float(train_step(model, batch, optimizer))) and found is None:
            found = step
    return found


SCRIPT_CELLS_BY_FAULT = {
    "fit_regressor": ["test_fit_regressor_one_epoch", "test_fit_regressor_one_batch",
                      "test_fit_regressor_epochs"],
    "train_and_evaluate": ["test_train_and_evaluate_one_step", "test_train_and_evaluate_epochs",
                           "test_train_and_evaluate_returned"]}
SCRIPT_CELLS = {script: set(cells) for script, cells in SCRIPT_CELLS_BY_FAULT.items()}
NAMING_CELLS = {script: {f"test_{script}_named_{index}" for index in (1, 2, 3)} for script in FAULTS}


# Each wrong behaviour, the answers it replaces, and the judged cells it loses (and no others).
WRONG_BEHAVIOURS = {
    "the probe's gradient left in .grad": ({"step_with_probe": probe_gradient_in_the_update},
                                           {"test_probe_step_update"}),
    "the probe measured after the update": ({"step_with_probe": probe_after_the_step},
                                            {"test_probe_step_returns"}),
    "the numbers returned as tensors": ({"step_with_probe": lambda *args: tuple(
        torch.tensor(value) for value in good_probe_step(*args))}, {"test_probe_step_returns"}),
    "the batch left where it was": ({"logits_on_model_device": lambda model, x: model(x)},
                                    {"test_logits_on_model_device"}),
    "(N, 1) against (N,)": ({"regression_loss": F.mse_loss}, {"test_regression_loss"}),
    "outputs kept with their graph": ({"train_epoch_with_outputs": outputs_kept_with_their_graph},
                                      {"test_epoch_outputs_kept"}),
    "outputs not detached": ({"train_epoch_with_outputs": outputs_not_detached}, {"test_epoch_outputs_kept"}),
    "the loss tensors kept until the end": ({"train_epoch_with_outputs": losses_kept_as_tensors},
                                            {"test_epoch_outputs_kept"}),
    "the last graph kept": ({"train_epoch_with_outputs": keeps_its_last_loss}, {"test_epoch_outputs_kept"}),
    # a forward pass too many per batch, whose outputs are taken after the update
    "outputs from a second forward": ({"train_epoch_with_outputs": outputs_from_a_second_forward},
                                      {"test_epoch_outputs_steps", "test_epoch_outputs_kept"}),
    "the mean loss instead of the list": ({"train_epoch_with_outputs": the_mean_loss},
                                          {"test_epoch_outputs_steps"}),
    "only the losses returned": ({"train_epoch_with_outputs": only_the_losses},
                                 {"test_epoch_outputs_steps", "test_epoch_outputs_kept"}),
    "an in-place residual": ({"ResidualBlockFixed": InPlaceBlock}, {"test_residual_block_fixed"}),
    "steps counted from 0": ({"first_bad_step": off_by_one}, {"test_first_bad_step"}),
    "training on after the bad step": ({"first_bad_step": keeps_training}, {"test_first_bad_step"}),
    "a sigmoid in the binary model": ({"BinaryClassifier": SigmoidBinaryClassifier},
                                      {"test_binary_classifier_logits", "test_binary_classifier_proba"}),
    "every size-1 dimension squeezed": ({"BinaryClassifier": SqueezedEverything},
                                        {"test_binary_classifier_logits", "test_binary_classifier_proba"}),
    "logits given as probabilities": ({"BinaryClassifier": ProbabilitiesAsLogits},
                                      {"test_binary_classifier_proba"}),
    "a rate too small to memorise": ({"overfit_one_batch": overfit_too_slowly},
                                     {"test_overfit_one_batch_fits"}),
    "losses measured after their steps": ({"overfit_one_batch": overfit_reporting_after},
                                          {"test_overfit_one_batch_losses"}),
    "a range test that never restores": ({"lr_range_test": range_never_restored},
                                         {"test_lr_range_test_restores"}),
    "a range test's loss after its step": ({"lr_range_test": range_loss_after_the_step},
                                           {"test_lr_range_test_steps", "test_lr_range_test_restores"}),
    "dead units counted per example": ({"layer_statistics": dead_per_example},
                                       {"test_layer_statistics_forward"}),
    "the gradient's norm measured at the weights": ({"layer_statistics": grad_norm_of_the_weights},
                                                    {"test_layer_statistics_backward"}),
    "the update ratio of the gradient": ({"layer_statistics": ratio_of_the_gradient},
                                         {"test_layer_statistics_update"}),
    "old gradients left in .grad": ({"layer_statistics": without_clearing}, {"test_layer_statistics_update"}),
    "a hook left behind": ({"layer_statistics": leaves_a_hook}, {"test_layer_statistics_update"}),
    "a diagnosis from the loss alone": ({"diagnose_run": loss_only}, {"test_diagnose_lr_too_high"}),
    **{f"always {label!r}": ({"diagnose_run": lambda run, label=label: label}, DIAGNOSIS_CELLS)
       for label in lesson.KINDS},
}


@pytest.mark.parametrize("behaviour", sorted(WRONG_BEHAVIOURS))
def test_a_wrong_behaviour_loses_its_judged_cells_only(behaviour):
    answers, cells = WRONG_BEHAVIOURS[behaviour]
    assert _lost(**answers) == cells


def _scripts_and_names(fixed: int | None, names: dict) -> dict:
    """Both scripts, as given (``fixed`` None) or with their ``fixed``-th fault alone repaired, and
    ``names`` for their FAULTS_... values."""
    return {**{f"{script}_fixed": write(*([] if fixed is None else [list(cells)[fixed]]))
               for script, (write, _, cells) in SCRIPT_CHECKS.items()},
            **{f"FAULTS_{script.upper()}": value for script, value in names.items()}}


# Section 16's wrong behaviours, both scripts at once (each _lost runs every judged call): the scripts
# as given, or with one fault alone repaired, and the faults named with a wrong name, every key, all
# but the first, a name off the menu.
SCRIPT_BEHAVIOURS = {
    "as given, a wrong name": (None, {script: FAULTS[script] | {"labels_as_floats"} for script in FAULTS},
                               set().union(*SCRIPT_CELLS.values(), *NAMING_CELLS.values())),
    "the first fault repaired, all names but the first": (
        0, {script: set(sorted(FAULTS[script])[1:]) for script in FAULTS},
        {"test_fit_regressor_one_batch", "test_fit_regressor_epochs", "test_train_and_evaluate_epochs",
         "test_train_and_evaluate_returned", "test_fit_regressor_named_1",
         "test_train_and_evaluate_named_1"}),
    "the second fault repaired, every key": (
        1, {script: set(lesson.FAULT_KINDS) for script in FAULTS},
        {"test_fit_regressor_one_epoch", "test_fit_regressor_epochs", "test_train_and_evaluate_one_step",
         "test_train_and_evaluate_returned", *NAMING_CELLS["fit_regressor"],
         *NAMING_CELLS["train_and_evaluate"]}),
    "the third fault repaired, a name off the menu": (
        2, {"fit_regressor": ["gradients_never_cleared", 3]},
        {"test_fit_regressor_one_epoch", "test_fit_regressor_one_batch", "test_train_and_evaluate_one_step",
         "test_train_and_evaluate_epochs", *NAMING_CELLS["fit_regressor"]}),
}


@pytest.mark.parametrize("behaviour", sorted(SCRIPT_BEHAVIOURS))
def test_a_script_repaired_in_part_or_misnamed_loses_its_judged_cells_only(behaviour):
    fixed, names, cells = SCRIPT_BEHAVIOURS[behaviour]
    assert _lost(**_scripts_and_names(fixed, names)) == cells


def test_the_outcomes_leave_the_global_random_state_alone():
    torch.manual_seed(2024)
    before = torch.get_rng_state()
    for call in calls.judged(LESSON):
        reference = calls.reference_answer(read_solution(LESSON), call)
        for args in calls.requests(LESSON, "term")[call.grade_cell]:
            calls.outcome_of(call, reference, args)
    assert torch.equal(torch.get_rng_state(), before)
