"""graders.lesson_checks.debugging_lab: each visible check passes a right answer and fails a typical
wrong one with expected / got / hint; the spies and recorders write down what they should.

The answers below are written here, as a student would; none of them lives in the module.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from check_messages import failure
from torch import nn

import course
from graders.checks import CheckFailed
from graders.lesson_checks import debugging_lab as lesson

pytestmark = pytest.mark.usefixtures("english")


# ------------------------------------------------------------------------------------- right answers
def good_step(model, batch, optimizer):
    x, y = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def good_clipped(model, batch, optimizer, max_norm=1.0):
    x, y = batch
    for param in model.parameters():      # another honest way to clear the gradients
        param.grad = None
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def good_epoch(model, batches, loss_fn, optimizer):
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def good_evaluate(model, x, y):
    mode = model.training
    model.eval()
    with torch.inference_mode():
        right = (model(x).argmax(dim=1) == y).sum().item()
    model.train(mode)
    return right / len(y)


def good_final(model, batch, optimizer):
    loss = good_step(model.train(), batch, optimizer)
    accuracy = good_evaluate(model, *batch)
    model.train()
    return loss, accuracy


class GoodClassifier(nn.Module):
    def __init__(self, n_in, n_hidden, n_classes):
        super().__init__()
        self.hidden = nn.Linear(n_in, n_hidden)
        self.out = nn.Linear(n_hidden, n_classes)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))

    def predict_proba(self, x):
        return F.softmax(self.forward(x), dim=-1)


class SoftmaxClassifier(GoodClassifier):
    def forward(self, x):
        return super().forward(x).softmax(dim=1)


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


# ---------------------------------------------------------------------------------------- harnesses
def test_the_trace_records_forward_backward_and_step_in_order():
    model, optimizer, trace = lesson.spied_setup(lesson.mlp(2, 4, 3), lr=0.1)
    x, y = lesson.classification_batch(6, 2, 3, lesson.seeded(0))
    with lesson.watching_gradients(model, trace):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            model.eval()(x)
    assert trace.events == ["forward", "backward", "step", "forward in eval+no graph"]
    assert set(trace.delivered) == {name for name, _ in model.named_parameters()}
    assert all(torch.equal(seen, trace.delivered[name])
               for (name, _), seen in zip(model.named_parameters(), trace.seen[0], strict=False))


def test_the_trace_tells_a_backward_onto_old_gradients():
    model, optimizer, trace = lesson.spied_setup(lesson.mlp(2, 4, 3), lr=0.1)   # .grad left full
    x, y = lesson.classification_batch(6, 2, 3, lesson.seeded(0))
    with lesson.watching_gradients(model, trace):
        F.cross_entropy(model(x), y).backward()
    assert trace.events == ["forward", "stale backward"]


def test_the_hooks_go_away_after_watching():
    model, optimizer, trace = lesson.spied_setup(lesson.mlp(2, 4, 3), lr=0.1, old_gradients=False)
    x, y = lesson.classification_batch(6, 2, 3, lesson.seeded(0))
    with lesson.watching_gradients(model, trace):
        pass
    F.cross_entropy(model(x), y).backward()
    assert trace.events == ["forward"]


def test_course_loops_are_unavailable_while_checking_and_back_afterwards():
    from course import training

    with lesson.without_course_loops():
        with pytest.raises(RuntimeError, match="write the loop yourself"):
            training.run_epoch(None, [], loss_fn=None, device="cpu")
    assert training.run_epoch.__module__ == "course.training"


def test_tagging_loss_sees_graphs_that_outlive_their_batch():
    loss_fn = lesson.TaggingLoss()
    model = lesson.mlp(2, 4, 3)
    kept = []
    for _ in range(3):
        kept.append(loss_fn(model(torch.randn(4, 2)), torch.randint(0, 3, (4,))))
    assert loss_fn.older_alive == [0, 0, 1]
    assert loss_fn.alive(loss_fn.tags) == 3
    kept.clear()
    assert loss_fn.alive(loss_fn.tags) == 0


def test_saved_bytes_during_counts_what_autograd_keeps():
    model = lesson.mlp(2, 8, 3)
    x = torch.randn(5, 2)
    assert lesson.saved_bytes_during(model, x)[1] > 0
    with torch.no_grad():
        assert lesson.saved_bytes_during(model, x)[1] == 0


def test_clipped_matches_clip_grad_norm():
    grads = [torch.full((2, 2), 3.0), torch.full((2,), 4.0)]
    params = [torch.zeros(2, 2, requires_grad=True), torch.zeros(2, requires_grad=True)]
    for param, grad in zip(params, grads, strict=False):
        param.grad = grad.clone()
    nn.utils.clip_grad_norm_(params, 1.0)
    expected, norm = lesson.clipped(grads, 1.0)
    assert norm == pytest.approx(math.sqrt(4 * 9 + 2 * 16))
    assert all(torch.allclose(param.grad, want) for param, want in zip(params, expected, strict=False))


# ---------------------------------------------------------------------------- each exercise's checks
def test_train_step_check():
    lesson.check_train_step(good_step)

    def no_clearing(model, batch, optimizer):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    failure(lesson.check_train_step, no_clearing, says="onto old gradients")
    failure(lesson.check_train_step, lambda *args: torch.tensor(good_step(*args)), says="type")


def test_clipped_checks():
    lesson.check_clipped_order(good_clipped)
    lesson.check_clipped_update(good_clipped)

    def step_too_early(model, batch, optimizer, max_norm=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        optimizer.step()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        return loss.item()

    def clips_nothing(model, batch, optimizer, max_norm=1.0):
        return good_step(model, batch, optimizer)

    failure(lesson.check_clipped_order, step_too_early, says="optimizer step() → backward pass")
    failure(lesson.check_clipped_update, clips_nothing, says="that step() used")


def test_like_reference_finds_a_different_update():
    def twice_the_rate(model, batch, optimizer):
        loss = good_step(model, batch, optimizer)
        optimizer.step()
        return loss

    batch = lesson.classification_batch(8, 3, 2, lesson.seeded(1))
    lesson.check_like_reference(good_step, good_step, lesson.mlp(3, 4, 2), batch, 0.1, label="MLP",
                                exercise="train_step_fixed")
    failure(lesson.check_like_reference, twice_the_rate, good_step, lesson.mlp(3, 4, 2), batch, 0.1,
                 label="MLP", exercise="train_step_fixed", says="after call 1")


def test_logits_on_model_device_check():
    lesson.check_logits_on_model_device(lambda model, x: model(x.to(next(model.parameters()).device)), "cpu")
    failure(lesson.check_logits_on_model_device, lambda model, x: model(x), "cpu", says="meta")


def test_predict_check():
    def good_predict(model, x):
        model.eval()
        with torch.no_grad():
            return model(x)

    def eval_only(model, x):
        model.eval()
        return model(x)

    lesson.check_predict(good_predict)
    failure(lesson.check_predict, eval_only, says="requires_grad")
    failure(lesson.check_predict, lambda model, x: model(x).detach(), says="values differ")


def test_save_and_reload_check(tmp_path):
    def good(model, make_model, path):
        torch.save(model.state_dict(), path)
        new = make_model()
        new.load_state_dict(torch.load(path, weights_only=True))
        return new

    def pickled(model, make_model, path):
        torch.save(model, path)
        return torch.load(path, weights_only=False)

    def never_reads(model, make_model, path):
        torch.save(model.state_dict(), path)
        new = make_model()
        new.load_state_dict(model.state_dict())
        return new

    lesson.check_save_and_reload(good)
    failure(lesson.check_save_and_reload, pickled, says="UnpicklingError")
    failure(lesson.check_save_and_reload, never_reads, says="calls to torch.load")


def test_classifier_checks():
    lesson.check_classifier_learns(GoodClassifier)
    lesson.check_predict_proba(GoodClassifier)
    failure(lesson.check_classifier_learns, SoftmaxClassifier, says="cannot go below")

    class Unnormalised(GoodClassifier):
        def predict_proba(self, x):
            return self(x).exp()

    failure(lesson.check_predict_proba, Unnormalised, says="sum(dim=1)")


def test_regression_loss_check():
    lesson.check_regression_loss_by_hand(lambda pred, target: F.mse_loss(pred.flatten(), target.flatten()))
    failure(lesson.check_regression_loss_by_hand, F.mse_loss, says="warnings")
    failure(lesson.check_regression_loss_by_hand,
                 lambda pred, target: (pred.flatten() - target.flatten()).abs().mean(), says="values differ")


def test_train_epoch_check():
    lesson.check_train_epoch(good_epoch)

    def sums_tensors(model, batches, loss_fn, optimizer):
        total = 0
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total = total + loss
        return (total / len(batches)).item()

    failure(lesson.check_train_epoch, sums_tensors, says="graphs of earlier batches")


def test_evaluate_checks():
    lesson.check_evaluate_accuracy(good_evaluate)
    lesson.check_evaluate_restores_mode(good_evaluate)

    def always_train_after(model, x, y):
        accuracy = good_evaluate(model, x, y)
        model.train()
        return accuracy

    def in_training_mode(model, x, y):
        with torch.no_grad():
            return (model(x).argmax(dim=1) == y).float().mean().item()

    failure(lesson.check_evaluate_restores_mode, always_train_after, says="[eval → evaluate_fixed]")
    failure(lesson.check_evaluate_accuracy, in_training_mode, says="evaluate_fixed")


def test_residual_check():
    lesson.check_residual_by_hand(GoodBlock)
    failure(lesson.check_residual_by_hand, InPlaceBlock, says="modified by an inplace operation")

    class IgnoresFc(GoodBlock):
        def forward(self, x):
            return x + torch.relu(x) + 0 * self.fc(x)

    failure(lesson.check_residual_by_hand, IgnoresFc, says="values differ")


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

    failure(lesson.check_first_bad_step_by_hand, off_by_one, says="expected: 4")
    failure(lesson.check_first_bad_step_by_hand, keeps_training, says="calls to train_step")


def test_final_step_checks():
    lesson.check_final_step(good_final)
    lesson.check_diagnose_finds_nothing(good_final)

    def two_bugs(model, batch, optimizer):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(x).argmax(dim=1) == y).float().mean()
        return loss.item(), accuracy.item()

    failure(lesson.check_final_step, two_bugs,
                 says="forward pass (evaluation mode) → backward pass onto")
    failure(lesson.check_diagnose_finds_nothing, two_bugs, says="grads_not_cleared")


def test_messages_speak_spanish_in_the_spanish_edition():
    course.set_language("es")
    with pytest.raises(CheckFailed) as caught:
        lesson.check_train_step(lambda *args: 0.0)
    message = str(caught.value)
    assert "\n  esperado: " in message and "\n  obtenido: " in message and "\n  pista: " in message
    assert "pasada hacia delante" in message and "sección 1" in message


def test_every_hint_speaks_both_languages_and_names_a_section():
    for exercise, texts in lesson.HINTS.items():
        assert texts["es"].strip() and texts["en"].strip(), exercise
        if exercise != "concept_check":
            assert "secci" in texts["es"] and "section" in texts["en"], exercise
    assert set(lesson.MORE_HINTS) == {texts["more"] for texts in lesson.HINTS.values() if "more" in texts}
