"""Lesson 03 (modules), kernel side: the checks its grade cells call, and its hints.

Visible checks compare with what can be worked out without a reference implementation: weight
shapes and parameter counts from the sizes, small cases computed by hand, properties (a zeroed
layer, a dead hidden layer), statistics of an initialisation, and what a probe recorded while the
model ran; a loss the library already has is compared with the library's own, computed outside the
answer's run. The reference implementations stay in the hidden tests of the grade cells.
"""

import contextlib
import functools
import itertools
import math
import pickle
import tempfile
from pathlib import Path
from unittest import mock

import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torch.utils import data

from graders import checks
from graders.lesson_checks import concept_questions, lesson_hints

__all__ = ["HINTS", "MORE_HINTS", "SHORTCUTS", "check_bce_gradient", "check_bce_large_logits",
           "check_bce_values", "check_concepts", "check_count_parameters", "check_count_trainable",
           "check_dataset_in_a_loader", "check_dataset_item", "check_dataset_lazy", "check_dataset_length",
           "check_init_biases", "check_init_weights", "check_load_is_strict", "check_load_weights",
           "check_mlp_forward", "check_mlp_structure", "check_mode_restored", "check_no_graph",
           "check_residual_forward", "check_residual_structure", "check_save_weights",
           "check_train_and_eval_outputs", "grade_concepts", "show_questions"]

HINTS, MORE_HINTS = lesson_hints(__name__)
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# Library code that would answer an exercise in one call, switched off while its answer runs, by the
# check that runs it: torchvision's ready-made MLP, where the exercise is to build one; the data sets
# that already index tensors, where the exercise is to write __len__ and __getitem__ (building one, or
# inheriting its indexing, is refused); the loss on logits, where the exercise is to write it.
_READY_MADE_MLP = [(torchvision.ops.MLP, "__init__")]
_READY_MADE_DATASETS = [(data.TensorDataset, "__init__"), (data.TensorDataset, "__getitem__"),
                        (data.StackDataset, "__init__"), (data.StackDataset, "__getitem__")]
_READY_MADE_BCE = [(F, "binary_cross_entropy_with_logits"), (torch, "binary_cross_entropy_with_logits"),
                   (nn.BCEWithLogitsLoss, "forward"),
                   # log σ(z) and log(1 + eᶻ) already computed stably: the exercise's whole point
                   (F, "logsigmoid"), (F, "softplus"), (torch, "logaddexp"), (torch.Tensor, "logaddexp")]
SHORTCUTS = {"check_mlp_structure": _READY_MADE_MLP, "check_mlp_forward": _READY_MADE_MLP,
             **dict.fromkeys(["check_dataset_length", "check_dataset_item", "check_dataset_lazy",
                              "check_dataset_in_a_loader"], _READY_MADE_DATASETS),
             **dict.fromkeys(["check_bce_values", "check_bce_large_logits", "check_bce_gradient"],
                             _READY_MADE_BCE)}

_SAME_MODEL = checks.both("el mismo objeto model que recibió", "the same model object it was given")


def _linears(model) -> list:
    """(dotted name, layer) of every nn.Linear inside ``model``, in registration order."""
    return [(name or "model", layer) for name, layer in model.named_modules() if isinstance(layer, nn.Linear)]


def _check_same_object(result, original, *, name, hint) -> None:
    checks.check_true(result is original, name=name, expected=_SAME_MODEL, got=checks.describe(result),
                      hint=hint)


def _check_output(model, x, expected, *, name, hint) -> None:
    """``model(x)`` runs and comes close to ``expected``."""
    checks.check_close(checks.check_runs(model, x, name=name, hint=hint), expected, name=name, hint=hint)


@torch.no_grad()
def _set_layer(layer, weight, bias) -> None:
    """Overwrite a linear layer's weight and bias (nested lists or tensors)."""
    layer.weight.copy_(torch.as_tensor(weight))
    layer.bias.copy_(torch.as_tensor(bias))


# Exercise 1 · MLP ------------------------------------------------------------------------------------

def _build_mlp(mlp_class, sizes, check: str):
    """``mlp_class(sizes)``, with the shortcuts of ``check`` off and any exception reported as a failure."""
    __tracebackhide__ = True
    return checks.run_answer(mlp_class, sizes, name=f"MLP({sizes})", hint=HINTS["mlp"],
                             shortcuts=SHORTCUTS[check])


def _check_linear_shapes(model, sizes) -> None:
    expected = [(sizes[i + 1], sizes[i]) for i in range(len(sizes) - 1)]
    checks.check_equal([tuple(layer.weight.shape) for _, layer in _linears(model)], expected,
                       name=checks.both(f"formas de los pesos de las nn.Linear de MLP({sizes}), en orden",
                                        f"weight shapes of the nn.Linear layers of MLP({sizes}), in order"),
                       hint=HINTS["mlp"])


@checks.keeps_random_state
def check_mlp_structure(mlp_class, sizes, batch: int) -> None:
    """One registered nn.Linear per pair of neighbouring sizes, in order; the output has sizes[-1] columns."""
    __tracebackhide__ = True
    hint = HINTS["mlp"]
    model = _build_mlp(mlp_class, sizes, "check_mlp_structure")
    checks.check_type(model, nn.Module, name=f"MLP({sizes})", hint=hint)
    _check_linear_shapes(model, sizes)
    expected = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
    checks.check_equal(sum(p.numel() for p in model.parameters()), expected, hint=hint,
                       name=checks.both(f"número de parámetros registrados de MLP({sizes})",
                                        f"number of registered parameters of MLP({sizes})"))
    call = f"MLP({sizes})(torch.randn({batch}, {sizes[0]}))"
    output = checks.check_runs(model, torch.randn(batch, sizes[0]), name=call, hint=hint)
    checks.check_shape(output, (batch, sizes[-1]), name=call, hint=hint)


# Small MLPs with weights set by hand: (sizes, [(weight, bias) per linear layer], x, expected output).
# [2, 3, 2]: the second row has a negative hidden value (ReLU between) and a negative output (none after).
# [1, 2, 2, 1]: the second activation matters too.
_MLP_BY_HAND = [
    ([2, 3, 2],
     [([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], [0.0, 0.0, 0.0]),
      ([[1.0, 1.0, 1.0], [1.0, -1.0, 2.0]], [0.0, 1.0])],
     [[1.0, 2.0], [-1.0, 3.0]],
     [[3.0, 0.0], [3.0, -2.0]]),
    ([1, 2, 2, 1],
     [([[1.0], [-1.0]], [0.0, 0.0]),
      ([[1.0, -1.0], [-1.0, 1.0]], [0.0, 0.0]),
      ([[1.0, 1.0]], [-3.0])],
     [[2.0], [-1.0]],
     [[-1.0], [-2.0]]),
]


@checks.keeps_random_state
def check_mlp_forward(mlp_class) -> None:
    """Small cases computed by hand, and a zeroed last layer whose bias must come out untouched."""
    __tracebackhide__ = True
    hint = HINTS["mlp"]
    for sizes, values, x, expected in _MLP_BY_HAND:
        model = _build_mlp(mlp_class, sizes, "check_mlp_forward")
        _check_linear_shapes(model, sizes)
        for (_, layer), (weight, bias) in zip(_linears(model), values, strict=True):
            _set_layer(layer, weight, bias)
        _check_output(model, torch.tensor(x), torch.tensor(expected), hint=hint,
                      name=checks.both(f"MLP({sizes})(x) con pesos puestos a mano, x = {x}",
                                       f"MLP({sizes})(x) with weights set by hand, x = {x}"))
    sizes, bias = [5, 7, 4, 3], [-1.5, 0.5, -0.25]
    model = _build_mlp(mlp_class, sizes, "check_mlp_forward")
    _check_linear_shapes(model, sizes)
    _set_layer(_linears(model)[-1][1], torch.zeros(3, 4), bias)
    _check_output(model, torch.randn(6, sizes[0]), torch.tensor(bias).expand(6, 3), hint=hint,
                  name=checks.both(f"MLP({sizes})(x) con la última capa a cero y sesgo {bias} "
                                   "(nada se aplica después de ella)",
                                   f"MLP({sizes})(x) with the last layer zeroed and bias {bias} "
                                   "(nothing is applied after it)"))


# Exercise 2 · ResidualBlock --------------------------------------------------------------------------

def _build_block(block_class, dim: int, hidden: int):
    hint, label = HINTS["residual_block"], f"ResidualBlock({dim}, {hidden})"
    block = checks.check_runs(block_class, dim, hidden, name=label, hint=hint)
    checks.check_type(block, nn.Module, name=label, hint=hint)
    checks.check_type(getattr(block, "norm", None), nn.LayerNorm, name=f"{label}.norm", hint=hint)
    for part in ("fc1", "fc2"):
        checks.check_type(getattr(block, part, None), nn.Linear, name=f"{label}.{part}", hint=hint)
    return block


@checks.keeps_random_state
def check_residual_structure(block_class, dim: int, hidden: int) -> None:
    """norm works on vectors of size dim, fc1 goes from dim to hidden, fc2 back to dim, and all three are
    registered."""
    __tracebackhide__ = True
    hint, label = HINTS["residual_block"], f"ResidualBlock({dim}, {hidden})"
    block = _build_block(block_class, dim, hidden)
    checks.check_equal(tuple(block.norm.normalized_shape), (dim,), hint=hint,
                       name=f"{label}.norm.normalized_shape")
    for part, shape in (("fc1", (hidden, dim)), ("fc2", (dim, hidden))):
        checks.check_equal(tuple(getattr(block, part).weight.shape), shape, hint=hint,
                           name=f"{label}.{part}.weight.shape")
    expected = 2 * dim * hidden + hidden + dim + 2 * dim  # fc1, fc2, then norm's scale and shift
    checks.check_equal(sum(p.numel() for p in block.parameters()), expected, hint=hint,
                       name=checks.both(f"número de parámetros registrados de {label}",
                                        f"number of registered parameters of {label}"))


# ResidualBlock(2, 3) with weights set by hand: fc1 (weight, bias), fc2 (weight, bias), x, expected.
# norm keeps its starting scale 1 and shift 0: a row of two values normalises to [1, -1] or [-1, 1]
# (up to LayerNorm's eps, far inside the tolerance). Hidden values: [1, 0, 0] and [0, 1, 0], so the
# activation matters; skipping norm changes the second row, adding the normalised x changes both.
_RESIDUAL_BY_HAND = (
    ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.0, 0.0, -1.0]),
    ([[1.0, 0.0, 1.0], [0.0, 1.0, -1.0]], [0.5, 0.0]),
    [[1.0, -2.0], [0.0, 4.0]],
    [[2.5, -2.0], [0.5, 5.0]],
)


@checks.keeps_random_state
def check_residual_forward(block_class) -> None:
    """A case computed by hand; fc2 at zero gives back x (the raw x, not the normalised one); a dead
    hidden layer leaves x + fc2's bias."""
    __tracebackhide__ = True
    hint = HINTS["residual_block"]
    fc1, fc2, x, expected = _RESIDUAL_BY_HAND
    block = _build_block(block_class, 2, 3)
    _set_layer(block.fc1, *fc1)
    _set_layer(block.fc2, *fc2)
    _check_output(block, torch.tensor(x), torch.tensor(expected), hint=hint,
                  name=checks.both(f"ResidualBlock(2, 3)(x) con pesos puestos a mano, x = {x}",
                                   f"ResidualBlock(2, 3)(x) with weights set by hand, x = {x}"))

    block = _build_block(block_class, 5, 8)
    x = torch.randn(4, 3, 5)
    _set_layer(block.fc2, torch.zeros(5, 8), torch.zeros(5))
    _check_output(block, x, x, hint=hint,
                  name=checks.both("ResidualBlock(5, 8) con fc2 a cero, x de forma (4, 3, 5): "
                                   "debe devolver x",
                                   "ResidualBlock(5, 8) with fc2 set to zero, x of shape (4, 3, 5): "
                                   "must return x"))

    bias = torch.randn(5)
    _set_layer(block.fc1, torch.zeros(8, 5), torch.full((8,), -1.0))
    _set_layer(block.fc2, torch.randn(5, 8), bias)
    _check_output(block, x, x + bias, hint=hint,
                  name=checks.both("ResidualBlock(5, 8) con fc1 siempre negativa (la activación la anula): "
                                   "debe dar x + fc2.bias",
                                   "ResidualBlock(5, 8) with fc1 always negative (the activation kills it): "
                                   "must give x + fc2.bias"))


# Exercise 3 · count_parameters -----------------------------------------------------------------------

def _sizes(generator, n: int, low: int = 1, high: int = 40) -> list:
    return [int(size) for size in torch.randint(low, high, (n,), generator=generator)]


@checks.keeps_random_state
def check_count_parameters(count_parameters, seed: int) -> None:
    """Counts worked out from random sizes: buffers left out, a shared layer once, no parameters at all."""
    __tracebackhide__ = True
    hint = HINTS["count_parameters"]
    a, b, c = _sizes(checks.seeded_generator(seed), 3)
    shared = nn.Linear(a, a)
    cases = [
        (nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, c, bias=False)),
         f"Sequential(Linear({a}, {b}), BatchNorm1d({b}), ReLU(), Linear({b}, {c}, bias=False))",
         a * b + b + 2 * b + b * c),
        (nn.ReLU(), "ReLU()", 0),
        (nn.Sequential(shared, nn.Tanh(), shared),
         f"Sequential(shared, Tanh(), shared) [shared = Linear({a}, {a})]", a * a + a),
    ]
    for model, label, expected in cases:
        name = f"count_parameters({label})"
        got = checks.check_runs(count_parameters, model, name=name, hint=hint)
        checks.check_equal(got, expected, name=name, hint=hint)


@checks.keeps_random_state
def check_count_trainable(count_parameters, seed: int) -> None:
    """Random layers with random weights or biases frozen: only what still requires grad counts."""
    __tracebackhide__ = True
    hint = HINTS["count_parameters.trainable"]
    generator = checks.seeded_generator(seed)
    sizes = _sizes(generator, 4, high=30)
    layers = [nn.Linear(sizes[i], sizes[i + 1]) for i in range(3)]
    frozen_weights, frozen_biases = (torch.randint(0, 2, (2, 3), generator=generator) == 1).tolist()
    frozen_weights[0] = True  # at least one frozen tensor, so that counting everything is wrong
    for layer, weight_frozen, bias_frozen in zip(layers, frozen_weights, frozen_biases, strict=True):
        layer.weight.requires_grad_(not weight_frozen)
        layer.bias.requires_grad_(not bias_frozen)
    model = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.BatchNorm1d(sizes[2]), layers[2])
    weights = [sizes[i] * sizes[i + 1] for i in range(3)]
    biases = sizes[1:]
    norm = 2 * sizes[2]  # BatchNorm's weight and bias, never frozen here
    trainable = norm + sum(w for w, frozen in zip(weights, frozen_weights, strict=True) if not frozen)
    trainable += sum(b for b, frozen in zip(biases, frozen_biases, strict=True) if not frozen)
    total = norm + sum(weights) + sum(biases)
    for trainable_only, expected in ((True, trainable), (False, total)):
        call = f"count_parameters(model, trainable_only={trainable_only})"
        got = checks.check_runs(count_parameters, model, trainable_only=trainable_only, name=call, hint=hint)
        checks.check_equal(got, expected, hint=hint, name=checks.both(
            f"{call} [lineales {sizes}, pesos congelados {frozen_weights}, "
            f"sesgos congelados {frozen_biases}]",
            f"{call} [linear {sizes}, frozen weights {frozen_weights}, frozen biases {frozen_biases}]"))


# Exercise 4 · save_weights / load_weights ------------------------------------------------------------

def _model_with_buffers(sizes, seed: int):
    """Linear, BatchNorm1d, ReLU, Linear of these sizes, drawn from ``seed``; a pass in train mode moves
    BatchNorm's buffers."""
    a, b, c = sizes
    with checks.seeded(seed):
        model = nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, c))
        model(torch.randn(16, a))
    return model


def _label(sizes) -> str:
    a, b, c = sizes
    return f"Sequential(Linear({a}, {b}), BatchNorm1d({b}), ReLU(), Linear({b}, {c}))"


def _read_state(path, call: str):
    """What a plain torch.load (weights_only=True) reads from ``path``, or a failed check saying why not."""
    try:
        return torch.load(path)
    except pickle.UnpicklingError:
        got = checks.both("torch.load(path) lanza UnpicklingError (¿se guardó el modelo entero?)",
                          "torch.load(path) raises UnpicklingError (was the whole model saved?)")
    checks.check_true(False, name=checks.both(f"torch.load(path) tras {call}",
                                              f"torch.load(path) after {call}"),
                      expected=checks.both("un state_dict legible con weights_only=True",
                                           "a state_dict readable with weights_only=True"),
                      got=got, hint=HINTS["save_load_weights"])


def _check_same_state(got: dict, expected: dict, label: str, hint) -> None:
    """Same keys, and every tensor equal to the last bit (buffers included)."""
    checks.check_equal(sorted(got), sorted(expected), hint=hint,
                       name=checks.both(f"claves de {label}", f"keys of {label}"))
    for key, tensor in expected.items():
        checks.check_close(got[key], tensor, rtol=0.0, atol=0.0, name=f"{label}[{key!r}]", hint=hint)


@checks.keeps_random_state
def check_save_weights(save_weights, sizes, seed: int) -> None:
    """The file holds the state_dict, readable with weights_only=True, every tensor exact."""
    __tracebackhide__ = True
    hint = HINTS["save_load_weights"]
    model = _model_with_buffers(sizes, seed)
    call = f"save_weights({_label(sizes)}, path)"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "weights.pt"
        checks.check_runs(save_weights, model, path, name=call, hint=hint)
        checks.check_true(path.is_file(), name=call, hint=hint,
                          expected=checks.both("un archivo en path", "a file at path"),
                          got=checks.both("ningún archivo", "no file"))
        saved = _read_state(path, call)
    checks.check_type(saved, dict, name=f"torch.load(path) after {call}", hint=hint)
    _check_same_state(saved, model.state_dict(), "torch.load(path)", hint)


@contextlib.contextmanager
def _recorded_loads():
    """Every torch.load call made inside the block, as a list of (args, kwargs); loading still works."""
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_load(*args, **kwargs)

    with mock.patch.object(torch, "load", spy), mock.patch.object(torch.serialization, "load", spy):
        yield calls


def _map_locations(calls) -> list:
    """The map_location of each recorded torch.load call (its second positional argument, or by name)."""
    return [kwargs.get("map_location", args[1] if len(args) > 1 else None) for args, kwargs in calls]


@checks.keeps_random_state
def check_load_weights(load_weights, sizes, seed: int) -> None:
    """Loading a saved state_dict into another model of the same shape: same tensors, same outputs."""
    __tracebackhide__ = True
    hint = HINTS["save_load_weights.load"]
    source = _model_with_buffers(sizes, seed)
    target = _model_with_buffers(sizes, seed + 1)
    call = f"load_weights({_label(sizes)}, path)"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "weights.pt"
        torch.save(source.state_dict(), path)
        with _recorded_loads() as calls:
            result = checks.check_runs(load_weights, target, path, name=call, hint=hint)
    _check_same_object(result, target, name=call, hint=hint)
    _check_same_state(target.state_dict(), source.state_dict(), f"{call}.state_dict()", hint)
    x = torch.randn(8, sizes[0], generator=checks.seeded_generator(seed))
    checks.check_close(target.train(False)(x).detach(), source.train(False)(x).detach(), hint=hint,
                       name=checks.both("salidas del modelo cargado y del original (modo evaluación)",
                                        "outputs of the loaded model and of the original (evaluation mode)"))
    locations = _map_locations(calls)
    checks.check_true(bool(locations) and None not in locations, name=call, hint=hint,
                      expected=checks.both("el archivo leído con un map_location hacia la CPU",
                                           "the file read with a map_location to the CPU"),
                      got=checks.both(f"lecturas con torch.load y su map_location: {locations}",
                                      f"torch.load reads and their map_location: {locations}"))


@checks.keeps_random_state
def check_load_is_strict(load_weights) -> None:
    """A file that lacks some of the model's keys must not load half of them."""
    __tracebackhide__ = True
    sizes = (4, 8, 3)
    bigger = nn.Sequential(*_model_with_buffers(sizes, 0), nn.Linear(3, 3))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "weights.pt"
        torch.save(_model_with_buffers(sizes, 1).state_dict(), path)
        checks.check_raises(load_weights, RuntimeError, bigger, path, hint=HINTS["save_load_weights.strict"],
                            name=checks.both("load_weights en un modelo con claves que el archivo no tiene",
                                             "load_weights into a model with keys the file lacks"))


# Exercise 5 · init_weights ---------------------------------------------------------------------------

def _deep_model():
    """Big linear layers (for the statistics), one of them nested, and a BatchNorm to leave alone."""
    return nn.Sequential(nn.Linear(1000, 400), nn.ReLU(),
                         nn.Sequential(nn.Linear(400, 1200), nn.BatchNorm1d(1200)))


def _small_model():
    """Linear layers with and without bias, nested, between normalisation layers."""
    return nn.Sequential(nn.Linear(30, 20), nn.BatchNorm1d(20), nn.ReLU(),
                         nn.Sequential(nn.Linear(20, 5, bias=False), nn.LayerNorm(5), nn.Linear(5, 2)))


def _initialise(init_weights, model, seed: int, hint) -> None:
    """Run init_weights from a fixed seed; it must hand back the model it was given."""
    with checks.seeded(seed):
        result = checks.check_runs(init_weights, model, name="init_weights(model)", hint=hint)
    _check_same_object(result, model, name="init_weights(model)", hint=hint)


def _check_kaiming(weight, label: str) -> None:
    hint = HINTS["init_weights"]
    weight = weight.detach()
    fan_in = weight.shape[1]
    std = math.sqrt(2 / fan_in)
    checks.check_close(weight.std().item(), std, rtol=0.03, atol=0.0, hint=hint,
                       name=f"{label}.weight.std() [fan_in={fan_in}, sqrt(2/fan_in)={std:.4f}]")
    checks.check_close(weight.mean().item(), 0.0, rtol=0.0, atol=0.05 * std, name=f"{label}.weight.mean()",
                       hint=hint)
    beyond = (weight.abs() > 2 * std).double().mean().item()
    checks.check_close(beyond, 0.0455, rtol=0.0, atol=0.01, hint=hint,
                       name=checks.both(f"fracción de |{label}.weight| > 2·sqrt(2/fan_in) (normal: 4.55 %)",
                                        f"fraction of |{label}.weight| > 2·sqrt(2/fan_in) (normal: 4.55 %)"))


@checks.keeps_random_state
def check_init_weights(init_weights, model=None, seed: int = 306) -> None:
    """Every nn.Linear's weight, at any depth, has Kaiming's (fan_in, ReLU) statistics."""
    __tracebackhide__ = True
    model = _deep_model() if model is None else model
    _initialise(init_weights, model, seed, HINTS["init_weights"])
    for name, layer in _linears(model):
        _check_kaiming(layer.weight, name)


@torch.no_grad()
def _scramble(parameters) -> None:
    """Random values, so that a layer left alone is told apart from one reset to its defaults."""
    for parameter in parameters:
        parameter.copy_(torch.randn_like(parameter))


def _other_parameters(model) -> dict:
    """Parameters of the layers that are not nn.Linear, by dotted name."""
    return {f"{name}.{key}".lstrip("."): parameter for name, layer in model.named_modules()
            if not isinstance(layer, nn.Linear) for key, parameter in layer.named_parameters(recurse=False)}


@checks.keeps_random_state
def check_init_biases(init_weights, model=None, seed: int = 308) -> None:
    """Linear biases (where there is one) at zero, other layers untouched, the same model returned."""
    __tracebackhide__ = True
    hint = HINTS["init_weights.others"]
    model = _small_model() if model is None else model
    others = _other_parameters(model)
    _scramble(others.values())
    before = {name: parameter.detach().clone() for name, parameter in others.items()}
    _initialise(init_weights, model, seed, hint)
    for name, layer in _linears(model):
        if layer.bias is not None:
            checks.check_close(layer.bias.detach(), torch.zeros_like(layer.bias), name=f"{name}.bias",
                               hint=hint)
    for name, parameter in others.items():
        checks.check_close(parameter.detach(), before[name], rtol=0.0, atol=0.0, hint=hint,
                           name=checks.both(f"{name} (no es una nn.Linear: no se toca)",
                                            f"{name} (not an nn.Linear: left alone)"))


# Exercise 6 · train_and_eval_outputs -----------------------------------------------------------------

class _GradProbe(nn.Module):
    """Lets its input through and records, for each call, whether autograd records. A deep copy of
    it (an answer may run a copy of the model) records into the same list."""

    def __init__(self, recording=None):
        super().__init__()
        self.recording = [] if recording is None else recording

    def __deepcopy__(self, memo):
        return _GradProbe(self.recording)

    def forward(self, x):
        self.recording.append(torch.is_grad_enabled())
        return x


def _outputs(function, model, x, label: str, hint):
    """The pair the function returns, or a failed check that says why it is not one."""
    call = f"train_and_eval_outputs({label}, x)"
    result = checks.check_runs(function, model, x, name=call, hint=hint)
    checks.check_type(result, tuple, name=call, hint=hint)
    checks.check_equal(len(result), 2, name=f"len({call})", hint=hint)
    return result


@checks.keeps_random_state
def check_train_and_eval_outputs(function, model=None, x=None, seed: int = 307) -> None:
    """A model ending in Dropout(p): eval_out is what reaches the Dropout; train_out zeroes about a
    fraction p of it and scales the rest by 1 / (1 - p), with a new mask on every call."""
    __tracebackhide__ = True
    hint = HINTS["train_and_eval_outputs"]
    with checks.seeded(seed):  # the model, x and both calls' Dropout masks
        model = nn.Sequential(nn.Linear(20, 200), nn.Dropout(0.5)) if model is None else model
        x = torch.randn(8, 20) if x is None else x
        p = model[-1].p
        label = f"Sequential(..., Dropout({p}))"
        before_dropout = model[:-1](x).detach()
        first_train, first_eval = _outputs(function, model, x, label, hint)
        checks.check_close(first_eval, before_dropout, hint=hint, name=checks.both(
            f"eval_out [{label}]: en evaluación Dropout deja pasar la entrada",
            f"eval_out [{label}]: in evaluation Dropout lets its input through"))
        checks.check_shape(first_train, tuple(before_dropout.shape), name=f"train_out [{label}]", hint=hint)
        kept = first_train != 0
        survivors = checks.both(f"valores que Dropout({p}) conserva en train_out (entrada / (1 - p))",
                                f"values Dropout({p}) keeps in train_out (input / (1 - p))")
        checks.check_close(first_train[kept].detach(), before_dropout[kept] / (1 - p), name=survivors,
                           hint=hint)
        checks.check_close(1 - kept.double().mean().item(), p, rtol=0.0, atol=0.1, hint=hint,
                           name=checks.both(f"fracción de ceros en train_out [Dropout({p})]",
                                            f"fraction of zeros in train_out [Dropout({p})]"))
        second_train, second_eval = _outputs(function, model, x, label, hint)
    checks.check_true(not torch.equal(second_train, first_train), hint=hint,
                      name=checks.both("train_out de dos llamadas", "train_out of two calls"),
                      expected=checks.both("distintos (Dropout sortea otra máscara)",
                                           "different (Dropout draws a new mask)"),
                      got=checks.both("idénticos", "identical"))
    checks.check_close(second_eval, first_eval, hint=hint,
                       name=checks.both("eval_out de dos llamadas", "eval_out of two calls"))


@checks.keeps_random_state
def check_no_graph(function, seed: int = 309) -> None:
    """While the model runs inside the function, autograd records nothing; neither output requires grad."""
    __tracebackhide__ = True
    hint = HINTS["train_and_eval_outputs.no_graph"]
    probe = _GradProbe()
    with checks.seeded(seed):
        model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), probe)
        outputs = _outputs(function, model, torch.randn(4, 6),
                           "Sequential(Linear(6, 6), Dropout(0.5), probe)", hint)
    recording = probe.recording
    checks.check_true(bool(recording) and not any(recording), hint=hint,
                      name=checks.both("autograd mientras el modelo calcula",
                                       "autograd while the model computes"),
                      expected=checks.both("desactivado en cada pasada hacia delante",
                                           "off in every forward pass"),
                      got=checks.both(f"activado en {sum(recording)} de {len(recording)} pasadas",
                                      f"on in {sum(recording)} of {len(recording)} passes"))
    for name, output in zip(("train_out", "eval_out"), outputs, strict=True):
        checks.check_equal(getattr(output, "requires_grad", None), False, name=f"{name}.requires_grad",
                           hint=hint)


@checks.keeps_random_state
def check_mode_restored(function) -> None:
    """The model runs in both modes inside the function (both outputs need it), and the model, and
    every submodule, ends in the mode it started in. A function that never runs the model has
    switched nothing, and restored nothing either."""
    __tracebackhide__ = True
    hint = HINTS["train_and_eval_outputs.mode"]
    model = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.3), nn.Sequential(nn.Linear(5, 2), nn.Dropout(0.1)))
    x = torch.randn(4, 5)
    layers = {"model[1]": model[1], "model[2][1]": model[2][1]}
    for start in (False, True, False):
        model.train(start)
        mode = "train" if start else "eval"
        seen, handles = checks.modes_seen(layers)
        try:
            checks.check_runs(function, model, x, name="train_and_eval_outputs(model, x)", hint=hint)
        finally:
            for handle in handles:
                handle.remove()
        for name in layers:
            flags = [training for key, training in seen if key == name]
            checks.check_true(True in flags and False in flags, hint=hint,
                              name=checks.both(f"{name} (Dropout) durante train_and_eval_outputs [{mode}]",
                                               f"{name} (Dropout) during train_and_eval_outputs [{mode}]"),
                              expected=checks.both("una pasada en modo entrenamiento y otra en evaluación",
                                                   "a pass in training mode and one in evaluation mode"),
                              got=checks.both(f"{flags.count(True)} en entrenamiento, "
                                              f"{flags.count(False)} en evaluación",
                                              f"{flags.count(True)} in training, {flags.count(False)} in "
                                              "evaluation"))
        for name, layer in (("model", model), ("model[2][1]", model[2][1])):
            checks.check_equal(layer.training, start, hint=hint,
                               name=f"{name}.training [{mode} → train_and_eval_outputs]")


# Exercise 7 · ImageDataset ---------------------------------------------------------------------------

def _random_images(generator, n: int, shape) -> tuple:
    """``n`` uint8 images of ``shape`` and ``n`` labels among 10 classes, drawn from ``generator``."""
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, 10, (n,), generator=generator)


def _random_size(generator, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=generator))


def _random_shape(generator) -> tuple[int, int]:
    """An image's (height, width), each from 2 to 8."""
    return _random_size(generator, 2, 9), _random_size(generator, 2, 9)


def _dataset_case(generator, n=None, shape=None) -> tuple:
    """``(n, shape, images, labels)``: the given size and shape, or drawn, and the data drawn."""
    n = _random_size(generator, 5, 40) if n is None else n
    shape = _random_shape(generator) if shape is None else shape
    return n, shape, *_random_images(generator, n, shape)


def _scaled(image):
    """The check's transform: a channel first and float values in [0, 1], so that the batches show it."""
    return image.unsqueeze(0).float() / 255


class _CountingTransform:
    """A transform that keeps a copy of every image it is given, and returns it scaled to [0, 1]."""

    def __init__(self):
        self.seen = []

    def __call__(self, image):
        self.seen.append(image.clone())
        return _scaled(image)


def _dataset_label(n: int, shape, transform: str) -> str:
    return f"ImageDataset(images {(n, *shape)}, labels ({n},), transform={transform})"


def _build_dataset(dataset_class, images, labels, transform, label: str, hint):
    """``dataset_class(images, labels, transform=...)``, or (with ``transform`` None) without it."""
    extra = {} if transform is None else {"transform": transform}
    return checks.check_runs(dataset_class, images, labels, name=label, hint=hint, **extra)


def _read(dataset, index: int, label: str, hint):
    """``dataset[index]``, checked to be a pair."""
    call = f"{label}[{index}]"
    item = checks.check_runs(lambda: dataset[index], name=call, hint=hint)
    checks.check_type(item, tuple, name=call, hint=hint)
    checks.check_equal(len(item), 2, name=f"len({call})", hint=hint)
    return item


@checks.keeps_random_state
def check_dataset_length(dataset_class, sizes=None) -> None:
    """``len(dataset)`` is the number of images, for sizes drawn anew each run, with or without a
    transform."""
    __tracebackhide__ = True
    hint = HINTS["image_dataset"]
    generator = checks.fresh_generator()
    sizes = (1, _random_size(generator, 2, 80)) if sizes is None else sizes
    with checks.shortcuts_off(SHORTCUTS["check_dataset_length"], dataset_class):
        for n in sizes:
            shape = _random_shape(generator)
            for transform, name in ((None, "None"), (_scaled, "f")):
                label = _dataset_label(n, shape, name)
                images, labels = _random_images(generator, n, shape)
                dataset = _build_dataset(dataset_class, images, labels, transform, label, hint)
                got = checks.check_runs(len, dataset, name=f"len({label})", hint=hint)
                checks.check_equal(got, n, name=f"len({label})", hint=hint)


def _is_integer(value) -> bool:
    """A Python int (as torchvision's data sets give) or a 0-dim integer tensor (as TensorDataset
    gives): the DataLoader batches either into an int64 tensor."""
    if torch.is_tensor(value):
        return value.dim() == 0 and not value.is_floating_point() and not value.is_complex() \
            and value.dtype is not torch.bool
    return type(value) is int


def _check_item(item, image, label: int, call: str, hint) -> None:
    """The pair read is (image, label): the image exactly, the label an integer."""
    checks.check_close(item[0], image, rtol=0.0, atol=0.0, hint=hint,
                       name=checks.both(f"{call}[0] (la imagen)", f"{call}[0] (the image)"))
    name = checks.both(f"{call}[1] (la etiqueta, un entero)", f"{call}[1] (the label, an integer)")
    checks.check_true(_is_integer(item[1]), name=name, expected=checks.both(
        "int, o un tensor entero de 0 dimensiones", "int, or a 0-dim integer tensor"),
        got=checks.describe(item[1]), hint=hint)
    checks.check_equal(int(item[1]), label, name=name, hint=hint)


@checks.keeps_random_state
def check_dataset_item(dataset_class, n=None, shape=None) -> None:
    """``dataset[i]`` is (the i-th image, the i-th label, an integer): the image as stored without a
    transform, and passed through the transform with one; data drawn anew each run."""
    __tracebackhide__ = True
    hint = HINTS["image_dataset"]
    generator = checks.fresh_generator()
    n, shape, images, labels = _dataset_case(generator, n, shape)
    indices = sorted({0, n - 1, _random_size(generator, 0, n)})
    with checks.shortcuts_off(SHORTCUTS["check_dataset_item"], dataset_class):
        for transform, name, expected in ((None, "None", lambda image: image), (_scaled, "f", _scaled)):
            label = _dataset_label(n, shape, name)
            dataset = _build_dataset(dataset_class, images, labels, transform, label, hint)
            for index in indices:
                item = _read(dataset, index, label, hint)
                _check_item(item, expected(images[index]), int(labels[index]), f"{label}[{index}]", hint)


@checks.keeps_random_state
def check_dataset_lazy(dataset_class, n=None, shape=None) -> None:
    """The transform runs when an item is read, once per read, on that item's image alone: never
    while the data set is built or measured."""
    __tracebackhide__ = True
    hint = HINTS["image_dataset.lazy"]
    generator = checks.fresh_generator()
    n, shape, images, labels = _dataset_case(generator, n, shape)
    transform = _CountingTransform()
    label = _dataset_label(n, shape, "f")
    with checks.shortcuts_off(SHORTCUTS["check_dataset_lazy"], dataset_class):
        dataset = _build_dataset(dataset_class, images, labels, transform, label, hint)
        checks.check_runs(len, dataset, name=f"len({label})", hint=hint)
        checks.check_equal(len(transform.seen), 0, hint=hint, name=checks.both(
            f"llamadas a transform al construir {label} y medir su len()",
            f"calls to transform while building {label} and taking its len()"))
        index = _random_size(generator, 0, n)
        for reads, position in enumerate((index, n - 1 - index, index), start=1):
            item = _read(dataset, position, label, hint)
            checks.check_equal(len(transform.seen), reads, hint=hint, name=checks.both(
                f"llamadas a transform tras leer {reads} elemento(s), el último {label}[{position}]",
                f"calls to transform after reading {reads} item(s), the last {label}[{position}]"))
            checks.check_close(transform.seen[-1], images[position], rtol=0.0, atol=0.0, hint=hint,
                               name=checks.both(f"la imagen que recibe transform al leer {label}[{position}]",
                                                f"the image transform is given when {label}[{position}] "
                                                "is read"))
            checks.check_close(item[0], _scaled(images[position]), rtol=0.0, atol=0.0, hint=hint,
                               name=f"{label}[{position}][0]")


def _epoch(loader, label: str, hint) -> list:
    """Every batch of one pass over ``loader``, as (inputs, labels) pairs."""
    batches = checks.check_runs(list, loader, name=checks.both(f"una época de DataLoader({label})",
                                                               f"an epoch of DataLoader({label})"), hint=hint)
    for batch in batches:
        checks.check_true(isinstance(batch, (list, tuple)) and len(batch) == 2, hint=hint,
                          name=checks.both(f"un lote de DataLoader({label})",
                                           f"a batch of DataLoader({label})"),
                          expected=checks.both("un par (entradas, etiquetas)", "an (inputs, labels) pair"),
                          got=checks.describe(batch))
    return batches


def _check_batch_shapes(batches, n: int, batch_size: int, shape, label: str, hint) -> None:
    """Full batches, then the rest; inputs (b, 1, *shape) float32, labels (b,) int64."""
    expected = [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    sizes = [len(labels) if isinstance(labels, torch.Tensor) else None for _, labels in batches]
    loader = f"DataLoader({label}, batch_size={batch_size})"
    checks.check_equal(sizes, expected, hint=hint, name=checks.both(f"tamaños de los lotes de {loader}",
                                                                    f"batch sizes of {loader}"))
    for (inputs, labels), size in zip(batches, expected, strict=True):
        name = checks.both("entradas de un lote", "a batch's inputs")
        checks.check_shape(inputs, (size, 1, *shape), name=name, hint=hint)
        checks.check_dtype(inputs, torch.float32, name=name, hint=hint)
        checks.check_dtype(labels, torch.int64, name=checks.both("etiquetas de un lote", "a batch's labels"),
                           hint=hint)


@checks.keeps_random_state
def check_dataset_in_a_loader(dataset_class, n=None, batch_size=None) -> None:
    """In a shuffling DataLoader: batches of the right shapes, and every item exactly once per epoch,
    each image with its own label, in a new order each epoch."""
    __tracebackhide__ = True
    hint = HINTS["image_dataset.loader"]
    generator = checks.fresh_generator()
    n = _random_size(generator, 20, 60) if n is None else n
    batch_size = _random_size(generator, 3, 9) if batch_size is None else batch_size
    shape = _random_shape(generator)
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=generator)
    labels = torch.randperm(n, generator=generator)  # one label per item: a batch's labels name its items
    label = _dataset_label(n, shape, "f")
    orders = []
    with checks.shortcuts_off(SHORTCUTS["check_dataset_in_a_loader"], dataset_class):
        dataset = _build_dataset(dataset_class, images, labels, _scaled, label, hint)
        shuffling = checks.seeded_generator(_random_size(generator, 0, 2**31))
        loader = checks.check_runs(data.DataLoader, dataset, batch_size=batch_size, shuffle=True,
                                   generator=shuffling, hint=hint,
                                   name=f"DataLoader({label}, batch_size={batch_size}, shuffle=True)")
        for epoch in (1, 2):
            batches = _epoch(loader, label, hint)
            _check_batch_shapes(batches, n, batch_size, shape, label, hint)
            order = torch.cat([labels_ for _, labels_ in batches])
            seen = checks.both(f"etiquetas vistas en la época {epoch}, ordenadas (una por elemento)",
                               f"labels seen in epoch {epoch}, sorted (one per item)")
            checks.check_equal(sorted(order.tolist()), list(range(n)), name=seen, hint=hint)
            items = torch.argsort(labels)[order]  # the item each label belongs to
            expected = torch.stack([_scaled(images[item]) for item in items])
            checks.check_close(torch.cat([inputs for inputs, _ in batches]), expected, rtol=0.0, atol=0.0,
                               hint=hint,
                               name=checks.both(f"imágenes de la época {epoch}, junto a sus etiquetas",
                                                f"images of epoch {epoch}, next to their labels"))
            orders.append(items.tolist())
    checks.check_true(orders[0] != orders[1] and orders[0] != list(range(n)), hint=hint,
                      name=checks.both("orden de los elementos en dos épocas con shuffle=True",
                                       "order of the items in two epochs with shuffle=True"),
                      expected=checks.both("dos órdenes aleatorios distintos", "two different random orders"),
                      got=checks.both(f"elementos {orders[0][:8]}… y {orders[1][:8]}…",
                                      f"items {orders[0][:8]}… and {orders[1][:8]}…"))


# Exercise 8 · bce_with_logits ------------------------------------------------------------------------

# float32 answers against the library's loss computed in float64: a few units in the last place.
_BCE_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def _library_bce(logits, targets):
    """The library's loss (mean) and its gradient with respect to the logits, in float64, as float32."""
    logits = logits.detach().double().requires_grad_(True)
    loss = F.binary_cross_entropy_with_logits(logits, targets.double())
    (gradient,) = torch.autograd.grad(loss, logits)
    return loss.detach().float(), gradient.float()


def _call(logits, targets) -> str:
    shown = (lambda t: f"tensor({t.tolist()})") if logits.numel() <= 6 else (lambda t: f"<{tuple(t.shape)}>")
    return f"bce_with_logits({shown(logits)}, {shown(targets)})"


def _bce(answer, logits, targets, check: str, hint):
    """The answer's loss, shortcuts off, checked to be a 0-dim float32 tensor."""
    call = _call(logits, targets)
    loss = checks.run_answer(answer, logits, targets, name=call, hint=hint, shortcuts=SHORTCUTS[check])
    checks.check_shape(loss, (), name=call, hint=hint)
    checks.check_dtype(loss, torch.float32, name=call, hint=hint)
    return loss


def _ordinary_logits(generator, shape) -> tuple:
    """Logits between −4 and 4, where σ(z) is still far from rounding to 0 or 1 (so the formula
    through the sigmoid is right there too), and 0/1 targets."""
    logits = torch.rand(shape, generator=generator) * 8 - 4
    return logits, torch.randint(0, 2, shape, generator=generator).float()


@checks.keeps_random_state
def check_bce_values(bce_with_logits, shape=None) -> None:
    """Logit 0 gives log 2 for either target; ordinary logits give the library's value."""
    __tracebackhide__ = True
    hint = HINTS["bce_with_logits"]
    generator = checks.fresh_generator()
    logits, targets = torch.zeros(2), torch.tensor([0.0, 1.0])
    got = _bce(bce_with_logits, logits, targets, "check_bce_values", hint)
    checks.check_close(got, torch.tensor(math.log(2)), hint=hint, **_BCE_TOLERANCE,
                       name=checks.both(f"{_call(logits, targets)}: σ(0) = 1/2, pérdida log 2",
                                        f"{_call(logits, targets)}: σ(0) = 1/2, loss log 2"))
    shapes = [(_random_size(generator, 5, 40),), (3, 4)] if shape is None else [shape]
    for size in shapes:
        logits, targets = _ordinary_logits(generator, size)
        got = _bce(bce_with_logits, logits, targets, "check_bce_values", hint)
        checks.check_close(got, _library_bce(logits, targets)[0], name=_call(logits, targets), hint=hint,
                           **_BCE_TOLERANCE)


def _large_logits(generator) -> list:
    """±100 and ±1000, and two magnitudes drawn between 20 and 2000 with random signs."""
    drawn = (torch.rand(2, generator=generator) * (math.log(2000) - math.log(20)) + math.log(20)).exp()
    signs = torch.randint(0, 2, (2,), generator=generator) * 2 - 1
    return [100.0, -100.0, 1000.0, -1000.0, *(drawn * signs).tolist()]


@checks.keeps_random_state
def check_bce_large_logits(bce_with_logits, logits=None) -> None:
    """Each large logit alone, with either target, gives the library's finite value; so does a batch
    mixing them with ordinary logits."""
    __tracebackhide__ = True
    hint = HINTS["bce_with_logits.large"]
    generator = checks.fresh_generator()
    logits = _large_logits(generator) if logits is None else logits
    for logit in logits:
        for target in (0.0, 1.0):
            one, label = torch.tensor([logit]), torch.tensor([target])
            got = _bce(bce_with_logits, one, label, "check_bce_large_logits", hint)
            checks.check_close(got, _library_bce(one, label)[0], name=_call(one, label), hint=hint,
                               **_BCE_TOLERANCE)
    ordinary, targets = _ordinary_logits(generator, (len(logits),))
    mixed = torch.cat([torch.tensor(logits), ordinary])
    targets = torch.cat([torch.randint(0, 2, (len(logits),), generator=generator).float(), targets])
    got = _bce(bce_with_logits, mixed, targets, "check_bce_large_logits", hint)
    checks.check_close(got, _library_bce(mixed, targets)[0], hint=hint, **_BCE_TOLERANCE,
                       name=f"bce_with_logits(tensor({mixed.tolist()}), tensor({targets.tolist()}))")


@checks.keeps_random_state
def check_bce_gradient(bce_with_logits, shape=None) -> None:
    """Autograd through the answer gives (σ(z) − y) / number of elements, on ordinary and large logits."""
    __tracebackhide__ = True
    hint = HINTS["bce_with_logits.gradient"]
    generator = checks.fresh_generator()
    ordinary, ordinary_targets = _ordinary_logits(generator, shape or (_random_size(generator, 5, 30),))
    large = torch.tensor(_large_logits(generator))
    for logits, targets in ((ordinary, ordinary_targets),
                            (large, torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])),
                            (large, torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]))):
        leaf = logits.clone().requires_grad_(True)
        loss = _bce(bce_with_logits, leaf, targets, "check_bce_gradient", hint)
        call = _call(logits, targets)
        checks.check_runs(loss.backward, name=f"{call}.backward()", hint=hint)
        checks.check_close(leaf.grad, _library_bce(logits, targets)[1], rtol=1e-5, atol=1e-7, hint=hint,
                           name=checks.both(f"gradiente de {call} respecto a los logits: (σ(z) − y) / N",
                                            f"gradient of {call} with respect to the logits: (σ(z) − y) / N"))


# -------------------------------------------------------------------- decided by the judge
# When a class is graded, these exercises' points also need the student's answer to give what the
# reference gives on inputs the judge draws from the class's secret (graders/judge/calls.py). A class
# or a function that works on a model is judged by an outcome: it builds what the answer needs from
# plain arguments (the sizes, the weights, a seed), runs the answer and returns plain data about what
# happened. The library shortcuts stay the kernel checks' business: they refuse them while the
# answer runs.

def _seed(generator) -> int:
    return _random_size(generator, 0, 2**31)


def _layer_values(generator, n_in: int, n_out: int) -> tuple:
    """A linear layer's (weight, bias), drawn."""
    return (torch.randn(n_out, n_in, generator=generator) * 0.6,
            torch.randn(n_out, generator=generator) * 0.3)


@torch.no_grad()
def _set_exactly(layer, weight, bias) -> None:
    """``layer``'s weight and bias set to these values; a layer of another shape is an error (copy_
    would broadcast)."""
    if tuple(layer.weight.shape) != tuple(weight.shape) or layer.bias is None or \
            tuple(layer.bias.shape) != tuple(bias.shape):
        raise ValueError("a linear layer of another shape than the judge's weights")
    _set_layer(layer, weight, bias)


# Exercise 1 · MLP


def _mlp_sizes(generator, depth: int) -> list:
    return _sizes(generator, depth + 1, 1, 13)


def _mlp_structures(generator) -> list:
    """(sizes, batch, seed): one layer, a few, and a deep one."""
    return [(_mlp_sizes(generator, depth), _random_size(generator, 1, 7), _seed(generator))
            for depth in (1, _random_size(generator, 2, 4), 5)]


def mlp_structure_outcome(mlp_class, sizes, batch: int, seed: int) -> dict:
    """``MLP(sizes)``'s registered linear layers (weight and bias shapes, in order), its number of
    parameters, and the shape of its output on a batch."""
    with checks.seeded(seed):
        model = mlp_class(list(sizes))
        output = model(torch.randn(batch, sizes[0]))
    linears = [layer for _, layer in _linears(model)]
    return {"a module": isinstance(model, nn.Module),
            "weight shapes": [tuple(layer.weight.shape) for layer in linears],
            "bias shapes": [None if layer.bias is None else tuple(layer.bias.shape) for layer in linears],
            "parameters": sum(parameter.numel() for parameter in model.parameters()),
            "output shape": tuple(output.shape)}


def _mlp_cases(generator) -> list:
    """(sizes, [(weight, bias) per layer], x, seed): hidden values of both signs, and at least two
    outputs of a batch of three or more, so that a ReLU missing or one too many shows."""
    cases = []
    for depth in (2, _random_size(generator, 1, 4), 4):
        sizes = _mlp_sizes(generator, depth)
        sizes[-1] = max(sizes[-1], 2)
        layers = [_layer_values(generator, n_in, n_out) for n_in, n_out in itertools.pairwise(sizes)]
        x = torch.randn(_random_size(generator, 3, 7), sizes[0], generator=generator)
        cases.append((sizes, layers, x, _seed(generator)))
    return cases


def mlp_forward_outcome(mlp_class, sizes, layers, x, seed: int):
    """``MLP(sizes)(x)`` with its linear layers (in registration order) set to the judge's weights."""
    with checks.seeded(seed):
        model = mlp_class(list(sizes))
    linears = [layer for _, layer in _linears(model)]
    if len(linears) != len(layers):
        raise ValueError("not one linear layer per pair of neighbouring sizes")
    for layer, (weight, bias) in zip(linears, layers, strict=True):
        _set_exactly(layer, weight, bias)
    with checks.seeded(seed):
        return model(x).detach()


# Exercise 2 · ResidualBlock


def _block_sizes(generator) -> list:
    """(dim, hidden, seed): a 1-wide block, and two where dim and hidden differ."""
    cases = [(1, _random_size(generator, 1, 5))]
    for _ in range(2):
        dim, hidden = _sizes(generator, 2, 2, 17)
        cases.append((dim, hidden + dim if hidden == dim else hidden))
    return [(dim, hidden, _seed(generator)) for dim, hidden in cases]


def _shape_or_none(tensor):
    return None if tensor is None else tuple(tensor.shape)


def residual_structure_outcome(block_class, dim: int, hidden: int, seed: int) -> dict:
    """``ResidualBlock(dim, hidden)``: norm's, fc1's and fc2's weight and bias shapes, the number of
    parameters, and the shape of its output."""
    with checks.seeded(seed):
        block = block_class(dim, hidden)
        output = block(torch.randn(3, dim))
    parts = {part: getattr(block, part) for part in ("norm", "fc1", "fc2")}
    return {"a module": isinstance(block, nn.Module),
            "norm a LayerNorm": isinstance(block.norm, nn.LayerNorm),
            **{f"{part} linear": isinstance(parts[part], nn.Linear) for part in ("fc1", "fc2")},
            **{f"{part}.weight": _shape_or_none(layer.weight) for part, layer in parts.items()},
            **{f"{part}.bias": _shape_or_none(layer.bias) for part, layer in parts.items()},
            "parameters": sum(parameter.numel() for parameter in block.parameters()),
            "output shape": tuple(output.shape)}


def _block_cases(generator) -> list:
    """(dim, hidden, norm (scale, shift), fc1 (weight, bias), fc2 (weight, bias), x, seed); x with one
    or two leading dimensions. dim 1 normalises every x to norm's shift: that case stays, the others
    have dim >= 2."""
    cases = []
    for dim, hidden, seed in _block_sizes(generator):
        lead = _sizes(generator, _random_size(generator, 1, 3), 1, 5)
        norm = (1 + 0.5 * torch.randn(dim, generator=generator), 0.5 * torch.randn(dim, generator=generator))
        fc1, fc2 = _layer_values(generator, dim, hidden), _layer_values(generator, hidden, dim)
        cases.append((dim, hidden, norm, fc1, fc2, torch.randn(*lead, dim, generator=generator), seed))
    return cases


def residual_forward_outcome(block_class, dim: int, hidden: int, norm, fc1, fc2, x, seed: int):
    """``ResidualBlock(dim, hidden)(x)`` with norm, fc1 and fc2 set to the judge's values."""
    with checks.seeded(seed):
        block = block_class(dim, hidden)
    _set_exactly(block.norm, *norm)
    _set_exactly(block.fc1, *fc1)
    _set_exactly(block.fc2, *fc2)
    with checks.seeded(seed):
        return block(x).detach()


# Exercise 3 · count_parameters


def _count_sizes(generator) -> list:
    return [(*_sizes(generator, 3), _seed(generator)) for _ in range(2)]


def count_parameters_outcome(count_parameters, a: int, b: int, c: int, seed: int) -> list:
    """The counts of three models: one with BatchNorm buffers (left out) and a layer without bias,
    one without parameters, one whose layer appears twice (counted once)."""
    with checks.seeded(seed):
        shared = nn.Linear(a, a)
        models = [nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, c, bias=False)),
                  nn.ReLU(), nn.Sequential(shared, nn.Tanh(), shared)]
    return [count_parameters(model) for model in models]


def _frozen_cases(generator) -> list:
    """(sizes of three linear layers, their weights frozen, their biases frozen, seed): at least one
    tensor frozen, so that counting everything is wrong."""
    cases = []
    for _ in range(3):
        sizes = _sizes(generator, 4, high=30)
        frozen_weights, frozen_biases = (torch.randint(0, 2, (2, 3), generator=generator) == 1).tolist()
        frozen_weights[_random_size(generator, 0, 3)] = True
        cases.append((sizes, frozen_weights, frozen_biases, _seed(generator)))
    return cases


def count_trainable_outcome(count_parameters, sizes, frozen_weights, frozen_biases, seed: int) -> tuple:
    """``count_parameters`` with trainable_only True, False and left out, on linear layers (some
    weights and biases frozen) around a BatchNorm1d."""
    with checks.seeded(seed):
        layers = [nn.Linear(sizes[i], sizes[i + 1]) for i in range(3)]
        model = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.BatchNorm1d(sizes[2]), layers[2])
    for layer, weight_frozen, bias_frozen in zip(layers, frozen_weights, frozen_biases, strict=True):
        layer.weight.requires_grad_(not weight_frozen)
        layer.bias.requires_grad_(not bias_frozen)
    return (count_parameters(model, trainable_only=True), count_parameters(model, trainable_only=False),
            count_parameters(model))


# Exercise 4 · save_weights / load_weights


def _weights_cases(generator) -> list:
    return [(_sizes(generator, 3, 2, 20), _seed(generator)) for _ in range(2)]


def _plain_state(state) -> dict:
    """A state_dict (an OrderedDict) as a plain dict of tensors."""
    if not isinstance(state, dict):
        raise TypeError(f"not a state_dict: {type(state).__name__}")
    return {key: value.detach().clone() if isinstance(value, torch.Tensor) else value
            for key, value in state.items()}


def save_weights_outcome(save_weights, sizes, seed: int) -> dict:
    """What a plain ``torch.load`` (weights_only) reads from the file ``save_weights`` wrote for a
    model with BatchNorm buffers: its tensors by key."""
    model = _model_with_buffers(sizes, seed)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "weights.pt"
        with checks.seeded(seed):
            save_weights(model, path)
        return _plain_state(torch.load(path))


def load_weights_outcome(load_weights, sizes, seed: int) -> dict:
    """After ``load_weights`` of a saved state_dict into another model of the same shape: whether it
    returned that model, its state and its outputs (evaluation mode), whether every torch.load read
    the file with a map_location, and what it raised for a file lacking some of a model's keys."""
    source, target = _model_with_buffers(sizes, seed), _model_with_buffers(sizes, seed + 1)
    a, b, c = sizes
    with checks.seeded(seed + 2):
        smaller = nn.Sequential(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, c))
        bigger = nn.Sequential(*(nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(), nn.Linear(b, c)),
                               nn.Linear(c, c))
    with tempfile.TemporaryDirectory() as folder:
        path, partial = Path(folder) / "weights.pt", Path(folder) / "partial.pt"
        torch.save(source.state_dict(), path)
        torch.save(smaller.state_dict(), partial)
        with checks.seeded(seed), _recorded_loads() as calls:
            result = load_weights(target, path)
        locations = _map_locations(calls)
        try:
            with checks.seeded(seed):
                load_weights(bigger, partial)
            raised = None
        except Exception as error:  # the kind of error is what is judged
            raised = type(error).__name__
    x = torch.randn(8, sizes[0], generator=checks.seeded_generator(seed))
    with torch.set_grad_enabled(False):
        outputs = target.train(False)(x)
    return {"the same model returned": result is target, "state": _plain_state(target.state_dict()),
            "outputs": outputs, "read with a map_location": bool(locations) and None not in locations,
            "a file lacking keys raises": raised}


# Exercise 5 · init_weights


class _Nested(nn.Module):
    """Linear layers at two depths, one without bias, beside a LayerNorm."""

    def __init__(self, a, b, c):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(a, b, bias=False), nn.ReLU(), nn.LayerNorm(b))
        self.head = nn.Linear(b, c)

    def forward(self, x):
        return self.head(self.body(x))


class _Branches(nn.Module):
    """Linear layers with and without bias, in a ModuleDict and after a BatchNorm, and a LayerNorm."""

    def __init__(self, a, b):
        super().__init__()
        self.branches = nn.ModuleDict({"left": nn.Linear(a, b), "right": nn.Linear(a, b, bias=False)})
        self.norm = nn.LayerNorm(b)
        self.out = nn.Sequential(nn.BatchNorm1d(b), nn.Linear(b, a))

    def forward(self, x):
        return self.out(self.norm(self.branches["left"](x) + self.branches["right"](x)))


def _init_sizes(generator) -> list:
    """(a, b, c, seed): layers of 60 000 weights or more, for statistics a right answer meets every
    time (each tolerance is six standard deviations or more away)."""
    return [(_random_size(generator, 500, 900), _random_size(generator, 300, 500),
             _random_size(generator, 200, 300), _seed(generator)) for _ in range(2)]


def init_weights_outcome(init_weights, a: int, b: int, c: int, seed: int) -> dict:
    """Whether ``init_weights`` returned the model, and for each of its linear layers (the nested one
    too): fan_in, and the weight's standard deviation, mean and fraction beyond 2·sqrt(2/fan_in)."""
    with checks.seeded(seed):
        model = _Nested(a, b, c)
        result = init_weights(model)
    statistics = []
    for _, layer in _linears(model):
        weight = layer.weight.detach().double()
        fan_in = weight.shape[1]
        std = math.sqrt(2 / fan_in)
        statistics.append((fan_in, weight.std().item(), weight.mean().item(),
                           (weight.abs() > 2 * std).double().mean().item()))
    return {"the same model returned": result is model, "linear layers": statistics}


def init_weights_accept(got, want, args) -> bool:
    """Kaiming's statistics (fan_in, ReLU) for every linear layer the reference has, within the
    kernel check's tolerances; the model returned. Data of any other form is refused, never raised on."""
    try:
        layers, wanted = got["linear layers"], want["linear layers"]
        if got["the same model returned"] is not True or not isinstance(layers, list | tuple) or \
                len(layers) != len(wanted):
            return False
        for layer, (wanted_fan_in, *_) in zip(layers, wanted, strict=True):
            if not (isinstance(layer, tuple) and len(layer) == 4 and type(layer[0]) is int
                    and all(type(value) is float for value in layer[1:])):
                return False
            fan_in, std, mean, beyond = layer
            expected = math.sqrt(2 / wanted_fan_in)
            if fan_in != wanted_fan_in or not (abs(std - expected) <= 0.03 * expected
                                               and abs(mean) <= 0.05 * expected
                                               and abs(beyond - 0.0455) <= 0.01):
                return False
        return True
    except Exception:  # whatever the kernel sent, a refusal
        return False


def _branch_sizes(generator) -> list:
    return [(*_sizes(generator, 2, 2, 40), _seed(generator)) for _ in range(2)]


def init_biases_outcome(init_weights, a: int, b: int, seed: int) -> dict:
    """Whether ``init_weights`` returned the model, each linear layer's bias (None without one), and
    the parameters of the other layers, set to random values first."""
    with checks.seeded(seed):
        model = _Branches(a, b)
        others = _other_parameters(model)
        _scramble(others.values())
        result = init_weights(model)
    return {"the same model returned": result is model,
            "linear biases": [None if layer.bias is None else layer.bias.detach().clone()
                              for _, layer in _linears(model)],
            "other parameters": {name: parameter.detach().clone() for name, parameter in others.items()}}


# Exercise 6 · train_and_eval_outputs


def _dropout_cases(generator) -> list:
    """(x, hidden, outputs, p, starts in training, seed): 1 200 outputs or more, for the fraction of
    zeros."""
    cases = []
    for p, training in ((0.2 + 0.2 * float(torch.rand((), generator=generator)), False),
                        (0.5 + 0.3 * float(torch.rand((), generator=generator)), True)):
        lead = (_random_size(generator, 4, 9), _random_size(generator, 4, 7))
        x = torch.randn(*lead, _random_size(generator, 3, 9), generator=generator)
        outputs = -(-1200 // math.prod(lead)) + _random_size(generator, 0, 10)
        cases.append((x, _random_size(generator, 4, 17), outputs, round(p, 3), training, _seed(generator)))
    return cases


def _dropout_model(x, hidden: int, outputs: int, p: float):
    return nn.Sequential(nn.Linear(x.shape[-1], hidden), nn.Tanh(), nn.Linear(hidden, outputs), nn.Dropout(p))


def train_and_eval_outputs_outcome(function, x, hidden: int, outputs: int, p: float, training: bool,
                                   seed: int) -> dict:
    """A model ending in Dropout(p): what reaches the Dropout, and the pair the function returns in two
    calls."""
    with checks.seeded(seed):
        model = _dropout_model(x, hidden, outputs, p).train(training)
        with torch.set_grad_enabled(False):
            before = model[:-1](x)
        pairs = [function(model, x) for _ in range(2)]
    return {"before the dropout": before,
            "calls": [tuple(output.detach().clone() for output in pair) for pair in pairs]}


def _zeroes_and_scales(train_out, before, p: float) -> bool:
    """train_out is ``before`` with about a fraction p zeroed, the rest scaled by 1 / (1 - p)."""
    if type(train_out) is not torch.Tensor or train_out.shape != before.shape or \
            train_out.dtype != before.dtype:
        return False
    kept = train_out != 0
    return torch.allclose(train_out[kept], before[kept] / (1 - p), rtol=1e-5, atol=1e-6) and \
        abs((1 - kept.double().mean().item()) - p) <= 0.1


def train_and_eval_outputs_accept(got, want, args) -> bool:
    """Each call's eval_out is what reaches the Dropout (the reference's), its train_out that with a
    Dropout mask applied, and the two calls' masks differ."""
    try:
        before, p = want["before the dropout"], args[3]
        (first_train, first_eval), (second_train, second_eval) = got["calls"]
        evaluated = all(type(output) is torch.Tensor and output.shape == before.shape
                        and output.dtype == before.dtype
                        and torch.allclose(output, before, rtol=1e-5, atol=1e-6)
                        for output in (first_eval, second_eval))
        return evaluated and _zeroes_and_scales(first_train, before, p) \
            and _zeroes_and_scales(second_train, before, p) and not torch.equal(first_train, second_train)
    except Exception:  # whatever the kernel sent, a refusal
        return False


def _grad_cases(generator) -> list:
    return [(_random_size(generator, 2, 9), training, _seed(generator)) for training in (False, True)]


def no_graph_outcome(function, width: int, training: bool, seed: int) -> dict:
    """Whether autograd recorded while the model ran inside the function, and whether its outputs
    require grad."""
    probe = _GradProbe()
    with checks.seeded(seed):
        model = nn.Sequential(nn.Linear(width, width), nn.Dropout(0.5), probe).train(training)
        train_out, eval_out = function(model, torch.randn(4, width))
    return {"the model ran": bool(probe.recording), "autograd on while it ran": any(probe.recording),
            "train_out requires grad": getattr(train_out, "requires_grad", None),
            "eval_out requires grad": getattr(eval_out, "requires_grad", None)}


def _mode_cases(generator) -> list:
    """(starting modes, width, seed): three calls, in modes drawn, both modes among them."""
    first, last = (torch.randint(0, 2, (2,), generator=generator) == 1).tolist()
    return [([first, not first, last], _random_size(generator, 2, 9), _seed(generator))]


def mode_restored_outcome(function, starts, width: int, seed: int) -> list:
    """For each call, from the mode in ``starts``: whether each Dropout ran in both modes inside the
    function, and the mode the model and its submodules were left in."""
    with checks.seeded(seed):
        model = nn.Sequential(nn.Linear(width, width), nn.Dropout(0.3),
                              nn.Sequential(nn.Linear(width, 2), nn.Dropout(0.1)))
        x = torch.randn(4, width)
        layers = {"model[1]": model[1], "model[2][1]": model[2][1]}
        facts = []
        for start in starts:
            model.train(start)
            seen, handles = checks.modes_seen(layers)
            try:
                function(model, x)
            finally:
                for handle in handles:
                    handle.remove()
            both_modes = [{training for key, training in seen if key == name} == {True, False}
                          for name in layers]
            facts.append((both_modes, [module.training for module in model.modules()]))
    return facts


# Exercise 7 · ImageDataset


def _images_for(n: int, shape, seed: int) -> tuple:
    return _random_images(checks.seeded_generator(seed), n, shape)


def _length_cases(generator) -> list:
    """(n, image shape, seed): one image, a few, many."""
    return [(n, _random_shape(generator), _seed(generator))
            for n in (1, _random_size(generator, 2, 80), _random_size(generator, 300, 1000))]


def _dataset(dataset_class, images, labels, transform):
    """``dataset_class(images, labels)``, with ``transform=`` when one is given."""
    return dataset_class(images, labels, **({} if transform is None else {"transform": transform}))


def dataset_length_outcome(dataset_class, n: int, shape, seed: int) -> list:
    """``len()`` of the data set of n images, built without a transform and with one."""
    images, labels = _images_for(n, shape, seed)
    return [len(_dataset(dataset_class, images, labels, transform)) for transform in (None, _scaled)]


def _item_cases(generator) -> list:
    """(n, image shape (grey or with channels), indices, seed)."""
    cases = []
    for shape in (_random_shape(generator), (3, *_random_shape(generator))):
        n = _random_size(generator, 5, 40)
        cases.append((n, shape, sorted({0, n - 1, _random_size(generator, 1, n - 1)}), _seed(generator)))
    return cases


def _plain_item(item):
    """A data set's item as plain data: (the image, the label as an int) when it is an (image,
    integer label) pair, else what it is instead."""
    if not (isinstance(item, tuple) and len(item) == 2):
        return f"not an (image, label) pair: {type(item).__name__}"
    image, label = item
    return image, int(label) if _is_integer(label) else f"not an integer label: {type(label).__name__}"


def dataset_item_outcome(dataset_class, n: int, shape, indices, seed: int) -> list:
    """The items read at ``indices``, without a transform and with one."""
    images, labels = _images_for(n, shape, seed)
    datasets = [_dataset(dataset_class, images, labels, transform) for transform in (None, _scaled)]
    return [[_plain_item(dataset[index]) for index in indices] for dataset in datasets]


def _lazy_cases(generator) -> list:
    """(n, image shape, index, seed)."""
    cases = []
    for _ in range(2):
        n = _random_size(generator, 5, 40)
        cases.append((n, _random_shape(generator), _random_size(generator, 0, n), _seed(generator)))
    return cases


def dataset_lazy_outcome(dataset_class, n: int, shape, index: int, seed: int) -> dict:
    """With a transform that keeps what it is given: its calls while the data set is built and
    measured, then, after each of three reads, its calls so far, the image it was last given and the
    image read."""
    images, labels = _images_for(n, shape, seed)
    transform = _CountingTransform()
    dataset = _dataset(dataset_class, images, labels, transform)
    len(dataset)
    built = len(transform.seen)
    reads = []
    for position in (index, n - 1 - index, index):
        item = dataset[position]
        reads.append((len(transform.seen), transform.seen[-1] if transform.seen else None, item[0]))
    return {"calls while built and measured": built, "reads": reads}


def _loader_cases(generator) -> list:
    """(n, batch size, image shape, images seed, shuffling seed): a last batch shorter than the rest,
    and batches of a size drawn."""
    cases = []
    for _ in range(2):
        n, batch_size = _random_size(generator, 20, 60), _random_size(generator, 3, 9)
        n += n % batch_size == 0
        cases.append((n, batch_size, _random_shape(generator), _seed(generator), _seed(generator)))
    return cases


def dataset_loader_outcome(dataset_class, n: int, batch_size: int, shape, seed: int, shuffling: int) -> list:
    """Two epochs of a shuffling DataLoader over the data set (one label per item): each epoch's batch
    sizes, its labels and its images, in the order they came."""
    generator = checks.seeded_generator(seed)
    images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=generator)
    labels = torch.randperm(n, generator=generator)
    loader = data.DataLoader(_dataset(dataset_class, images, labels, _scaled), batch_size=batch_size,
                             shuffle=True, generator=checks.seeded_generator(shuffling))
    epochs = []
    for _ in range(2):
        batches = [(inputs, targets) for inputs, targets in loader]
        epochs.append({"batch sizes": [len(targets) for _, targets in batches],
                       "labels": torch.cat([targets for _, targets in batches]),
                       "images": torch.cat([inputs for inputs, _ in batches])})
    return epochs


# Exercise 8 · bce_with_logits


def _logits(generator, scale: float):
    """Inputs of ``bce_with_logits``: logits around ``scale`` in size, and 0/1 targets."""
    cases = []
    for n in (int(v) for v in torch.randint(3, 20, (2,), generator=generator)):
        targets = torch.randint(0, 2, (n,), generator=generator).float()
        cases.append((torch.randn(n, generator=generator) * scale, targets))
    return cases


def _gradient_cases(generator) -> list:
    """Ordinary logits, large ones (20 to 2 000, either sign) and both mixed, with 0/1 targets."""
    ordinary, _ = _ordinary_logits(generator, (_random_size(generator, 5, 20),))
    large = torch.tensor(_large_logits(generator) + _large_logits(generator))
    mixed = torch.cat([ordinary, large])[torch.randperm(len(ordinary) + len(large), generator=generator)]
    return [(logits, torch.randint(0, 2, logits.shape, generator=generator).float())
            for logits in (ordinary, large, mixed.reshape(-1, 1) if len(mixed) % 2 else mixed.reshape(2, -1))]


def bce_gradient_outcome(bce_with_logits, logits, targets) -> tuple:
    """The loss, and the gradient autograd gives through the answer with respect to the logits."""
    leaf = logits.clone().requires_grad_(True)
    loss = bce_with_logits(leaf, targets)
    loss.backward()
    return loss.detach(), leaf.grad


_EXACT = {"rtol": 0.0, "atol": 0.0}
JUDGED = [
    checks.JudgedCall("test_mlp_structure", "MLP", "mlp", _mlp_structures, outcome=mlp_structure_outcome),
    checks.JudgedCall("test_mlp_forward", "MLP", "mlp", _mlp_cases, {"rtol": 1e-5, "atol": 1e-5},
                      outcome=mlp_forward_outcome),
    checks.JudgedCall("test_residual_structure", "ResidualBlock", "residual_block", _block_sizes,
                      outcome=residual_structure_outcome),
    checks.JudgedCall("test_residual_forward", "ResidualBlock", "residual_block", _block_cases,
                      {"rtol": 1e-5, "atol": 1e-5}, outcome=residual_forward_outcome),
    checks.JudgedCall("test_count_parameters", "count_parameters", "count_parameters", _count_sizes,
                      outcome=count_parameters_outcome),
    checks.JudgedCall("test_count_trainable", "count_parameters", "count_parameters", _frozen_cases,
                      outcome=count_trainable_outcome),
    checks.JudgedCall("test_save_weights", "save_weights", "save_load_weights", _weights_cases, _EXACT,
                      outcome=save_weights_outcome),
    checks.JudgedCall("test_load_weights", "load_weights", "save_load_weights", _weights_cases,
                      outcome=load_weights_outcome),
    checks.JudgedCall("test_init_weights", "init_weights", "init_weights", _init_sizes,
                      outcome=init_weights_outcome, accept=init_weights_accept),
    checks.JudgedCall("test_init_biases", "init_weights", "init_weights", _branch_sizes, _EXACT,
                      outcome=init_biases_outcome),
    checks.JudgedCall("test_train_and_eval_outputs", "train_and_eval_outputs", "train_and_eval_outputs",
                      _dropout_cases, outcome=train_and_eval_outputs_outcome,
                      accept=train_and_eval_outputs_accept),
    checks.JudgedCall("test_train_and_eval_no_graph", "train_and_eval_outputs", "train_and_eval_outputs",
                      _grad_cases, outcome=no_graph_outcome),
    checks.JudgedCall("test_train_and_eval_mode_restored", "train_and_eval_outputs", "train_and_eval_outputs",
                      _mode_cases, outcome=mode_restored_outcome),
    checks.JudgedCall("test_dataset_length", "ImageDataset", "image_dataset", _length_cases,
                      outcome=dataset_length_outcome),
    checks.JudgedCall("test_dataset_item", "ImageDataset", "image_dataset", _item_cases, _EXACT,
                      outcome=dataset_item_outcome),
    checks.JudgedCall("test_dataset_lazy", "ImageDataset", "image_dataset", _lazy_cases, _EXACT,
                      outcome=dataset_lazy_outcome),
    checks.JudgedCall("test_dataset_loader", "ImageDataset", "image_dataset", _loader_cases, _EXACT,
                      outcome=dataset_loader_outcome),
    checks.JudgedCall("test_bce_values", "bce_with_logits", "bce_with_logits",
                      functools.partial(_logits, scale=3.0)),
    checks.JudgedCall("test_bce_large_logits", "bce_with_logits", "bce_with_logits",
                      functools.partial(_logits, scale=150.0)),
    checks.JudgedCall("test_bce_gradient", "bce_with_logits", "bce_with_logits", _gradient_cases,
                      {"rtol": 1e-5, "atol": 1e-6}, outcome=bce_gradient_outcome),
]
