"""Lesson 07's checks: right answers pass, typical wrong ones fail with expected / got / hint, and
the harnesses (switched-off tools, spies, random state) do what they say."""

import pytest
import torch
from check_messages import failure
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data.distributed import DistributedSampler

import course
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


# ---------------------------------------------------------------------------------- visible checks
def test_activation_bytes_checks():
    lesson.check_activation_bytes(activation_bytes)
    lesson.check_activation_bytes_leaves_buffers_out(activation_bytes)
    failure(lesson.check_activation_bytes, activation_bytes_every_save, says="activation_bytes(Linear(")
    message = failure(lesson.check_activation_bytes_leaves_buffers_out, activation_bytes_with_buffers,
                      says="BatchNorm1d")
    assert "buffers" in message


def test_activation_bytes_refuses_the_course_meter():
    def through_the_meter(model, x):
        return model_saved_bytes(model, x)

    message = failure(lesson.check_activation_bytes, through_the_meter, says="raised an exception")
    assert "switched off" in message and "saved_tensors_hooks" in message


def test_segments_for_budget_checks():
    lesson.check_segments_for_budget(segments_for_budget)
    failure(lesson.check_segments_for_budget, segments_the_most, says="fits already")


def test_freeze_backbone_checks():
    lesson.check_freeze_backbone(freeze_backbone)
    lesson.check_freeze_backbone_unfreezes_the_head(freeze_backbone)
    lesson.check_freeze_backbone(freeze_backbone_only)      # the first part passes without the second
    failure(lesson.check_freeze_backbone_unfreezes_the_head, freeze_backbone_only,
            says=("wrong requires_grad", "head frozen before"))
    failure(lesson.check_freeze_backbone, freeze_counting_tensors, says="freeze_backbone(make_cnn(channels=")


def test_trainable_optimizer_checks():
    lesson.check_trainable_optimizer(trainable_optimizer)
    failure(lesson.check_trainable_optimizer, optimizer_of_everything,
            says=("no frozen one", "of them frozen"))


def test_shard_indices_checks():
    lesson.check_shard_indices_in_order(shard_indices)
    lesson.check_shard_indices_shuffled(shard_indices)
    failure(lesson.check_shard_indices_in_order, shard_without_padding, says="shard_indices(10, 3, rank)")
    failure(lesson.check_shard_indices_shuffled, shard_seeded_without_epoch, says="epoch=1")


def test_shard_indices_refuses_the_sampler():
    message = failure(lesson.check_shard_indices_in_order, shard_by_sampler, says="raised an exception")
    assert "DistributedSampler is switched off" in message


def test_average_gradients_checks():
    lesson.check_average_gradients(average_gradients)
    lesson.check_average_gradients_leaves_inputs(average_gradients)
    lesson.check_average_gradients(average_in_place)         # the mean is right: that part passes
    failure(lesson.check_average_gradients_leaves_inputs, average_in_place, says="input gradients modified")
    failure(lesson.check_average_gradients, sum_of_gradients, says="average_gradients([{'w'")


def test_messages_follow_the_edition_language():
    course.set_language("es")
    message = failure(lesson.check_average_gradients_leaves_inputs, average_in_place,
                      says="gradientes de entrada")
    assert "esperado:" in message and "pista:" in message and "sección 5" in message
    assert "hint('" not in message      # this exercise has no second hint
    message = failure(lesson.check_shard_indices_in_order, shard_without_padding)
    assert "si sigues sin verlo: hint('shard_indices')" in message


# -------------------------------------------------------------------------------------- harnesses
def test_the_course_meter_is_off_only_inside_the_block():
    x = torch.randn(3, requires_grad=True)
    with lesson.course_meter_off(), pytest.raises(RuntimeError, match="switched off"):
        saved_bytes(torch.sin, x)
    assert saved_bytes(torch.sin, x) == 12


def test_distributed_sampler_is_off_only_inside_the_block():
    with lesson.distributed_sampler_off(), pytest.raises(RuntimeError, match="switched off"):
        DistributedSampler(range(4), num_replicas=2, rank=0)
    assert list(DistributedSampler(range(4), num_replicas=2, rank=1, shuffle=False)) == [1, 3]


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
    assert all(2 <= lesson.draw(generator, 2, 4) <= 4 for _ in range(50))


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
    model = lesson.freeze_head(course.training.make_mlp(hidden=4))
    assert [p.requires_grad for p in model.parameters()] == [True, True, False, False]

    def optimizer_that_also_shrinks_everything(model, lr):
        class Shrinking(torch.optim.AdamW):
            def step(self, closure=None):
                super().step(closure)
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(0.5)
        return Shrinking([p for p in model.parameters() if p.requires_grad], lr=lr)

    with pytest.raises(CheckFailed, match=r"frozen parameters that moved after optimizer.step\(\) \(spy"):
        lesson.check_optimizer_on(optimizer_that_also_shrinks_everything, model, torch.randn(2, 1, 28, 28),
                                  0.1, "spy")


def test_hints_name_a_section_and_second_hints_exist():
    for key, texts in lesson.HINTS.items():
        assert texts["es"].strip() and texts["en"].strip(), key
        if key != "concept_check":
            assert "sección" in texts["es"] and "section" in texts["en"], key
        assert texts.get("more") in (None, *lesson.MORE_HINTS)
    assert set(lesson.MORE_HINTS) == {"activation_bytes", "shard_indices"}


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
    failure(check, top_k_names_imagenet_constants, says="Probe_Weights.PROBE (resize")
    failure(check, top_k_names_resized_to_the_crop, says="the batch the model received")
    failure(check, top_k_names_in_training_mode, says="model.training during the call")
    lesson.check_top_k_names_output(top_k_names_in_training_mode)      # the names are right all the same
    failure(lesson.check_top_k_names_output, top_k_names_least_likely_first, says="top_k_names(model,")


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
    images, inner = lesson.framed_images(generator, 2, 40, 60)
    assert images.dtype == torch.uint8 and not torch.equal(images[:, :, 0, 0], inner.to(torch.uint8))


def test_the_spy_notes_its_calls_and_answers_the_planted_logits():
    logits, chosen = lesson.planted_logits(torch.Generator().manual_seed(0), 3, 20, 4)
    assert [row.topk(4).indices.tolist() for row in logits] == chosen
    spy = lesson.SpyClassifier(logits)
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


def _package(tmp_path, name, **changes):
    folder = tmp_path / name
    (folder / "minitrain").mkdir(parents=True)
    (folder / lesson.TRAINING_FILE).write_text(TRAINING.format(**{**RIGHT, **changes}))
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three packages, each launched once under torchrun: right, without DDP, without set_epoch."""
    tmp_path = tmp_path_factory.mktemp("packages")
    options = {"world_size": 2, "examples": 64, "epochs": 2, "batch_size": 8, "seed": 11}
    return {name: lesson.package_run(_package(tmp_path, name, **changes), **options) for name, changes in [
        ("right", {}), ("no_ddp", {"wrap": "net = model"}), ("same_order", {"epoch": "pass"})]}


def test_the_package_checks_pass_a_right_training_loop(runs):
    run = runs["right"]
    assert run.failure == "" and [r["rank"] for r in run.reports] == [0, 1]
    assert run.reports[0]["start"] != run.reports[1]["start"]       # DDP had something to make equal
    lesson.check_ranks_agree_on(run)
    lesson.check_shards_on_run(run)
    lesson.check_learns_on(run)


def test_the_package_checks_catch_a_loop_without_ddp(runs):
    failure(lesson.check_ranks_agree_on, runs["no_ddp"], says="fingerprints of the weights at the end")
    lesson.check_shards_on_run(runs["no_ddp"])          # each behaviour is its own point


def test_the_package_checks_catch_an_order_that_never_changes(runs):
    failure(lesson.check_shards_on_run, runs["same_order"], says="another order in epoch 1")
    lesson.check_ranks_agree_on(runs["same_order"])


def test_a_run_is_launched_once_per_text_and_configuration(runs, tmp_path):
    options = {"world_size": 2, "examples": 64, "epochs": 2, "batch_size": 8, "seed": 11}
    again = lesson.package_run(_package(tmp_path, "again"), **options)
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


def test_the_notebook_writes_the_package_files_the_checks_use():
    from lesson_files import read_source

    written = {}
    for cell in read_source("07_scale").cells:
        first, _, body = cell.source.partition("\n")
        if cell.cell_type == "code" and first.startswith("%%writefile {RUN_DIR}/"):
            written[first.removeprefix("%%writefile {RUN_DIR}/")] = body
    assert set(written) == {*lesson.PACKAGE_FILES, lesson.TRAINING_FILE}
    for name, text in lesson.PACKAGE_FILES.items():
        assert written[name] == text.rstrip("\n"), name
