"""Lesson 03's checks: each passes a right answer and fails a typical wrong one with expected, got
and a hint; its harnesses (the grad probe, the torch.load recorder, the counting transform, the
refused library MLP, data sets and loss on logits) record and refuse what they should."""

import copy
import itertools
import math
import re

import pytest
import torch
import torchvision
from check_messages import failure
from lesson_files import read_solution
from torch import nn
from torch.nn import functional as F
from torch.utils import data

import course
from graders.judge import calls, wire
from graders.lesson_checks import modules as lesson
from graders.lessons import solution_path

pytestmark = pytest.mark.usefixtures("english")


def _module_calling(answer):
    """A module class as the checks build one: constructing it, or calling it, calls ``answer``."""
    class Answer(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            answer(*args, **kwargs)

        def forward(self, *args):
            return answer(*args)

    return Answer


# How test_harness calls each check with a given answer.
CHECK_CALLS = {
    "check_mlp_structure": lambda answer: lesson.check_mlp_structure(_module_calling(answer), [4, 8, 3], 5),
    "check_mlp_forward": lambda answer: lesson.check_mlp_forward(_module_calling(answer)),
    "check_residual_structure": lambda answer: lesson.check_residual_structure(_module_calling(answer), 6, 9),
    "check_residual_forward": lambda answer: lesson.check_residual_forward(_module_calling(answer)),
    "check_count_parameters": lambda answer: lesson.check_count_parameters(answer, seed=304),
    "check_count_trainable": lambda answer: lesson.check_count_trainable(answer, seed=305),
    "check_save_weights": lambda answer: lesson.check_save_weights(answer, sizes=(6, 5, 2), seed=304),
    "check_load_weights": lambda answer: lesson.check_load_weights(answer, sizes=(6, 5, 2), seed=305),
    "check_load_is_strict": lesson.check_load_is_strict,
    "check_init_weights": lesson.check_init_weights,
    "check_init_biases": lesson.check_init_biases,
    "check_train_and_eval_outputs": lesson.check_train_and_eval_outputs,
    "check_no_graph": lesson.check_no_graph,
    "check_mode_restored": lesson.check_mode_restored,
    "check_dataset_length": lesson.check_dataset_length,
    "check_dataset_item": lesson.check_dataset_item,
    "check_dataset_lazy": lesson.check_dataset_lazy,
    "check_dataset_in_a_loader": lesson.check_dataset_in_a_loader,
    "check_bce_values": lesson.check_bce_values,
    "check_bce_large_logits": lesson.check_bce_large_logits,
    "check_bce_gradient": lesson.check_bce_gradient,
    "check_concepts": lesson.check_concepts,
}


# Exercise 1 · MLP ----------------------------------------------------------------------------------

class ListMLP(nn.Module):
    """Right: linear layers in an nn.ModuleList, activations applied in forward."""

    def __init__(self, sizes, relu_after_last=False, relu=True):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(n_in, n_out) for n_in, n_out in itertools.pairwise(sizes))
        self.relu_after_last, self.relu = relu_after_last, relu

    def forward(self, x):
        for index, layer in enumerate(self.linears):
            x = layer(x)
            last = index == len(self.linears) - 1
            if self.relu and (not last or self.relu_after_last):
                x = torch.relu(x)
        return x


class SequentialMLP(nn.Module):
    """Right too: the same network as one nn.Sequential."""

    def __init__(self, sizes):
        super().__init__()
        parts = [part for n_in, n_out in itertools.pairwise(sizes)
                 for part in (nn.Linear(n_in, n_out), nn.ReLU())]
        self.body = nn.Sequential(*parts[:-1])

    def forward(self, x):
        return self.body(x)


class HiddenListMLP(ListMLP):
    """Wrong: the layers live in a plain Python list, so nothing is registered."""

    def __init__(self, sizes):
        nn.Module.__init__(self)
        self.linears = [nn.Linear(n_in, n_out) for n_in, n_out in itertools.pairwise(sizes)]
        self.relu_after_last, self.relu = False, True


class LibraryMLP(nn.Module):
    """The shortcut: torchvision's ready-made MLP."""

    def __init__(self, sizes):
        super().__init__()
        self.body = torchvision.ops.MLP(sizes[0], sizes[1:])

    def forward(self, x):
        return self.body(x)


@pytest.mark.parametrize("mlp", [ListMLP, SequentialMLP])
def test_mlp_checks_pass_both_ways_of_registering_the_layers(mlp):
    for sizes in ([4, 8, 3], [10, 2], [3, 5, 5, 5, 1]):
        lesson.check_mlp_structure(mlp, sizes, batch=4)
    lesson.check_mlp_forward(mlp)


def test_mlp_structure_fails_layers_in_a_python_list():
    failure(lesson.check_mlp_structure, HiddenListMLP, [4, 8, 3], batch=5,
            says=["weight shapes of the nn.Linear layers", "got: [] (list)"])


def test_mlp_forward_fails_an_activation_after_the_last_layer_or_none_at_all():
    failure(lesson.check_mlp_forward, lambda sizes: ListMLP(sizes, relu_after_last=True),  # -2.0 became 0.0
            says=["weights set by hand", "expected: tensor(shape=(2, 2), dtype=torch.float32, device=cpu) "
                  "[[3.0, 0.0], [3.0, -2.0]]", "if you are still stuck: hint('mlp')"])
    failure(lesson.check_mlp_forward, lambda sizes: ListMLP(sizes, relu=False),  # negative hidden values kept
            says=["weights set by hand", "the values differ"])


@pytest.mark.parametrize("check", [lambda mlp: lesson.check_mlp_structure(mlp, [4, 8, 3], batch=5),
                                   lesson.check_mlp_forward])
def test_the_library_mlp_is_refused_inside_the_checks_and_works_outside(check):
    failure(check, LibraryMLP, says=["ShortcutUsed", "MLP.__init__ is not available in this exercise"])
    assert LibraryMLP([4, 8, 3])(torch.randn(2, 4)).shape == (2, 3)


# Exercise 2 · ResidualBlock --------------------------------------------------------------------------

class Block(nn.Module):
    """Right by default; each flag is a mistake: no skip, no activation, no normalisation, or the
    normalised input added back instead of the raw one."""

    def __init__(self, dim, hidden, skip=True, relu=True, norm=True, normalised_skip=False):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.skip, self.relu, self.use_norm, self.normalised_skip = skip, relu, norm, normalised_skip

    def forward(self, x):
        normed = self.norm(x) if self.use_norm else x
        inner = self.fc1(normed)
        inner = self.fc2(torch.relu(inner) if self.relu else inner)
        kept = normed if self.normalised_skip else x
        return kept + inner if self.skip else inner


class NormFirstBlock(nn.Module):
    """Right, written another way: the parts declared in another order, the sum written as a method."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(self.norm(x)))).add(x)


class SwappedBlock(Block):
    def __init__(self, dim, hidden):
        super().__init__(dim, hidden)
        self.fc1, self.fc2 = nn.Linear(dim, dim), nn.Linear(dim, dim)


def test_residual_checks_pass_a_right_block():
    for right in (Block, NormFirstBlock):
        lesson.check_residual_structure(right, dim=6, hidden=10)
        lesson.check_residual_structure(right, dim=1, hidden=1)
        lesson.check_residual_forward(right)


def test_residual_structure_fails_wrong_shapes():
    failure(lesson.check_residual_structure, SwappedBlock, dim=6, hidden=10,
            says=["ResidualBlock(6, 10).fc1.weight.shape", "expected: (10, 6)", "got: (6, 6)"])


@pytest.mark.parametrize("mistake", [{"skip": False}, {"relu": False}, {"norm": False},
                                     {"normalised_skip": True}])
def test_residual_forward_fails_without_skip_activation_or_norm(mistake):
    failure(lesson.check_residual_forward, lambda dim, hidden: Block(dim, hidden, **mistake),
            says=["ResidualBlock(2, 3)(x) with weights set by hand", "the values differ",
                  "expected: tensor(shape=(2, 2), dtype=torch.float32, device=cpu) "
                  "[[2.5, -2.0], [0.5, 5.0]]"])


def test_residual_structure_fails_a_block_without_norm():
    class TwoParts(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    failure(lesson.check_residual_structure, TwoParts, dim=6, hidden=10,
            says=["ResidualBlock(6, 10).norm", "expected: LayerNorm", "got: None"])


def test_residual_forward_fails_a_block_without_fc1():
    class Unnamed(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.norm = nn.LayerNorm(dim)
            self.first = nn.Linear(dim, hidden)

    failure(lesson.check_residual_forward, Unnamed,
            says=["ResidualBlock(2, 3).fc1", "expected: Linear", "got: None"])


# Exercise 3 · count_parameters ---------------------------------------------------------------------

def count(model, trainable_only=False):
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def test_count_checks_pass_a_right_count():
    for seed in (304, 1304, 7):
        lesson.check_count_parameters(count, seed=seed)
        lesson.check_count_trainable(count, seed=seed)


def test_count_parameters_fails_counting_buffers_or_returning_a_tensor():
    def with_buffers(model, trainable_only=False):
        return sum(t.numel() for t in model.state_dict().values())

    message = failure(lesson.check_count_parameters, with_buffers, seed=304,
                      says=["count_parameters(Sequential(Linear(", "BatchNorm1d", "is not right"])
    expected, got = (int(re.search(rf"{part}: (\d+) \(int\)", message)[1]) for part in ("expected", "got"))
    assert got > expected, message  # the running statistics counted too

    def as_tensor(model, trainable_only=False):
        return torch.tensor(count(model))

    failure(lesson.check_count_parameters, as_tensor, seed=304, says=["(int)", "got: tensor(shape=()"])


def test_count_trainable_fails_ignoring_frozen_parameters():
    def everything(model, trainable_only=False):
        return count(model)

    failure(lesson.check_count_trainable, everything, seed=305,
            says=["count_parameters(model, trainable_only=True)", "frozen weights [True"])


# Exercise 4 · save_weights / load_weights ----------------------------------------------------------

def save(model, path):
    torch.save(model.state_dict(), path)


def load(model, path, strict=True, **options):
    model.load_state_dict(torch.load(path, **({"map_location": "cpu"} | options)), strict=strict)
    return model


def test_save_and_load_checks_pass_right_functions():
    lesson.check_save_weights(save, sizes=(6, 5, 2), seed=304)
    lesson.check_load_weights(load, sizes=(6, 5, 2), seed=305)
    lesson.check_load_is_strict(load)


@pytest.mark.parametrize("read", [lambda path: torch.load(path, "cpu"),  # map_location by position
                                  lambda path: torch.serialization.load(path, map_location="cpu")])
def test_load_weights_sees_map_location_by_position_or_through_serialization_and_puts_torch_load_back(read):
    real_load = torch.load
    lesson.check_load_weights(lambda model, path: model.load_state_dict(read(path)) and model,
                              sizes=(6, 5, 2), seed=305)
    assert torch.load is real_load and torch.serialization.load is real_load


def test_save_weights_fails_pickling_the_whole_model():
    def whole_model(model, path):
        torch.save(model, path)

    failure(lesson.check_save_weights, whole_model, sizes=(6, 5, 2), seed=1,
            says=["torch.load(path) raises UnpicklingError", "a state_dict readable with weights_only=True"])


def test_load_weights_fails_returning_the_report_forgetting_map_location_or_loading_half():
    def report(model, path):
        return model.load_state_dict(torch.load(path, map_location="cpu"))

    failure(lesson.check_load_weights, report, sizes=(6, 5, 2), seed=305,
            says=["expected: the same model object it was given", "(_IncompatibleKeys)"])
    failure(lesson.check_load_weights, lambda model, path: load(model, path, map_location=None),
            sizes=(6, 5, 2), seed=305,
            says=["the file read with a map_location to the CPU", "map_location: [None]"])
    failure(lesson.check_load_is_strict, lambda model, path: load(model, path, strict=False),
            says=["should have raised an exception", "RuntimeError", "strict"])


# Exercise 5 · init_weights ---------------------------------------------------------------------------

def init(model, weights=True, biases=True):
    def one(layer):
        if isinstance(layer, nn.Linear):
            if weights:
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            if biases and layer.bias is not None:
                nn.init.zeros_(layer.bias)

    model.apply(one)
    return model


def test_init_checks_pass_a_right_initialisation():
    lesson.check_init_weights(init)
    lesson.check_init_biases(init)


def test_init_weights_fails_missing_nested_layers_or_the_wrong_scheme():
    def top_level_only(model):
        for layer in model.children():
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
        return model

    failure(lesson.check_init_weights, top_level_only,  # the nested layer keeps PyTorch's default
            says=["2.0.weight.std()", "the values differ", "hint('init_weights')"])

    def xavier(model):
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                nn.init.xavier_normal_(layer.weight)
        return model

    failure(lesson.check_init_weights, xavier, says=["0.weight.std() [fan_in=1000", "the values differ"])


def test_init_biases_fails_forgotten_biases_other_layers_touched_or_nothing_returned():
    failure(lesson.check_init_biases, lambda model: init(model, biases=False),
            says=["0.bias: the values differ", "expected: tensor(shape=(20,)"])

    def zero_every_vector(model):
        for parameter in model.parameters():
            if parameter.dim() == 1:
                nn.init.zeros_(parameter)
        return init(model)

    failure(lesson.check_init_biases, zero_every_vector,
            says=["not an nn.Linear: left alone", "the values differ"])
    failure(lesson.check_init_biases, lambda model: None,
            says=["expected: the same model object it was given", "got: None (NoneType)"])


# Exercise 6 · train_and_eval_outputs --------------------------------------------------------------

def outputs(model, x, swap=False, graph=False, restore=True):
    was_training = model.training
    with torch.set_grad_enabled(graph):
        model.train()
        in_training = model(x).detach()
        model.eval()
        in_evaluation = model(x).detach()
    if restore:
        model.train(was_training)
    return (in_evaluation, in_training) if swap else (in_training, in_evaluation)


def test_train_and_eval_checks_pass_a_right_function():
    lesson.check_train_and_eval_outputs(outputs)
    model = nn.Sequential(nn.Linear(30, 64), nn.Tanh(), nn.Linear(64, 16), nn.Dropout(0.8)).eval()
    lesson.check_train_and_eval_outputs(outputs, model, torch.randn(40, 30))
    lesson.check_no_graph(outputs)
    lesson.check_mode_restored(outputs)


def test_train_and_eval_outputs_fails_a_swapped_tuple():
    failure(lesson.check_train_and_eval_outputs, lambda m, x: outputs(m, x, swap=True),
            says=["eval_out [Sequential(..., Dropout(0.5))]: in evaluation Dropout lets its input through",
                  "the values differ"])


def test_no_graph_fails_outputs_detached_after_building_the_graph():
    failure(lesson.check_no_graph, lambda m, x: outputs(m, x, graph=True),
            says=["autograd while the model computes", "got: on in 2 of 2 passes"])


def test_mode_restored_fails_a_model_left_in_eval_mode():
    failure(lesson.check_mode_restored, lambda m, x: outputs(m, x, restore=False),
            says=["model.training [train → train_and_eval_outputs]", "expected: True (bool)",
                  "got: False (bool)"])


def on_a_copy(model, x):
    """Right, another way: the model itself is never switched; a copy runs in both modes."""
    twin = copy.deepcopy(model)
    with torch.inference_mode():
        return twin.train(True)(x), twin.train(False)(x)


def eval_first(model, x):
    """Right, another way: evaluation first, the mode restored even if the model raised."""
    was_training = model.training
    try:
        with torch.no_grad():
            in_evaluation = model.eval()(x)
            return model.train()(x), in_evaluation
    finally:
        model.train(was_training)


@pytest.mark.parametrize("answer", [outputs, on_a_copy, eval_first])
def test_train_and_eval_right_answers_written_other_ways_earn_all_three_points(answer):
    lesson.check_train_and_eval_outputs(answer)
    lesson.check_no_graph(answer)
    lesson.check_mode_restored(answer)


DO_NOTHING_OUTPUTS = {"returns None": lambda model, x: None, "returns 0": lambda model, x: 0,
                      "returns 0.0": lambda model, x: 0.0,
                      "returns its first argument": lambda model, x: model}


@pytest.mark.parametrize("body", sorted(DO_NOTHING_OUTPUTS))
def test_train_and_eval_outputs_that_do_nothing_earn_no_point(body):
    """A function that never runs the model leaves its mode as it was: that restores nothing."""
    answer = DO_NOTHING_OUTPUTS[body]
    failure(lesson.check_mode_restored, answer,
            says=["model[1] (Dropout) during train_and_eval_outputs [eval]",
                  "expected: a pass in training mode and one in evaluation mode", "got: 0 in training, 0 in"])
    failure(lesson.check_train_and_eval_outputs, answer,
            says=["train_and_eval_outputs(Sequential(..., Dropout(0.5)), x)"])
    failure(lesson.check_no_graph, answer,
            says=["train_and_eval_outputs(Sequential(Linear(6, 6), Dropout(0.5), probe)"])


def test_mode_restored_needs_both_modes_inside_the_function():
    def training_mode_only(model, x):
        with torch.no_grad():
            out = model(x)
        return out, out

    failure(lesson.check_mode_restored, training_mode_only,
            says=["during train_and_eval_outputs [eval]", "got: 0 in training, 1 in evaluation"])


def test_no_graph_sees_each_forward_pass_apart():
    def graph_in_training_only(model, x):
        train_out = model.train()(x).detach()
        with torch.no_grad():
            return train_out, model.eval()(x)

    failure(lesson.check_no_graph, graph_in_training_only, says=["got: on in 1 of 2 passes"])


# Exercise 7 · ImageDataset -------------------------------------------------------------------------

class Images(data.Dataset):
    """Right: the tensors kept, the transform applied on each read."""

    def __init__(self, images, labels, transform=None):
        super().__init__()
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return self.images.shape[0]

    def __getitem__(self, index):
        image = self.images[index]
        return (image if self.transform is None else self.transform(image)), self.labels[index].item()


class Pairs:
    """Right too, another way: no Dataset base, the pairs kept in a list, the transform on each read."""

    def __init__(self, images, labels, transform=lambda image: image):
        self.pairs, self.transform = list(zip(images, labels.tolist(), strict=True)), transform

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, index):
        image, label = self.pairs[index]
        return self.transform(image), label


class TensorLabels(Images):
    """Right too: the label as a 0-dim tensor, as TensorDataset gives it."""

    def __getitem__(self, index):
        return super().__getitem__(index)[0], self.labels[index]


class Wrong(Images):
    """Each way of getting one behaviour wrong, the others right."""

    def __init__(self, images, labels, transform=None, mistake=""):
        super().__init__(images, labels, transform)
        self.mistake, self.position, self.cache = mistake, 0, {}
        if mistake == "precomputed" and transform is not None:
            self.images, self.transform = torch.stack([transform(image) for image in images]), None

    def __len__(self):
        return super().__len__() - (self.mistake == "one short")

    def __getitem__(self, index):
        if self.mistake == "float label":
            return super().__getitem__(index)[0], float(self.labels[index])
        if self.mistake == "no transform":
            return self.images[index], int(self.labels[index])
        if self.mistake == "cached":
            if index not in self.cache:
                self.cache[index] = super().__getitem__(index)
            return self.cache[index]
        if self.mistake == "in order":  # ignores the index: items come out in storage order
            index, self.position = self.position, (self.position + 1) % super().__len__()
        return super().__getitem__(index)


def wrong(mistake):
    return lambda images, labels, transform=None: Wrong(images, labels, transform, mistake)


class Inherited(data.TensorDataset):
    """The shortcut: TensorDataset's indexing, a transform added on top."""

    def __init__(self, images, labels, transform=None):
        super().__init__(images, labels)
        self.transform = transform

    def __getitem__(self, index):
        image, label = super().__getitem__(index)
        return (image if self.transform is None else self.transform(image)), int(label)


DATASET_CHECKS = [lesson.check_dataset_length, lesson.check_dataset_item, lesson.check_dataset_lazy,
                  lesson.check_dataset_in_a_loader]


@pytest.mark.parametrize("answer", [Images, Pairs, TensorLabels])
def test_dataset_checks_pass_right_data_sets_written_three_ways(answer):
    for check in DATASET_CHECKS:
        check(answer)
    lesson.check_dataset_length(answer, sizes=(2, 613))
    lesson.check_dataset_item(answer, n=3, shape=(3, 5, 4))
    lesson.check_dataset_lazy(answer, n=50, shape=(28, 28))
    lesson.check_dataset_in_a_loader(answer, n=61, batch_size=60)


def test_dataset_length_fails_one_item_short():
    failure(lesson.check_dataset_length, wrong("one short"),
            says=["len(ImageDataset(images (1, ", "expected: 1 (int)", "got: 0 (int)",
                  "a map-style data set answers two questions"])


def test_dataset_item_fails_a_float_label_or_a_forgotten_transform():
    failure(lesson.check_dataset_item, wrong("float label"),
            says=["[1] (the label, an integer)", "expected: int, or a 0-dim integer tensor", "got: "])
    failure(lesson.check_dataset_item, wrong("no transform"),
            says=["transform=f)[0][0] (the image)", "the shape is not the expected one", "expected: (1, "])


def test_dataset_lazy_fails_a_transform_computed_once_in_init_or_cached():
    failure(lesson.check_dataset_lazy, wrong("precomputed"),
            says=["calls to transform while building ImageDataset(images", "expected: 0 (int)",
                  "the transform is applied when an item is read",
                  "if you are still stuck: hint('image_dataset')"])
    failure(lesson.check_dataset_lazy, wrong("cached"),
            says=["calls to transform after reading ", "item(s), the last ImageDataset(images"])


def test_dataset_in_a_loader_fails_items_read_in_storage_order_or_one_left_out():
    failure(lesson.check_dataset_in_a_loader, wrong("in order"),
            says=["order of the items in two epochs with shuffle=True",
                  "expected: two different random orders",
                  "got: items [0, 1, 2, 3, 4, 5, 6, 7]… and [0, 1, 2, 3, 4, 5, 6, 7]…"])
    failure(lesson.check_dataset_in_a_loader, wrong("one short"),
            says=["batch sizes of DataLoader(ImageDataset(images", "the `DataLoader` asks `len()`"])


@pytest.mark.parametrize("check", DATASET_CHECKS)
def test_ready_made_data_sets_are_refused_inside_the_checks_and_work_outside(check):
    failure(check, Inherited,
            says=["ShortcutUsed", "TensorDataset.__init__ is not available in this exercise"])
    images, labels = torch.zeros(3, 2, 2), torch.tensor([0, 1, 2])
    assert Inherited(images, labels)[2][1] == 2
    assert data.TensorDataset(images, labels)[1][1] == 1


@pytest.mark.parametrize("check", DATASET_CHECKS)
def test_a_data_set_that_does_nothing_earns_no_point(check):
    class Nothing(data.Dataset):
        def __init__(self, images, labels, transform=None):
            super().__init__()

        def __len__(self):
            return 0

        def __getitem__(self, index):
            return index

    failure(check, Nothing, says=["ImageDataset(images"])


# Exercise 8 · bce_with_logits ----------------------------------------------------------------------

def stable(logits, targets):
    return (logits.clamp(min=0) - logits * targets + torch.log1p(torch.exp(-logits.abs()))).mean()


def stable_other_way(logits, targets):
    softplus = torch.logsumexp(torch.stack([torch.zeros_like(logits), logits]), dim=0)  # log(e⁰ + eᶻ)
    return (softplus - logits * targets).mean()


def through_softplus(logits, targets):
    return (F.softplus(logits) - logits * targets).mean()


def through_logaddexp(logits, targets):
    return (torch.logaddexp(torch.zeros_like(logits), -logits) + (1 - targets) * logits).mean()


def through_logsigmoid(logits, targets):
    return -(targets * F.logsigmoid(logits) + (1 - targets) * F.logsigmoid(-logits)).mean()


def naive(logits, targets):
    p = torch.sigmoid(logits)
    return -(targets * torch.log(p) + (1 - targets) * torch.log(1 - p)).mean()


def through_bce_loss(logits, targets):
    return nn.BCELoss()(nn.Sigmoid()(logits), targets)


def rewritten_without_the_trick(logits, targets):
    return ((1 - targets) * logits + torch.log1p(torch.exp(-logits))).mean()


BCE_CHECKS = [lesson.check_bce_values, lesson.check_bce_large_logits, lesson.check_bce_gradient]


@pytest.mark.parametrize("answer", [stable, stable_other_way])
def test_bce_checks_pass_the_stable_loss_written_two_ways(answer):
    for check in BCE_CHECKS:
        check(answer)
    lesson.check_bce_values(answer, shape=(2, 2, 5))
    lesson.check_bce_large_logits(answer, logits=[17.5, -17.5, 88.5, -88.5, 104.0, -104.0, 5000.0, -3.0e4])
    lesson.check_bce_gradient(answer, shape=(6, 4))


@pytest.mark.parametrize("answer", [through_softplus, through_logaddexp, through_logsigmoid])
def test_bce_checks_refuse_the_functions_that_already_compute_it_stably(answer):
    for check in BCE_CHECKS:
        failure(check, answer, says=["is not available in this exercise"])


@pytest.mark.parametrize("answer", [naive, through_bce_loss, rewritten_without_the_trick])
def test_bce_through_the_sigmoid_or_without_the_trick_earns_the_ordinary_point_only(answer):
    lesson.check_bce_values(answer)
    failure(lesson.check_bce_large_logits, answer,
            says=["bce_with_logits(tensor([", "the values differ", "no exponential has a positive exponent",
                  "if you are still stuck: hint('bce_with_logits')"])
    failure(lesson.check_bce_gradient, answer, says=["gradient of bce_with_logits(", "(σ(z) − y) / N"])


def test_bce_large_logits_names_the_logit_that_fails():
    failure(lesson.check_bce_large_logits, through_bce_loss, logits=[1000.0],
            says=["bce_with_logits(tensor([1000.0]), tensor([0.0]))", "device=cpu) 1000.0\n",
                  "device=cpu) 100.0\n"])


def test_bce_values_fails_a_sum_a_python_float_or_a_loss_per_element():
    failure(lesson.check_bce_values, lambda z, y: stable(z, y) * z.numel(),
            says=["σ(0) = 1/2, loss log 2", "the values differ"])
    failure(lesson.check_bce_values, lambda z, y: stable(z, y).item(),
            says=["the type is not the expected one", "got: 0.6931"])
    failure(lesson.check_bce_values, lambda z, y: z.clamp(min=0) - z * y + torch.log1p(torch.exp(-z.abs())),
            says=["the shape is not the expected one", "expected: ()", "got: (2,)"])


def test_bce_gradient_fails_a_loss_cut_from_the_graph():
    def detached(logits, targets):
        with torch.no_grad():
            return stable(logits, targets)

    failure(lesson.check_bce_gradient, detached, says=[".backward()", "raised an exception", "RuntimeError"])


@pytest.mark.parametrize("check", BCE_CHECKS)
@pytest.mark.parametrize("shortcut", [
    lambda z, y: F.binary_cross_entropy_with_logits(z, y),
    lambda z, y: nn.BCEWithLogitsLoss()(z, y),
    lambda z, y: torch.binary_cross_entropy_with_logits(z, y, None, None, 1),
])
def test_the_library_loss_on_logits_is_refused_inside_the_checks_and_works_outside(check, shortcut):
    failure(check, shortcut, says=["ShortcutUsed", "is not available in this exercise"])
    torch.testing.assert_close(shortcut(torch.tensor([0.0]), torch.tensor([1.0])), torch.tensor(math.log(2)))


@pytest.mark.parametrize("check", BCE_CHECKS)
@pytest.mark.parametrize("body", [lambda z, y: None, lambda z, y: 0, lambda z, y: z])
def test_a_loss_that_does_nothing_earns_no_point(check, body):
    failure(check, body, says=["bce_with_logits("])


# Language ---------------------------------------------------------------------------------------------

def test_messages_and_hints_follow_the_edition_language():
    course.set_language("es")
    failure(lesson.check_mode_restored, lambda m, x: outputs(m, x, restore=False),
            says=["esperado: True", "obtenido: False",
                  "pista: cada salida se calcula con el modelo en su modo"])
    failure(lesson.check_mlp_structure, LibraryMLP, [4, 3], batch=2,
            says=["MLP.__init__ no está disponible en este ejercicio"])
    failure(lesson.check_dataset_lazy, wrong("precomputed"),
            says=["llamadas a transform al construir ImageDataset",
                  "pista: la transformación se aplica al leer"])
    failure(lesson.check_bce_large_logits, naive, says=["pista: en float32, σ(z) vale exactamente 1"])


# ------------------------------------------------------------------------------ decided by the judge
LESSON = "03_modules"


def _judged(**answers) -> dict:
    """The score of each judged cell that runs one of ``answers``, through the wire, for a kernel
    holding the reference's answers with ``answers`` in place of some: what the class's grader
    decides from the data alone."""
    judged = calls.judged(LESSON)
    cells = tuple(dict.fromkeys(cell for call in judged for cell in calls.answer_cells(call)))
    namespace = {**calls.reference_namespace(read_solution(LESSON), cells), **answers}
    asked = [call for call in calls.probe_calls(LESSON, "term") if call["function"] in answers or not answers]
    exec(wire.probe([], asked), namespace)
    returned = wire.decode_reply(namespace[wire.RESULT])[1]
    points = {call.grade_cell: 1.0 for call in judged}
    scores = calls.cell_scores(LESSON, "term", solution_path(LESSON), returned, points)
    return {call["cell"]: scores[call["cell"]] for call in asked}


def _lost(**answers) -> list[str]:
    return sorted(cell for cell, score in _judged(**answers).items() if score == 0)


def test_every_grade_cell_is_judged():
    assert calls.coverage(LESSON)[2] == []


def _normal_by_hand(model):
    """Right, another way: each linear weight drawn with randn and scaled, in modules() order."""
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.copy_(torch.randn(layer.weight.shape) * math.sqrt(2 / layer.in_features))
                if layer.bias is not None:
                    layer.bias.zero_()
    return model


def test_right_answers_written_other_ways_keep_every_judged_cell():
    assert set(_judged().values()) == {1.0}
    assert _lost(MLP=ListMLP, ResidualBlock=Block, count_parameters=count, save_weights=save,
                 load_weights=load, init_weights=init, train_and_eval_outputs=outputs, ImageDataset=Images,
                 bce_with_logits=stable) == []
    read_by_position = lambda model, path: model.load_state_dict(torch.load(path, "cpu")) and model  # noqa: E731
    assert _lost(MLP=SequentialMLP, ResidualBlock=NormFirstBlock, init_weights=_normal_by_hand,
                 train_and_eval_outputs=on_a_copy, ImageDataset=Pairs, bce_with_logits=stable_other_way,
                 load_weights=read_by_position) == []
    assert _lost(train_and_eval_outputs=eval_first, ImageDataset=TensorLabels) == []


def test_the_judge_sees_the_mlp_and_residual_block_mistakes():
    assert _lost(MLP=HiddenListMLP) == ["test_mlp_forward", "test_mlp_structure"]
    assert _lost(MLP=lambda sizes: ListMLP(sizes, relu_after_last=True)) == ["test_mlp_forward"]
    assert _lost(MLP=lambda sizes: ListMLP(sizes, relu=False)) == ["test_mlp_forward"]
    assert _lost(ResidualBlock=SwappedBlock) == ["test_residual_forward", "test_residual_structure"]
    for mistake in ({"skip": False}, {"relu": False}, {"norm": False}, {"normalised_skip": True}):
        assert _lost(ResidualBlock=lambda dim, hidden, mistake=mistake: Block(dim, hidden, **mistake)) == [
            "test_residual_forward"]


def test_the_judge_sees_the_counting_mistakes():
    def with_buffers(model, trainable_only=False):
        return sum(t.numel() for t in model.state_dict().values())

    def each_time_seen(model, trainable_only=False):  # a shared layer counted once per appearance
        return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False)
                   if p.requires_grad or not trainable_only)

    assert _lost(count_parameters=with_buffers) == ["test_count_parameters", "test_count_trainable"]
    assert _lost(count_parameters=each_time_seen) == ["test_count_parameters"]
    assert _lost(count_parameters=lambda model, trainable_only=False: count(model)) == [
        "test_count_trainable"]


def test_the_judge_sees_the_saving_and_loading_mistakes():
    assert _lost(save_weights=lambda model, path: torch.save(model, path)) == ["test_save_weights"]
    assert _lost(save_weights=lambda model, path: torch.save(dict(model.named_parameters()), path)) == [
        "test_save_weights"]  # the BatchNorm buffers left out
    def report(model, path):  # the report returned, not the model
        return model.load_state_dict(torch.load(path, map_location="cpu"))

    assert _lost(load_weights=report) == ["test_load_weights"]
    for wrong in (lambda model, path: load(model, path, map_location=None),
                  lambda model, path: load(model, path, strict=False)):
        assert _lost(load_weights=wrong) == ["test_load_weights"]


def test_the_judge_sees_the_initialisation_mistakes():
    def top_level_only(model):
        for layer in model.children():
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        return model

    def xavier(model):
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                nn.init.xavier_normal_(layer.weight)
        return init(model, weights=False)

    def zero_every_vector(model):
        for parameter in model.parameters():
            if parameter.dim() == 1:
                nn.init.zeros_(parameter)
        return init(model)

    assert _lost(init_weights=top_level_only) == ["test_init_biases", "test_init_weights"]
    assert _lost(init_weights=xavier) == ["test_init_weights"]
    assert _lost(init_weights=lambda model: init(model, biases=False)) == ["test_init_biases"]
    assert _lost(init_weights=zero_every_vector) == ["test_init_biases"]
    def nothing_returned(model):
        init(model)

    assert _lost(init_weights=nothing_returned) == ["test_init_biases", "test_init_weights"]


def test_the_init_statistics_refuse_forged_data_without_raising():
    call = next(call for call in calls.judged(LESSON) if call.grade_cell == "test_init_weights")
    want = calls.expected(solution_path(LESSON), LESSON, "term")["test_init_weights"][0]
    args = calls.requests(LESSON, "term")["test_init_weights"][0]
    assert call.accept(want, want, args)
    layers = want["linear layers"]
    for forged in (None, {}, {"the same model returned": True}, {**want, "linear layers": layers[:1]},
                   {**want, "linear layers": [("a", 1.0, 0.0, 0.05)] * len(layers)},
                   {**want, "linear layers": [(torch.ones(3),) * 4] * len(layers)},
                   {**want, "the same model returned": 1}):
        assert not call.accept(forged, want, args)


def test_the_judge_sees_the_train_and_eval_mistakes():
    def training_mode_only(model, x):
        with torch.no_grad():
            out = model(x)
        return out, out

    def same_mask_twice(model, x):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return outputs(model, x)

    def graph_in_training_only(model, x):
        was_training = model.training
        train_out = model.train()(x).detach()
        with torch.no_grad():
            eval_out = model.eval()(x)
        model.train(was_training)
        return train_out, eval_out

    assert _lost(train_and_eval_outputs=lambda m, x: outputs(m, x, swap=True)) == [
        "test_train_and_eval_outputs"]
    assert _lost(train_and_eval_outputs=same_mask_twice) == ["test_train_and_eval_outputs"]
    assert _lost(train_and_eval_outputs=lambda m, x: outputs(m, x, graph=True)) == [
        "test_train_and_eval_no_graph"]
    assert _lost(train_and_eval_outputs=graph_in_training_only) == ["test_train_and_eval_no_graph"]
    assert _lost(train_and_eval_outputs=lambda m, x: outputs(m, x, restore=False)) == [
        "test_train_and_eval_mode_restored"]
    assert _lost(train_and_eval_outputs=training_mode_only) == [
        "test_train_and_eval_mode_restored", "test_train_and_eval_outputs"]


def test_the_train_and_eval_properties_refuse_forged_data_without_raising():
    call = next(call for call in calls.judged(LESSON) if call.grade_cell == "test_train_and_eval_outputs")
    want = calls.expected(solution_path(LESSON), LESSON, "term")[call.grade_cell][0]
    args = calls.requests(LESSON, "term")[call.grade_cell][0]
    assert call.accept(want, want, args)
    (first_train, first_eval), second = want["calls"]
    for forged in (None, {"calls": "x"}, {"calls": [second, second]},
                   {"calls": [(first_eval, first_eval), second]},
                   {"calls": [(first_train.double(), first_eval), second]},
                   {"calls": [(first_train, first_eval[:1]), second]}):
        assert not call.accept(forged, want, args)


def test_the_judge_sees_the_data_set_mistakes():
    assert _lost(ImageDataset=wrong("one short")) == ["test_dataset_length", "test_dataset_loader"]
    assert _lost(ImageDataset=wrong("float label")) == ["test_dataset_item", "test_dataset_loader"]
    assert _lost(ImageDataset=wrong("no transform")) == ["test_dataset_item", "test_dataset_lazy",
                                                         "test_dataset_loader"]
    assert _lost(ImageDataset=wrong("precomputed")) == ["test_dataset_lazy"]
    assert _lost(ImageDataset=wrong("cached")) == ["test_dataset_lazy"]
    assert _lost(ImageDataset=wrong("in order")) == ["test_dataset_item", "test_dataset_lazy",
                                                     "test_dataset_loader"]


def test_the_judge_sees_a_loss_cut_from_the_graph_or_through_the_sigmoid():
    def detached(logits, targets):
        with torch.no_grad():
            return stable(logits, targets)

    assert _lost(bce_with_logits=detached) == ["test_bce_gradient"]
    assert _lost(bce_with_logits=naive) == ["test_bce_gradient", "test_bce_large_logits"]


def test_the_outcomes_leave_the_global_random_state_alone():
    source = read_solution(LESSON)
    state = torch.get_rng_state()
    for call in calls.judged(LESSON):
        answer = calls.reference_answer(source, call)
        for args in calls.requests(LESSON, "term")[call.grade_cell]:
            calls.outcome_of(call, answer, args)
    assert torch.equal(torch.get_rng_state(), state)
