"""Lesson 03's checks: each passes a right answer and fails a typical wrong one with expected, got
and a hint; its harnesses (the mode probe, the torch.load recorder, the refused library MLP) record
and refuse what they should."""

import io
import itertools

import pytest
import torch
import torchvision
from check_messages import failure
from torch import nn

import course
from graders.lesson_checks import modules as lesson

pytestmark = pytest.mark.usefixtures("english")


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
    message = failure(lesson.check_mlp_structure, HiddenListMLP, [4, 8, 3], batch=5)
    assert "weight shapes" in message and "got: [] (list)" in message


def test_mlp_forward_fails_an_activation_after_the_last_layer_or_none_at_all():
    message = failure(lesson.check_mlp_forward, lambda sizes: ListMLP(sizes, relu_after_last=True))
    assert "weights set by hand" in message and "[3.0, 0.0]" in message
    assert "if you are still stuck: hint('mlp')" in message
    without_activations = failure(lesson.check_mlp_forward, lambda sizes: ListMLP(sizes, relu=False))
    assert "weights set by hand" in without_activations


def test_the_library_mlp_is_refused_inside_the_checks_and_works_outside():
    message = failure(lesson.check_mlp_structure, LibraryMLP, [4, 8, 3], batch=5)
    assert "torchvision.ops.MLP is not available in this exercise" in message
    assert LibraryMLP([4, 8, 3])(torch.randn(2, 4)).shape == (2, 3)


# Exercise 2 · ResidualBlock --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, hidden, skip=True, relu=True):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.skip, self.relu = skip, relu

    def forward(self, x):
        inner = self.fc1(x)
        inner = self.fc2(torch.relu(inner) if self.relu else inner)
        return x + inner if self.skip else inner


class SwappedBlock(Block):
    def __init__(self, dim, hidden):
        super().__init__(dim, hidden)
        self.fc1, self.fc2 = nn.Linear(dim, dim), nn.Linear(dim, dim)


def test_residual_checks_pass_a_right_block():
    lesson.check_residual_structure(Block, dim=6, hidden=10)
    lesson.check_residual_structure(Block, dim=1, hidden=1)
    lesson.check_residual_forward(Block)


def test_residual_structure_fails_wrong_shapes():
    assert "fc1.weight.shape" in failure(lesson.check_residual_structure, SwappedBlock, dim=6, hidden=10)


@pytest.mark.parametrize(("wrong", "case"), [
    (lambda dim, hidden: Block(dim, hidden, skip=False), "weights set by hand"),
    (lambda dim, hidden: Block(dim, hidden, relu=False), "weights set by hand"),
])
def test_residual_forward_fails_without_skip_or_activation(wrong, case):
    assert case in failure(lesson.check_residual_forward, wrong)


def test_residual_forward_fails_a_block_without_fc1():
    class Unnamed(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.first = nn.Linear(dim, hidden)

    assert "ResidualBlock(2, 3).fc1" in failure(lesson.check_residual_forward, Unnamed)


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

    assert "BatchNorm1d" in failure(lesson.check_count_parameters, with_buffers, seed=304)
    def as_tensor(model, trainable_only=False):
        return torch.tensor(count(model))

    assert "got: tensor(shape=()" in failure(lesson.check_count_parameters, as_tensor, seed=304)


def test_count_trainable_fails_ignoring_frozen_parameters():
    def everything(model, trainable_only=False):
        return count(model)

    message = failure(lesson.check_count_trainable, everything, seed=305)
    assert "trainable_only=True" in message and "frozen weights" in message


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


def test_save_weights_fails_pickling_the_whole_model():
    def whole_model(model, path):
        torch.save(model, path)

    message = failure(lesson.check_save_weights, whole_model, sizes=(6, 5, 2), seed=1)
    assert "UnpicklingError" in message


def test_load_weights_fails_returning_the_report_forgetting_map_location_or_loading_half():
    def report(model, path):
        return model.load_state_dict(torch.load(path, map_location="cpu"))

    assert "the same model object" in failure(lesson.check_load_weights, report, sizes=(6, 5, 2), seed=305)
    message = failure(lesson.check_load_weights, lambda model, path: load(model, path, map_location=None),
                      sizes=(6, 5, 2), seed=305)
    assert "map_location to the CPU" in message and "[None]" in message
    message = failure(lesson.check_load_is_strict, lambda model, path: load(model, path, strict=False))
    assert "should have raised" in message and "strict" in message


def test_recorded_loads_sees_map_location_by_name_or_position_and_puts_torch_load_back():
    real_load = torch.load
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(1)}, buffer)
    with lesson.recorded_loads() as calls:
        for options in ({"map_location": "cpu"}, {}):
            buffer.seek(0)
            assert torch.equal(torch.load(buffer, **options)["w"], torch.ones(1))
        buffer.seek(0)
        torch.serialization.load(buffer, "cpu")
    assert lesson.map_locations(calls) == ["cpu", None, "cpu"]
    assert torch.load is real_load and torch.serialization.load is real_load


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

    message = failure(lesson.check_init_weights, top_level_only)
    assert "2.0.weight.std()" in message and "hint('init_weights')" in message

    def xavier(model):
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                nn.init.xavier_normal_(layer.weight)
        return model

    assert "weight.std()" in failure(lesson.check_init_weights, xavier)


def test_init_biases_fails_forgotten_biases_other_layers_touched_or_nothing_returned():
    assert "0.bias" in failure(lesson.check_init_biases, lambda model: init(model, biases=False))

    def zero_every_vector(model):
        for parameter in model.parameters():
            if parameter.dim() == 1:
                nn.init.zeros_(parameter)
        return init(model)

    assert "not an nn.Linear: left alone" in failure(lesson.check_init_biases, zero_every_vector)
    assert "the same model object" in failure(lesson.check_init_biases, lambda model: None)


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
    assert "eval_out" in failure(lesson.check_train_and_eval_outputs, lambda m, x: outputs(m, x, swap=True))


def test_no_graph_fails_outputs_detached_after_building_the_graph():
    message = failure(lesson.check_no_graph, lambda m, x: outputs(m, x, graph=True))
    assert "on in 2 of 2 passes" in message


def test_mode_restored_fails_a_model_left_in_eval_mode():
    message = failure(lesson.check_mode_restored, lambda m, x: outputs(m, x, restore=False))
    assert "model.training [train" in message


def test_mode_probe_records_mode_and_grad_recording_per_call():
    probe = lesson.ModeProbe()
    probe(torch.ones(1))
    probe.eval()
    with torch.no_grad():
        probe(torch.ones(1))
    assert probe.calls == [(True, True), (False, False)]


# Language ---------------------------------------------------------------------------------------------

def test_messages_and_hints_follow_the_edition_language():
    course.set_language("es")
    message = failure(lesson.check_mode_restored, lambda m, x: outputs(m, x, restore=False))
    assert "esperado:" in message and "pista: quien llama a tu función" in message
    message = failure(lesson.check_mlp_structure, LibraryMLP, [4, 3], batch=2)
    assert "no está disponible en este ejercicio" in message
