"""Lesson 03 (modules), kernel side: the checks its grade cells call, and its hints.

Visible checks compare with what can be worked out without a reference implementation: weight
shapes and parameter counts from the sizes, small cases computed by hand, properties (a zeroed
layer, a dead hidden layer), statistics of an initialisation, and what a probe recorded while the
model ran. The reference implementations stay in the hidden tests of the grade cells.
"""

import contextlib
import math
import pickle
import tempfile
from pathlib import Path
from unittest import mock

import torch
import torchvision
from torch import nn

from graders import checks
from graders.lesson_checks import concept_questions, lesson_texts

__all__ = ["HINTS", "MORE_HINTS", "SHORTCUTS", "check_concepts", "check_count_parameters",
           "check_count_trainable", "check_init_biases", "check_init_weights", "check_load_is_strict",
           "check_load_weights", "check_mlp_forward", "check_mlp_structure", "check_mode_restored",
           "check_no_graph", "check_residual_forward", "check_residual_structure", "check_save_weights",
           "check_train_and_eval_outputs", "grade_concepts", "show_questions"]

TEXTS = lesson_texts(__name__)
HINTS, MORE_HINTS = TEXTS.hints, TEXTS.more_hints
show_questions, check_concepts, grade_concepts = concept_questions(__name__)


# Library classes that would answer an exercise in one call, switched off while its answer runs, by
# the check that runs it: torchvision's ready-made MLP, where the exercise is to build one.
_READY_MADE_MLP = [(torchvision.ops.MLP, "__init__")]
SHORTCUTS = {"check_mlp_structure": _READY_MADE_MLP, "check_mlp_forward": _READY_MADE_MLP}

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
    for part in ("fc1", "fc2"):
        checks.check_type(getattr(block, part, None), nn.Linear, name=f"{label}.{part}", hint=hint)
    return block


@checks.keeps_random_state
def check_residual_structure(block_class, dim: int, hidden: int) -> None:
    """fc1 goes from dim to hidden, fc2 back to dim, and both are registered."""
    __tracebackhide__ = True
    hint, label = HINTS["residual_block"], f"ResidualBlock({dim}, {hidden})"
    block = _build_block(block_class, dim, hidden)
    for part, shape in (("fc1", (hidden, dim)), ("fc2", (dim, hidden))):
        checks.check_equal(tuple(getattr(block, part).weight.shape), shape, hint=hint,
                           name=f"{label}.{part}.weight.shape")
    checks.check_equal(sum(p.numel() for p in block.parameters()), 2 * dim * hidden + hidden + dim, hint=hint,
                       name=checks.both(f"número de parámetros registrados de {label}",
                                        f"number of registered parameters of {label}"))


# ResidualBlock(2, 3) with weights set by hand: fc1 (weight, bias), fc2 (weight, bias), x, expected.
# In the first row the third hidden value is negative, so the activation matters.
_RESIDUAL_BY_HAND = (
    ([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [0.0, 0.0, -1.0]),
    ([[1.0, 0.0, 1.0], [0.0, 1.0, -1.0]], [0.5, 0.0]),
    [[1.0, -2.0], [3.0, 1.0]],
    [[2.5, -2.0], [9.5, -1.0]],
)


@checks.keeps_random_state
def check_residual_forward(block_class) -> None:
    """A case computed by hand; fc2 at zero gives back x; a dead hidden layer leaves x + fc2's bias."""
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
                       name=checks.both(f"fracción de |{label}.weight| > 2·sqrt(2/fan_in) (normal: 4,55 %)",
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
