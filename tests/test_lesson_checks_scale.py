"""Lesson 07's checks: right answers pass, typical wrong ones fail with expected / got / hint, and
the harnesses (switched-off tools, spies, random state, the package's launch) do what they say."""

import inspect
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest
import torch
from check_messages import failure
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data.distributed import DistributedSampler

import course
from course import distributed
from course.memory import model_saved_bytes, saved_bytes
from graders import checks
from graders.checks import CheckFailed
from graders.lesson_checks import scale as lesson

pytestmark = pytest.mark.usefixtures("english")


# ------------------------------------------------------------------------------ answers, right and wrong
def activation_bytes(model, x):
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    sizes = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in own:
            sizes[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = model(x)
    del output
    return sum(sizes.values())


def activation_bytes_with_buffers(model, x):
    own = {p.untyped_storage().data_ptr() for p in model.parameters()}
    sizes = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in own:
            sizes[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = model(x)
    del output
    return sum(sizes.values())


def activation_bytes_every_save(model, x):
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    sizes = []

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in own:
            sizes.append(tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = model(x)
    del output
    return sum(sizes)


def segments_for_budget(model, x, budget_bytes):
    state = [*model.parameters(), *model.buffers()]
    for k in range(1, len(model) + 1):
        used = saved_bytes(checkpoint_sequential, model, k, x, use_reentrant=False, exclude=state)
        if used <= budget_bytes:
            return k
    return None


def segments_the_most(model, x, budget_bytes):
    return len(model)


def freeze_backbone(model):
    for layer in model[:-1]:
        layer.requires_grad_(False)
    model[-1].requires_grad_(True)
    return sum(p.numel() for p in model[-1].parameters())


def freeze_backbone_only(model):
    for layer in model[:-1]:
        layer.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def freeze_counting_tensors(model):
    freeze_backbone(model)
    return len(list(model[-1].parameters()))


def trainable_optimizer(model, lr):
    return torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=lr)


def optimizer_of_everything(model, lr):
    return torch.optim.AdamW(model.parameters(), lr=lr)


def shard_indices(n, num_replicas, rank, shuffle=False, seed=0, epoch=0):
    generator = torch.Generator().manual_seed(seed + epoch)
    order = torch.randperm(n, generator=generator).tolist() if shuffle else list(range(n))
    per_process = -(-n // num_replicas)
    padded = [order[i % n] for i in range(per_process * num_replicas)]
    return padded[rank::num_replicas]


def shard_without_padding(n, num_replicas, rank, shuffle=False, seed=0, epoch=0):
    return list(range(n))[rank::num_replicas]


def shard_seeded_without_epoch(n, num_replicas, rank, shuffle=False, seed=0, epoch=0):
    return shard_indices(n, num_replicas, rank, shuffle=shuffle, seed=seed, epoch=0)


def shard_by_sampler(n, num_replicas, rank, shuffle=False, seed=0, epoch=0):
    sampler = DistributedSampler(range(n), num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def average_gradients(per_rank):
    return {name: sum(grads[name] for grads in per_rank) / len(per_rank) for name in per_rank[0]}


def average_in_place(per_rank):
    total = per_rank[0]
    for grads in per_rank[1:]:
        for name in total:
            total[name] += grads[name]
    for name in total:
        total[name] /= len(per_rank)
    return total


def sum_of_gradients(per_rank):
    return {name: sum(grads[name] for grads in per_rank) for name in per_rank[0]}



def examples_curve(model, optimizer, x, y, batch_size, warmup_steps):
    """Another right way: the warm-up through a scheduler, the examples counted from the slice."""
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup_steps))
    curve = []
    for start in range(0, len(x), batch_size):
        batch_x, batch_y = x[start:start + batch_size], y[start:start + batch_size]
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch_x), batch_y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        curve.append((start + len(batch_x), float(loss.detach())))
    return curve


def curve_warmup_from_zero(model, optimizer, x, y, batch_size, warmup_steps):
    """Counts the warm-up from step / warmup_steps: the first step at rate 0."""
    peak = optimizer.param_groups[0]["lr"]
    curve = []
    for step, start in enumerate(range(0, len(x), batch_size)):
        optimizer.param_groups[0]["lr"] = peak * min(1.0, step / warmup_steps)
        optimizer.zero_grad()
        batch = slice(start, start + batch_size)
        loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        curve.append((min(start + batch_size, len(x)), loss.item()))
    return curve


def curve_without_zero_grad(model, optimizer, x, y, batch_size, warmup_steps):
    curve = []
    for start in range(0, len(x), batch_size):
        batch = slice(start, start + batch_size)
        loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        curve.append((min(start + batch_size, len(x)), loss.item()))
    return curve


def curve_counting_batch_size(model, optimizer, x, y, batch_size, warmup_steps):
    curve = examples_curve(model, optimizer, x, y, batch_size, warmup_steps)
    return [((i + 1) * batch_size, loss) for i, (_, loss) in enumerate(curve)]


def curve_of_tensors(model, optimizer, x, y, batch_size, warmup_steps):
    curve = examples_curve(model, optimizer, x, y, batch_size, warmup_steps)
    return [(seen, torch.tensor(loss)) for seen, loss in curve]


def profile_step(model, x, y, optimizer):
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        optimizer.zero_grad()
        with record_function("forward"):
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer step"):
            optimizer.step()
    return prof


def profile_without_regions(model, x, y, optimizer):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return prof


def profile_loss_outside_forward(model, x, y, optimizer):
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        optimizer.zero_grad()
        with record_function("forward"):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer step"):
            optimizer.step()
    return prof


def profile_without_memory(model, x, y, optimizer):
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        optimizer.zero_grad()
        with record_function("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer step"):
            optimizer.step()
    return prof


def top_by_memory(prof, k):
    rows = [(row.key, row.self_cpu_memory_usage) for row in prof.key_averages()]
    return sorted(rows, key=lambda pair: -pair[1])[:k]


def top_by_memory_with_children(prof, k):
    rows = sorted(prof.key_averages(), key=lambda row: row.cpu_memory_usage, reverse=True)
    return [(row.key, row.cpu_memory_usage) for row in rows[:k]]


def top_by_memory_smallest_first(prof, k):
    return top_by_memory(prof, k)[::-1]

# ------------------------------------------------------------------ how test_harness calls each check
_ANSWER_FOLDERS = tempfile.TemporaryDirectory(prefix="scale-answers-")
SMALL_RUN = {"world_size": 2, "examples": 64, "epochs": 2, "batch_size": 8, "seed": 11}


def _package(answer) -> Path:
    """The package an answer makes for the package checks: its training.py holds the answer's code,
    a function that is not ``train``, so the checks stop before launching torchrun."""
    folder = Path(tempfile.mkdtemp(dir=_ANSWER_FOLDERS.name))
    try:
        code = textwrap.dedent(inspect.getsource(answer))
    except (OSError, TypeError):
        code = f"# {answer!r}\n"
    (folder / "minitrain").mkdir()
    (folder / lesson.TRAINING_FILE).write_text(code)
    return folder


def _run_of(answer) -> lesson.PackageRun:
    return lesson.package_run(_package(answer), **SMALL_RUN)


def _seeded(build, *args, **kwargs):
    """A model built with its own seed: preparing a call leaves the global random state alone."""
    with checks.seeded(0):
        return build(*args, **kwargs)


def _weights():
    from torchvision.models import ResNet18_Weights

    return ResNet18_Weights.DEFAULT


ONE_RANK = ([{"w": torch.ones(2)}], {"w": torch.ones(2)}, "one rank")
IMAGES = torch.zeros(2, 3, 64, 64, dtype=torch.uint8)

def _curve_case(warmup: bool) -> lesson.CurveCase:
    return lesson.curve_case(torch.Generator().manual_seed(3), warmup=warmup)


def _step_profile():
    model, x, y, _ = lesson._mlp_case(torch.Generator().manual_seed(4))
    return lesson.profile_of_a_step(model, x, y)


CHECK_CALLS = {
    "check_activation_bytes": lesson.check_activation_bytes,
    "check_activation_bytes_leaves_buffers_out": lesson.check_activation_bytes_leaves_buffers_out,
    "check_activation_bytes_on": lambda answer: lesson.check_activation_bytes_on(
        answer, _seeded(lesson.blocks, 2, 8), torch.ones(3, 8), 0, "2 blocks"),
    "check_average_gradients": lesson.check_average_gradients,
    "check_average_gradients_leaves_inputs": lesson.check_average_gradients_leaves_inputs,
    "check_average_on": lambda answer: lesson.check_average_on(answer, *ONE_RANK),
    "check_concepts": lambda answer: lesson.check_concepts(answer, ""),
    "check_curve_on": lambda answer: lesson.check_curve_on(answer, _curve_case(warmup=False)),
    "check_examples_curve": lesson.check_examples_curve,
    "check_examples_curve_warmup": lesson.check_examples_curve_warmup,
    "check_freeze_backbone": lesson.check_freeze_backbone,
    "check_freeze_backbone_unfreezes_the_head": lesson.check_freeze_backbone_unfreezes_the_head,
    "check_head_trains_again": lambda answer: lesson.check_head_trains_again(
        answer, _seeded(course.training.make_mlp, hidden=4), torch.zeros(2, 1, 28, 28), "make_mlp(hidden=4)"),
    "check_inputs_left_alone": lambda answer: lesson.check_inputs_left_alone(answer, *ONE_RANK),
    "check_learns_on": lambda answer: lesson.check_learns_on(_run_of(answer)),
    "check_names_on": lambda answer: lesson.check_names_on(
        answer, _weights(), IMAGES, torch.zeros(2, 1000), 1, [["tench"], ["tench"]], "ResNet18"),
    "check_only_the_head_trains": lambda answer: lesson.check_only_the_head_trains(
        answer, _seeded(course.training.make_mlp, hidden=4), torch.zeros(2, 1, 28, 28), "make_mlp(hidden=4)"),
    "check_optimizer_on": lambda answer: lesson.check_optimizer_on(
        answer, _seeded(course.training.make_mlp, hidden=4), torch.zeros(2, 1, 28, 28), 0.1, "make_mlp"),
    "check_package_learns": lambda answer: lesson.check_package_learns(_package(answer)),
    "check_package_ranks_agree": lambda answer: lesson.check_package_ranks_agree(_package(answer)),
    "check_package_shards": lambda answer: lesson.check_package_shards(_package(answer)),
    "check_profile_on": lambda answer: lesson.check_profile_on(
        answer, *lesson._mlp_case(torch.Generator().manual_seed(5))),
    "check_profile_step": lesson.check_profile_step,
    "check_prepared_on": lambda answer: lesson.check_prepared_on(
        answer, _weights(), IMAGES, torch.zeros(2, 3, 224, 224), "ResNet18"),
    "check_ranks_agree_on": lambda answer: lesson.check_ranks_agree_on(_run_of(answer)),
    "check_segments_for_budget": lesson.check_segments_for_budget,
    "check_shard_indices_in_order": lesson.check_shard_indices_in_order,
    "check_shard_indices_shuffled": lesson.check_shard_indices_shuffled,
    "check_shards_on": lambda answer: lesson.check_shards_on(answer, 10, 3, lesson.BY_HAND[10, 3]),
    "check_shards_on_run": lambda answer: lesson.check_shards_on_run(_run_of(answer)),
    "check_top_k_names_input": lesson.check_top_k_names_input,
    "check_top_by_memory": lesson.check_top_by_memory,
    "check_top_k_names_output": lesson.check_top_k_names_output,
    "check_top_on": lambda answer: lesson.check_top_on(answer, _step_profile(), 3, "a step"),
    "check_trainable_optimizer": lesson.check_trainable_optimizer,
    "check_warmup_on": lambda answer: lesson.check_warmup_on(answer, _curve_case(warmup=True)),
}


def test_the_package_checks_stop_before_launching_for_an_answer_that_is_no_package(monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("torchrun was launched")

    monkeypatch.setattr(distributed, "torchrun", no_launch)
    monkeypatch.setattr(lesson, "_SESSION", {})
    for check in ("check_package_learns", "check_ranks_agree_on", "check_shards_on_run"):
        failure(CHECK_CALLS[check], average_gradients,
                says=("did not finish properly", "does not define train"))


# ---------------------------------------------------------------------------------- visible checks
def test_activation_bytes_checks():
    lesson.check_activation_bytes(activation_bytes)
    lesson.check_activation_bytes_leaves_buffers_out(activation_bytes)
    failure(lesson.check_activation_bytes, activation_bytes_every_save,
            says=("activation_bytes(Linear(", "is not right"))
    failure(lesson.check_activation_bytes_leaves_buffers_out, activation_bytes_with_buffers,
            says=("→ BatchNorm1d, model.train()", "is not right", "buffers"))


def test_activation_bytes_refuses_the_course_meter():
    def through_the_meter(model, x):
        return model_saved_bytes(model, x)

    failure(lesson.check_activation_bytes, through_the_meter,
            says=("raised an exception", "ShortcutUsed", "meter is switched off", "saved_tensors_hooks"))


def test_segments_for_budget_checks():
    lesson.check_segments_for_budget(segments_for_budget)
    failure(lesson.check_segments_for_budget, segments_the_most, says="fits already")


def test_freeze_backbone_checks():
    lesson.check_freeze_backbone(freeze_backbone)
    lesson.check_freeze_backbone_unfreezes_the_head(freeze_backbone)
    lesson.check_freeze_backbone(freeze_backbone_only)      # the first part passes without the second
    failure(lesson.check_freeze_backbone_unfreezes_the_head, freeze_backbone_only,
            says=("wrong requires_grad", "head frozen before"))
    failure(lesson.check_freeze_backbone, freeze_counting_tensors,
            says=("freeze_backbone(make_cnn(channels=", "is not right"))


def test_trainable_optimizer_checks():
    lesson.check_trainable_optimizer(trainable_optimizer)
    failure(lesson.check_trainable_optimizer, optimizer_of_everything,
            says=("no frozen one", "of them frozen"))


def test_shard_indices_checks():
    lesson.check_shard_indices_in_order(shard_indices)
    lesson.check_shard_indices_shuffled(shard_indices)
    failure(lesson.check_shard_indices_in_order, shard_without_padding,
            says=("shard_indices(10, 3, rank)", "is not right"))
    failure(lesson.check_shard_indices_shuffled, shard_seeded_without_epoch, says=("epoch=1", "is not right"))


def test_shard_indices_refuses_the_sampler():
    failure(lesson.check_shard_indices_in_order, shard_by_sampler,
            says=("raised an exception", "ShortcutUsed", "DistributedSampler is switched off"))


def test_average_gradients_checks():
    lesson.check_average_gradients(average_gradients)
    lesson.check_average_gradients_leaves_inputs(average_gradients)
    lesson.check_average_gradients(average_in_place)         # the mean is right: that part passes
    failure(lesson.check_average_gradients_leaves_inputs, average_in_place, says="input gradients modified")
    failure(lesson.check_average_gradients, sum_of_gradients,
            says=("average_gradients([{'w'", "the values differ"))


def test_messages_follow_the_edition_language():
    course.set_language("es")
    message = failure(lesson.check_average_gradients_leaves_inputs, average_in_place,
                      says="gradientes de entrada")
    assert "esperado:" in message and "pista:" in message and "sección 5" in message
    assert "hint('" not in message      # this exercise has no second hint
    failure(lesson.check_shard_indices_in_order, shard_without_padding,
            says=("shard_indices(10, 3, rank)", "si sigues sin verlo: hint('shard_indices')"))


# -------------------------------------------------------------------------------------- harnesses
def test_the_course_meter_is_off_only_inside_the_block():
    x = torch.randn(3, requires_grad=True)
    with checks.shortcuts_off(lesson.SHORTCUTS["check_activation_bytes"], message=lesson.METER_OFF), \
            pytest.raises(checks.ShortcutUsed, match="switched off"):
        saved_bytes(torch.sin, x)
    assert saved_bytes(torch.sin, x) == 12


def test_distributed_sampler_is_off_only_inside_the_block():
    with checks.shortcuts_off(lesson.SHORTCUTS["check_shards_on"], message=lesson.SAMPLER_OFF), \
            pytest.raises(checks.ShortcutUsed, match="DistributedSampler is switched off"):
        DistributedSampler(range(4), num_replicas=2, rank=0)
    assert list(DistributedSampler(range(4), num_replicas=2, rank=1, shuffle=False)) == [1, 3]


def test_the_hidden_tests_shard_check_refuses_the_sampler_too():
    lesson.check_shards_on(shard_indices, 7, 4, lesson.BY_HAND[7, 4])
    failure(lesson.check_shards_on, shard_by_sampler, 7, 4, lesson.BY_HAND[7, 4],
            says=("DistributedSampler is switched off", "DistributedSampler.__init__ refused"))


def test_checks_leave_the_notebooks_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    lesson.check_freeze_backbone(freeze_backbone)
    lesson.check_activation_bytes(activation_bytes)
    lesson.check_top_k_names_input(top_k_names)
    lesson.check_top_k_names_output(top_k_names)
    torch.testing.assert_close(torch.rand(3), expected)


def test_fresh_inputs_every_run():
    seeds = {checks.fresh_generator().initial_seed() for _ in range(5)}
    assert len(seeds) > 1
    generator = checks.fresh_generator()
    assert all(2 <= lesson._draw(generator, 2, 4) <= 4 for _ in range(50))


def test_saved_with_segments_measures_checkpoint_sequential():
    model, x = lesson.blocks(6, 16), torch.randn(8, 16)
    assert lesson.saved_with_segments(model, x, 1) == model_saved_bytes(model, x)
    assert lesson.saved_with_segments(model, x, 3) < lesson.saved_with_segments(model, x, 1)


def test_per_rank_gradients_average_to_the_whole_batch():
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    shares, whole = lesson.per_rank_gradients(model, x, y, 3)
    assert len(shares) == 3 and not torch.equal(shares[0]["0.weight"], whole["0.weight"])
    torch.testing.assert_close(average_gradients(shares), whole)


def test_freeze_head_and_the_optimizer_spy():
    model = lesson._freeze_head(course.training.make_mlp(hidden=4))
    assert [p.requires_grad for p in model.parameters()] == [True, True, False, False]

    def optimizer_that_also_shrinks_everything(model, lr):
        class Shrinking(torch.optim.AdamW):
            def step(self, closure=None):
                super().step(closure)
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(0.5)
        return Shrinking([p for p in model.parameters() if p.requires_grad], lr=lr)

    moved = r"frozen parameters that moved after the optimizer's step\(\) \(spy"
    with pytest.raises(CheckFailed, match=moved):
        lesson.check_optimizer_on(optimizer_that_also_shrinks_everything, model, torch.randn(2, 1, 28, 28),
                                  0.1, "spy")


def test_hints_name_a_section_and_second_hints_exist():
    for key, texts in lesson.HINTS.items():
        assert texts["es"].strip() and texts["en"].strip(), key
        assert "sección" in texts["es"] and "section" in texts["en"], key
        assert texts.get("more") in (None, *lesson.MORE_HINTS)
    assert set(lesson.MORE_HINTS) == {"activation_bytes", "shard_indices", "examples_curve", "top_by_memory"}


# ------------------------------------------------------------------ exercise 5: torchvision's weights
def top_k_names(model, weights, images, k):
    preprocess = weights.transforms()
    model.eval()
    with torch.no_grad():
        scores = model(preprocess(images))
    names = weights.meta["categories"]
    return [[names[i] for i in row] for row in scores.argsort(dim=1, descending=True)[:, :k].tolist()]


def top_k_names_imagenet_constants(model, weights, images, k):
    from torchvision.transforms import functional

    batch = functional.resize(images, 256)
    batch = functional.center_crop(batch, 224).float() / 255
    batch = functional.normalize(batch, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    model.eval()
    with torch.no_grad():
        scores = model(batch)
    names = weights.meta["categories"]
    return [[names[i] for i in row] for row in scores.topk(k).indices.tolist()]


def top_k_names_resized_to_the_crop(model, weights, images, k):
    from torchvision.transforms import functional

    preprocess = weights.transforms()
    batch = functional.resize(images, [preprocess.crop_size[0]] * 2).float() / 255
    batch = functional.normalize(batch, preprocess.mean, preprocess.std)
    model.eval()
    with torch.no_grad():
        scores = model(batch)
    return [[weights.meta["categories"][i] for i in row] for row in scores.topk(k).indices.tolist()]


def top_k_names_in_training_mode(model, weights, images, k):
    scores = model(weights.transforms()(images))
    return [[weights.meta["categories"][i] for i in row] for row in scores.topk(k).indices.tolist()]


def top_k_names_least_likely_first(model, weights, images, k):
    names = top_k_names(model, weights, images, k)
    return [row[::-1] for row in names]


def test_top_k_names_checks():
    for _ in range(5):      # fresh sizes, weights and logits every time
        lesson.check_top_k_names_input(top_k_names)
        lesson.check_top_k_names_output(top_k_names)
    check = lesson.check_top_k_names_input
    failure(check, top_k_names_imagenet_constants,
            says="the batch the model received (top_k_names(model, Probe_Weights.PROBE (resize")
    failure(check, top_k_names_resized_to_the_crop, says="the batch the model received")
    failure(check, top_k_names_in_training_mode, says="model.training during the call")
    lesson.check_top_k_names_output(top_k_names_in_training_mode)      # the names are right all the same
    failure(lesson.check_top_k_names_output, top_k_names_least_likely_first,
            says=("top_k_names(model,", "is not right"))


def test_top_k_names_hidden_harness_compares_with_the_weights_own_preparation():
    from torchvision.models import EfficientNet_B3_Weights

    weights = EfficientNet_B3_Weights.DEFAULT
    images = torch.randint(0, 256, (2, 3, 95, 130), dtype=torch.uint8)
    lesson.check_prepared_on(top_k_names, weights, images, weights.transforms()(images), "B3")
    failure(lesson.check_prepared_on, top_k_names_imagenet_constants, weights, images,
            weights.transforms()(images), "B3", says="the batch the model received (top_k_names(model, B3")


def test_probe_weights_are_a_weights_enum_with_their_own_preparation():
    from torchvision.models import WeightsEnum

    generator = torch.Generator().manual_seed(3)
    weights = lesson.probe_weights(generator)
    assert isinstance(weights, WeightsEnum)
    preset = weights.transforms()
    assert preset.crop_size[0] < preset.resize_size[0] and preset.mean != [0.485, 0.456, 0.406]
    assert len(set(weights.meta["categories"])) == len(weights.meta["categories"]) >= 12
    images, inner = lesson._framed_images(generator, 2, 40, 60)
    assert images.dtype == torch.uint8 and not torch.equal(images[:, :, 0, 0], inner.to(torch.uint8))


def test_the_spy_notes_its_calls_and_answers_the_planted_logits():
    logits, chosen = lesson._planted_logits(torch.Generator().manual_seed(0), 3, 20, 4)
    assert [row.topk(4).indices.tolist() for row in logits] == chosen
    spy = lesson._SpyClassifier(logits)
    with torch.no_grad():
        torch.testing.assert_close(spy(torch.zeros(3, 3, 8, 8)), logits)
    assert spy.calls[0]["training"] is True and spy.calls[0]["grad"] is False


# -------------------------------------------------------------- exercise 8: the package under torchrun
TRAINING = '''
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def train(model, dataset, *, rank, world_size, epochs, batch_size, lr, seed):
    {wrap}
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    for epoch in range(epochs):
        {epoch}
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
'''
RIGHT = {"wrap": "net = DistributedDataParallel(model)", "epoch": "sampler.set_epoch(epoch)"}


def _package_with(tmp_path, name, **changes):
    """A package folder whose training.py is ``TRAINING`` with ``changes`` to the right answer."""
    folder = tmp_path / name
    (folder / "minitrain").mkdir(parents=True)
    (folder / lesson.TRAINING_FILE).write_text(TRAINING.format(**{**RIGHT, **changes}))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three packages, each launched once under torchrun: right, without DDP, without set_epoch."""
    tmp_path = tmp_path_factory.mktemp("packages")
    return {name: lesson.package_run(_package_with(tmp_path, name, **changes), **SMALL_RUN)
            for name, changes in [("right", {}), ("no_ddp", {"wrap": "net = model"}),
                                  ("same_order", {"epoch": "pass"})]}


@pytest.mark.torchrun
def test_the_package_checks_pass_a_right_training_loop(runs):
    run = runs["right"]
    assert run.failure == "" and [r["rank"] for r in run.reports] == [0, 1]
    assert run.reports[0]["start"] != run.reports[1]["start"]       # DDP had something to make equal
    lesson.check_ranks_agree_on(run)
    lesson.check_shards_on_run(run)
    lesson.check_learns_on(run)


@pytest.mark.torchrun
def test_the_package_checks_catch_a_loop_without_ddp(runs):
    failure(lesson.check_ranks_agree_on, runs["no_ddp"], says="fingerprints of the weights at the end")
    lesson.check_shards_on_run(runs["no_ddp"])          # each behaviour is its own point


@pytest.mark.torchrun
def test_the_package_checks_catch_an_order_that_never_changes(runs):
    failure(lesson.check_shards_on_run, runs["same_order"], says="another order in epoch 1")
    lesson.check_ranks_agree_on(runs["same_order"])


@pytest.mark.torchrun
def test_a_run_is_launched_once_per_text_and_configuration(runs, tmp_path):
    again = lesson.package_run(_package_with(tmp_path, "again"), **SMALL_RUN)
    assert again is runs["right"]


def test_a_failing_or_missing_package_says_why(tmp_path, monkeypatch):
    failed = lesson.PackageRun(2, 10, 2, 4, 0,
                               failure="exit code 1, 0 JSON lines of 2\n    NotImplementedError")
    message = failure(lesson.check_learns_on, failed, says=("did not finish properly", "NotImplementedError"))
    assert "torchrun --standalone --nproc_per_node=2 train.py" in message
    missing = lesson.package_run(tmp_path, world_size=1, examples=10, epochs=2, batch_size=4, seed=0)
    assert "does not exist" in missing.failure
    monkeypatch.setattr(lesson, "_SESSION", {})
    failure(lesson.check_package_shards, tmp_path, says="does not exist")


def test_a_file_that_cannot_work_fails_without_a_launch(tmp_path, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("torchrun was launched")

    monkeypatch.setattr(distributed, "torchrun", no_launch)
    broken = _package_with(tmp_path, "broken", wrap="net = DistributedDataParallel(model")
    failure(lesson.check_learns_on, lesson.package_run(broken, **SMALL_RUN),
            says=("did not finish properly", "SyntaxError", "training.py, line"))
    renamed = _package_with(tmp_path, "renamed")
    (renamed / lesson.TRAINING_FILE).write_text(TRAINING.format(**RIGHT).replace("def train(", "def fit("))
    failure(lesson.check_ranks_agree_on, lesson.package_run(renamed, **SMALL_RUN),
            says=("does not define train", "from minitrain.training import train"))
    for may_work in ["from elsewhere import *", "def __getattr__(name):\n    return len", "train = len"]:
        assert lesson._cannot_be_imported(may_work, Path("training.py")) == ""


def _printed(*reports) -> str:
    return "".join(f'{{"rank": {rank}, "end": "e", "start": "s", "losses": [], "seen": []}}\n'
                   for rank in reports)


def test_a_launch_retried_after_a_signal_says_so_and_keeps_its_reports(tmp_path, monkeypatch):
    retried = "torchrun was launched once more: a process was killed by a signal (rank 1: SIGABRT)"
    monkeypatch.setattr(distributed, "torchrun", lambda *args, **kwargs: distributed.TorchrunLaunch(
        0, stdout=_printed(1, 0), retried=retried))
    run = lesson.package_run(_package_with(tmp_path, "retried"), **{**SMALL_RUN, "seed": 12})
    assert run.failure == "" and run.retried == retried and [r["rank"] for r in run.reports] == [0, 1]


def test_a_failed_launch_keeps_the_head_and_the_tail_of_the_error(tmp_path, monkeypatch):
    traceback = [f'[rank1]:   File "minitrain/training.py", line {i}, in train' for i in range(200)]
    stderr = "\n".join(["[rank1]: Traceback (most recent call last):", *traceback,
                        "[rank1]: NotImplementedError: the student's own error"])
    monkeypatch.setattr(distributed, "torchrun", lambda *args, **kwargs: distributed.TorchrunLaunch(
        1, stdout=_printed(0), stderr=SUMMARY_RANK_1_EXIT_1, ranks={0: "", 1: stderr}))
    run = lesson.package_run(_package_with(tmp_path, "failing"), **{**SMALL_RUN, "seed": 13})
    message = failure(lesson.check_learns_on, run,
                      says=("exit code 1, 1 JSON lines of 2", "stderr of rank 1 (exit code 1)",
                            "Traceback (most recent call last)", "lines left out",
                            "NotImplementedError: the student's own error"))
    assert "line 199" in message and "line 100," not in message and run.retried == ""


SUMMARY_RANK_1_EXIT_1 = """\
E1201 11:02:30.626000 8926 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) \
local_rank: 1 (pid: 9000) of binary: python
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_11:02:30
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 9000)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_the_package_files_are_real_python_files_the_checks_copy():
    names = sorted(path.relative_to(lesson.FILES).as_posix() for path in lesson.FILES.rglob("*.py"))
    assert names == ["minitrain/__init__.py", "minitrain/data.py", "minitrain/model.py", "train.py"]
    for path in lesson.FILES.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")


def test_the_notebook_writes_the_package_files_the_checks_use():
    from lesson_files import read_solution

    written = {}
    for cell in read_solution("07_scale").cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile {RUN_DIR}/"):
            written[first.removeprefix("%%writefile {RUN_DIR}/")] = body
    files = {path.relative_to(lesson.FILES).as_posix(): path.read_text()
             for path in lesson.FILES.rglob("*.py")}
    assert set(written) == {*files, lesson.TRAINING_FILE}
    for name, text in files.items():
        assert written[name] == text.rstrip("\n"), name


# ------------------------------------------------------------- exercise 9: the curve by examples seen
def test_examples_curve_checks():
    for _ in range(3):      # fresh sizes every time
        lesson.check_examples_curve(examples_curve)
        lesson.check_examples_curve_warmup(examples_curve)
    lesson.check_examples_curve(curve_warmup_from_zero)        # without warm-up, only the rates differ
    failure(lesson.check_examples_curve_warmup, curve_warmup_from_zero,
            says=("learning rate at each step, 0 to", "warmup_steps=", "hint('examples_curve')"))
    failure(lesson.check_examples_curve, curve_without_zero_grad, says="gradient of 0.weight used at step 1")
    failure(lesson.check_examples_curve, curve_counting_batch_size, says="examples seen at each point")
    failure(lesson.check_examples_curve, curve_of_tensors, says="losses as Python numbers")


def test_the_curve_harness_on_chosen_cases():
    case = lesson.CurveCase(torch.nn.Linear(3, 2), torch.randn(10, 3), torch.randint(0, 2, (10,)), 4, 3, 0.3)
    assert case.slices == [(0, 4), (4, 8), (8, 10)]
    assert lesson.warmup_rates(0.3, 3, 4) == pytest.approx([0.1, 0.2, 0.3, 0.3])
    lesson.check_curve_on(examples_curve, case)
    lesson.check_warmup_on(examples_curve, case)
    x, y = torch.randn(5, 3), torch.randint(0, 2, (5,))
    one_batch = lesson.CurveCase(torch.nn.Linear(3, 2), x, y, 64, 1, 0.1)
    lesson.check_curve_on(examples_curve, one_batch)
    failure(lesson.check_curve_on, curve_counting_batch_size, one_batch, says=("[5]", "[64]"))


# ------------------------------------------------------------- exercise 10: profiling a training step
def test_profile_step_checks():
    for _ in range(3):
        lesson.check_profile_step(profile_step)
    failure(lesson.check_profile_step, profile_without_regions, says="record_function regions in the profile")
    failure(lesson.check_profile_step, profile_loss_outside_forward, says="inside each region")
    failure(lesson.check_profile_step, profile_without_memory, says="memory of the forward region")
    failure(lesson.check_profile_step, lambda model, x, y, optimizer: model,
            says=("profile_step(Linear(", "profile"))


def test_the_profile_check_reads_a_cnn_too():
    model = _seeded(course.training.make_cnn, channels=(3, 4), num_classes=6)
    x, y = torch.randn(5, 1, 28, 28), torch.randint(0, 6, (5,))
    lesson.check_profile_on(profile_step, model, x, y, "make_cnn")


def test_top_by_memory_checks():
    for _ in range(3):
        lesson.check_top_by_memory(top_by_memory)
    failure(lesson.check_top_by_memory, top_by_memory_with_children,
            says=("self CPU memory as prof.key_averages() gives it", "hint('top_by_memory')"))
    failure(lesson.check_top_by_memory, top_by_memory_smallest_first, says="the bytes returned, in order")
    failure(lesson.check_top_by_memory, lambda prof, k: [("aten::addmm", 1)] * k, says="distinct operators")


# ------------------------------------------------------------------ decided by the judge: the outcomes
def _judged(answers: dict, cells: set, run_dir=None, secret: str = "term") -> dict:
    """The judge's score of each of ``cells`` for a kernel holding the reference's answers, some
    replaced by ``answers``, and ``RUN_DIR`` (the reference's package unless ``run_dir``): the probe
    run in that namespace, its reply decoded and scored as the grader does."""
    from graders.judge import calls, wire
    from graders.lessons import solution_path

    source = nbformat.read(solution_path("07_scale"), 4)
    judged = [call for call in calls.judged("07_scale") if call.grade_cell in cells]
    namespace = calls.reference_namespace(source, tuple(dict.fromkeys(
        cell for call in judged for cell in calls.answer_cells(call))))
    namespace.update(answers, RUN_DIR=run_dir or lesson._reference_package())
    asked = [probe for probe in calls.probe_calls("07_scale", secret) if probe["cell"] in cells]
    exec(wire.probe([], asked), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in calls.judged("07_scale")}
    scores = calls.cell_scores("07_scale", secret, solution_path("07_scale"), returned, points)
    return {cell: scores[cell] for cell in cells}


def _lost(answers: dict, cells: set, **options) -> set:
    return {cell for cell, score in _judged(answers, cells, **options).items() if score == 0}


ACTIVATION_CELLS = {"test_activation_bytes", "test_activation_bytes_buffers"}


def test_the_judge_sees_what_activation_bytes_counts():
    assert _lost({"activation_bytes": activation_bytes}, ACTIVATION_CELLS) == set()
    assert _lost({"activation_bytes": activation_bytes_with_buffers}, ACTIVATION_CELLS) == {
        "test_activation_bytes_buffers"}
    every_save = {"activation_bytes": activation_bytes_every_save}
    assert "test_activation_bytes" in _lost(every_save, ACTIVATION_CELLS)


def test_the_judge_sees_the_segments_picked_for_a_budget():
    cells = {"test_segments_for_budget"}
    assert _lost({"segments_for_budget": segments_for_budget}, cells) == set()
    assert _lost({"segments_for_budget": segments_the_most}, cells) == cells

    def one_fewer(model, x, budget_bytes):
        found = segments_for_budget(model, x, budget_bytes)
        return None if found is None else max(1, found - 1)

    assert _lost({"segments_for_budget": one_fewer}, cells) == cells


FREEZE_CELLS = {"test_freeze_backbone", "test_freeze_backbone_head"}


def test_the_judge_sees_what_freeze_backbone_leaves_trainable():
    assert _lost({"freeze_backbone": freeze_backbone}, FREEZE_CELLS) == set()
    assert _lost({"freeze_backbone": freeze_backbone_only}, FREEZE_CELLS) == {"test_freeze_backbone_head"}
    assert _lost({"freeze_backbone": freeze_counting_tensors}, FREEZE_CELLS) == FREEZE_CELLS


def test_the_judge_sees_what_the_optimizer_holds_and_moves():
    cells = {"test_trainable_optimizer"}
    assert _lost({"trainable_optimizer": trainable_optimizer}, cells) == set()
    assert _lost({"trainable_optimizer": optimizer_of_everything}, cells) == cells
    adam = lambda model, lr: torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)  # noqa: E731
    assert _lost({"trainable_optimizer": adam}, cells) == cells
    wrong_rate = lambda model, lr: trainable_optimizer(model, lr * 10)  # noqa: E731
    assert _lost({"trainable_optimizer": wrong_rate}, cells) == cells


TOP_K_CELLS = {"test_top_k_names_input", "test_top_k_names_output"}


def test_the_judge_sees_what_the_pretrained_model_receives_and_what_comes_back():
    assert _lost({"top_k_names": top_k_names}, TOP_K_CELLS) == set()
    assert _lost({"top_k_names": top_k_names_imagenet_constants}, TOP_K_CELLS) == {"test_top_k_names_input"}
    assert _lost({"top_k_names": top_k_names_resized_to_the_crop}, TOP_K_CELLS) == {"test_top_k_names_input"}
    assert _lost({"top_k_names": top_k_names_in_training_mode}, TOP_K_CELLS) == {"test_top_k_names_input"}
    assert _lost({"top_k_names": top_k_names_least_likely_first}, TOP_K_CELLS) == {"test_top_k_names_output"}

    def one_call_per_image(model, weights, images, k):
        return [row for image in images for row in top_k_names(model, weights, image[None], k)]

    assert "test_top_k_names_input" in _lost({"top_k_names": one_call_per_image}, TOP_K_CELLS)


def test_the_judge_sees_an_average_that_changes_its_inputs():
    cells = {"test_average_gradients", "test_average_gradients_inputs"}
    assert _lost({"average_gradients": average_gradients}, cells) == set()
    assert _lost({"average_gradients": average_in_place}, cells) == {"test_average_gradients_inputs"}
    assert _lost({"average_gradients": sum_of_gradients}, cells) == cells


CURVE_CELLS = {"test_examples_curve", "test_examples_curve_warmup"}


def test_the_judge_judges_the_curve_and_the_warm_up_apart():
    assert _lost({"examples_curve": examples_curve}, CURVE_CELLS) == set()      # a scheduler, another count
    assert _lost({"examples_curve": curve_warmup_from_zero}, CURVE_CELLS) == {"test_examples_curve_warmup"}
    assert "test_examples_curve" in _lost({"examples_curve": curve_without_zero_grad}, CURVE_CELLS)
    assert "test_examples_curve" in _lost({"examples_curve": curve_counting_batch_size}, CURVE_CELLS)


PROFILE_CELLS = {"test_profile_step", "test_top_by_memory"}


def test_the_judge_reads_the_profile_and_the_top_rows():
    assert _lost({"profile_step": profile_step, "top_by_memory": top_by_memory}, PROFILE_CELLS) == set()
    for wrong in (profile_without_regions, profile_loss_outside_forward, profile_without_memory):
        assert _lost({"profile_step": wrong}, PROFILE_CELLS) == {"test_profile_step"}, wrong.__name__
    for wrong in (top_by_memory_with_children, top_by_memory_smallest_first):
        assert _lost({"top_by_memory": wrong}, PROFILE_CELLS) == {"test_top_by_memory"}, wrong.__name__


def test_operators_that_tie_may_come_in_any_order():
    widths, batch, seed, k = (6, 10, 10, 3), 8, 0, 6
    table = lesson.top_by_memory_outcome(top_by_memory, widths, batch, seed, k)["table"]
    ranked = sorted(table.items(), key=lambda pair: -pair[1])
    assert len({value for _, value in ranked[:k]}) < k          # the case has ties among the top rows
    by_name = sorted(table.items(), key=lambda pair: (-pair[1], pair[0]))[:k]
    want, args = {"top": ranked[:k], "table": table}, (widths, batch, seed, k)
    assert by_name != ranked[:k] and lesson._top_accepted({"top": by_name}, want, args)
    assert lesson._top_accepted({"top": [(name, float(value)) for name, value in by_name]}, want, args)
    assert not lesson._top_accepted({"top": by_name[::-1]}, want, args)
    assert not lesson._top_accepted({"top": ranked[1:k + 1]}, want, args)
    made_up = [("aten::made_up", value) for _, value in ranked[:k]]
    assert not lesson._top_accepted({"top": made_up}, want, args)


DDP_CELLS = {"test_ddp_training_ranks_agree", "test_ddp_training_shards", "test_ddp_training_learns"}


def _lost_by_package(tmp_path, name: str, text: str) -> set:
    folder = tmp_path / name
    (folder / "minitrain").mkdir(parents=True)
    (folder / lesson.TRAINING_FILE).write_text(text)
    return _lost({}, DDP_CELLS, run_dir=folder)


def test_the_judge_runs_the_package_in_ranks_that_are_threads(tmp_path):
    """Each point of the DDP exercise is judged on its own, from the package in RUN_DIR, as the
    torchrun checks judge it: a loop without DDP loses only the ranks' agreement, one without
    set_epoch only the shards."""
    right = TRAINING.format(**RIGHT)
    assert _lost_by_package(tmp_path, "right", right) == set()
    assert _lost_by_package(tmp_path, "no_ddp", TRAINING.format(**{**RIGHT, "wrap": "net = model"})) == {
        "test_ddp_training_ranks_agree"}
    unused = "ddp = DistributedDataParallel(model); net = model"      # built, then bypassed
    assert _lost_by_package(tmp_path, "bypassed", TRAINING.format(**{**RIGHT, "wrap": unused})) == {
        "test_ddp_training_ranks_agree"}
    assert _lost_by_package(tmp_path, "same_order", TRAINING.format(**{**RIGHT, "epoch": "pass"})) == {
        "test_ddp_training_shards"}
    unseeded = right.replace("shuffle=True, seed=seed)", "shuffle=True)")
    assert _lost_by_package(tmp_path, "unseeded", unseeded) == {"test_ddp_training_shards"}
    accumulating = right.replace("optimizer.zero_grad()", "pass")
    assert _lost_by_package(tmp_path, "accumulating", accumulating) == {"test_ddp_training_learns"}
    per_epoch = right.replace("            losses.append(loss.item())", "        losses.append(loss.item())")
    assert _lost_by_package(tmp_path, "per_epoch", per_epoch) == {"test_ddp_training_learns"}


def test_a_package_that_fails_in_a_rank_loses_every_cell_and_leaves_no_group(tmp_path):
    from torch import distributed as dist

    failing = TRAINING.format(**RIGHT).replace("losses = []", "losses = []\n    assert rank == 0")
    assert _lost_by_package(tmp_path, "failing", failing) == DDP_CELLS
    assert not dist.is_initialized() and torch._C._is_multithreading_enabled()


def test_ranks_that_wait_for_each_other_forever_are_stopped(tmp_path, monkeypatch):
    from torch import distributed as dist

    monkeypatch.setattr(lesson, "DDP_SECONDS", 0.5)
    folder = tmp_path / "hanging"
    (folder / "minitrain").mkdir(parents=True)
    waits = "    if rank == 1:\n        torch.distributed.barrier()  # rank 0 never comes\n    return losses"
    (folder / lesson.TRAINING_FILE).write_text(TRAINING.format(**RIGHT).replace("    return losses", waits))
    with pytest.raises(TimeoutError):
        lesson.ddp_training_shards_outcome(folder, 2, 8, 1, 4, 0.1, 0)
    assert not dist.is_initialized() and torch._C._is_multithreading_enabled()
    assert lesson.ddp_training_shards_outcome(lesson._reference_package(), 2, 8, 1, 4, 0.1, 0)  # works again


def test_the_ddp_outcomes_leave_the_notebooks_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    lesson.ddp_training_learns_outcome(lesson._reference_package(), 2, 9, 2, 2, 0.1, 5)
    torch.testing.assert_close(torch.rand(3), expected)


def test_the_judges_reference_package_is_the_solutions_cell():
    from lesson_files import read_solution

    cell = next(c for c in read_solution("07_scale").cells if c.metadata.get("nbgrader", {}).get("grade_id")
                == "ddp_training")
    assert (lesson._reference_package() / lesson.TRAINING_FILE).read_text() == cell.source.partition("\n")[2]
    losses = lesson.ddp_training_learns_outcome(lesson._reference_package(), 2, 9, 2, 2, 0.1, 5)
    assert losses.shape == (6,)     # shares of 5, batches of 2: 3 steps, 2 epochs
