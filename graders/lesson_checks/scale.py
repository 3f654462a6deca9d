"""Lesson 07 (scale): the checks its grade cells call, the harnesses of their hidden tests, the hints.

Visible checks draw fresh inputs on every run and compare with what can be known without solving
the exercise: sizes worked out by hand from what each layer saves, the definition of the answer
(the number of segments returned fits the budget and no smaller one does), properties of a split
(equal shares, every example once, padding that repeats the start), what a spy saw.

Two exercises re-create something that exists already; while they are checked, that thing refuses
to run, and the exercise text says so: ``course.memory``'s meter during ``activation_bytes``,
``DistributedSampler`` during ``shard_indices``.
"""

import contextlib
import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential
from torch.utils.data.distributed import DistributedSampler

from course import training
from course.memory import SavedTensorMeter, model_state_tensors
from graders import checks
from graders.checks import say

S1 = {"es": "sección 1, «Lo que el pase hacia delante guarda para el de atrás»",
      "en": "section 1, 'What the forward pass keeps for the backward pass'"}
S3 = {"es": "sección 3, «*Checkpointing*: recalcular en vez de guardar»",
      "en": "section 3, 'Checkpointing: recompute instead of storing'"}
S4 = {"es": "sección 4, «Congelar y ajustar (*fine-tuning*)»",
      "en": "section 4, 'Freezing and fine-tuning'"}
S4_OPTIMIZER = {"es": "sección 4, «El optimizador: solo lo que se entrena»",
                "en": "section 4, 'The optimizer: only what is trained'"}
S5_SAMPLER = {"es": "sección 5, «Repartir los datos: `DistributedSampler`»",
              "en": "section 5, 'Splitting the data: `DistributedSampler`'"}
S5_AVERAGE = {"es": "sección 5, «Por qué promediar gradientes da lo mismo que un lote grande»",
              "en": "section 5, 'Why averaging gradients gives the same as one large batch'"}


def _texts(es: str, en: str, section: dict | None = None, more: str | None = None) -> dict:
    """A hint in both languages, ending with the section that teaches it."""
    texts = {"es": f"{es}: ver {section['es']}" if section else es,
             "en": f"{en}: see {section['en']}" if section else en}
    return texts | ({"more": more} if more else {})


HINTS = {
    "activation_bytes": _texts(
        "un almacenamiento que autograd guarda dos veces ocupa memoria una sola vez, y los parámetros "
        "existen haya grafo o no, así que no son memoria de activaciones; el hook pack ve cada tensor "
        "guardado, también los repetidos y los parámetros",
        "a storage autograd saves twice takes memory once, and parameters exist with or without a "
        "graph, so they are not activation memory; the pack hook sees every saved tensor, repeats and "
        "parameters included",
        S1, more="activation_bytes"),
    "activation_bytes_buffers": _texts(
        "BatchNorm guarda también sus estadísticas: las del lote son activaciones, pero las acumuladas "
        "(running_mean, running_var) son *buffers* del modelo, que existen haya grafo o no, como los "
        "parámetros; en modo eval son las acumuladas las que guarda",
        "BatchNorm saves its statistics too: the batch's own are activations, but the running ones "
        "(running_mean, running_var) are the model's buffers, which exist with or without a graph, like "
        "parameters; in eval mode it is the running ones it saves",
        S1, more="activation_bytes"),
    "segments_for_budget": _texts(
        "se busca el menor número de tramos que cabe, y los bytes guardados no bajan de forma regular al "
        "añadir tramos (mira la curva frente al número de tramos): solo probando los números en orden se "
        "encuentra el menor; mide sin contar parámetros ni *buffers*",
        "the answer is the smallest number of segments that fits, and the saved bytes do not fall "
        "steadily as segments are added (look at the curve against the number of segments): only trying "
        "the counts in order finds the smallest; measure with parameters and buffers left out",
        S3),
    "freeze_backbone": _texts(
        "congelar es que un parámetro deje de pedir gradiente; todo menos la última capa se congela, y lo "
        "que se devuelve cuenta números (elementos), no tensores",
        "freezing means a parameter stops asking for a gradient; everything but the last layer is "
        "frozen, and what comes back counts numbers (elements), not tensors",
        S4),
    "freeze_backbone_head": _texts(
        "alguien congeló la cabeza antes de llamar a tu función: congelar el resto no basta, los "
        "parámetros de la cabeza tienen que volver a pedir gradiente",
        "someone froze the head before calling your function: freezing the rest is not enough, the "
        "head's parameters must ask for gradients again",
        S4),
    "trainable_optimizer": _texts(
        "un optimizador solo mueve (y solo guarda estado para) los parámetros que recibe al crearlo; si "
        "recibe los congelados, un gradiente de ceros basta para que AdamW los mueva",
        "an optimizer only moves (and only keeps state for) the parameters it receives when it is built; "
        "given the frozen ones, a gradient of zeros is enough for AdamW to move them",
        S4_OPTIMIZER),
    "shard_indices": _texts(
        "cada proceso recibe ⌈n / num_replicas⌉ índices; la lista rellenada tiene todos los ejemplos una "
        "vez, en orden, y después repite su principio (más de una vuelta si hay menos ejemplos que "
        "procesos); el proceso rank toma uno de cada num_replicas desde la posición rank",
        "each process gets ⌈n / num_replicas⌉ indices; the padded list holds every example once, in "
        "order, and then repeats its start (more than one round when there are fewer examples than "
        "processes); process rank takes one in every num_replicas from position rank",
        S5_SAMPLER, more="shard_indices"),
    "shard_indices_shuffled": _texts(
        "al barajar, todos los procesos sacan la misma permutación, de un generador sembrado con "
        "seed + epoch (así cambia en cada época); el relleno y el reparto son los de sin barajar",
        "when shuffling, every process draws the same permutation, from a generator seeded with "
        "seed + epoch (so it changes every epoch); padding and splitting are those of the unshuffled case",
        S5_SAMPLER),
    "average_gradients": _texts(
        "el gradiente de un lote es la media de los gradientes de sus partes iguales: para cada nombre de "
        "parámetro, la media sobre los procesos, con la forma de un gradiente",
        "a batch's gradient is the mean of the gradients of its equal shares: for each parameter name, "
        "the mean over the processes, shaped like one gradient",
        S5_AVERAGE),
    "average_gradients_inputs": _texts(
        "sumar sobre los tensores del primer proceso (con += o métodos que acaban en _) cambia la entrada; "
        "el resultado necesita tensores nuevos y un diccionario nuevo",
        "adding into the first process's tensors (with += or methods ending in _) changes the input; the "
        "result needs new tensors and a new dictionary",
        S5_AVERAGE),
    "concept_check": _texts(
        "ANSWERS es un dict con exactamente esas claves y un valor True o False en cada una; el resumen "
        "repasa cada idea",
        "ANSWERS is a dict with exactly those keys and True or False for each; the summary goes over "
        "every idea"),
}

MORE_HINTS = {
    "activation_bytes": {
        "es": "Dentro de pack solo se toma nota; la suma llega al acabar la pasada hacia delante. Anota "
              "cada almacenamiento bajo su dirección, así que guardarlo otra vez cae en la misma entrada. "
              "Antes de la pasada, reúne las direcciones de los parámetros y los buffers del modelo y "
              "sáltatelas. Devuelve desde pack el mismo tensor que llegó.",
        "en": "Inside pack you only take notes; the sum comes once the forward pass is over. Note each "
              "storage under its address, so saving it again lands on the same entry. Before the pass, "
              "gather the addresses of the model's parameters and buffers and skip them. Return from "
              "pack the very tensor that came in.",
    },
    "shard_indices": {
        "es": "Tres listas, una tras otra: el orden, el orden rellenado, la parte de este proceso. Para "
              "rellenar, piensa cuántas copias enteras del orden hacen falta para llegar al total y corta "
              "lo que sobra; el corte de Python con paso toma un elemento de cada tantos.",
        "en": "Three lists, one after the other: the order, the padded order, this process's share. To "
              "pad, think how many whole copies of the order reach the total and cut off what is left "
              "over; Python's slicing with a step takes one element in every so many.",
    },
}

CONCEPT_KEYS = ["ddp_syncs_data", "ddp_syncs_gradients", "ddp_sends_weights_each_step",
                "memory_linear_in_batch", "checkpoint_changes_gradients", "checkpoint_is_faster",
                "frozen_skips_backward", "bigger_batch_free_speed", "two_processes_two_cores"]


# --------------------------------------------------------------------------------- random inputs
def draw(generator: torch.Generator, low: int, high: int) -> int:
    """A random int in ``[low, high]``."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


@contextlib.contextmanager
def weights_from(generator: torch.Generator):
    """Layers built in the block take their initial weights from ``generator``'s seed; the
    notebook's own random state is left as it was, so later cells do not depend on the check."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(generator.initial_seed())
        yield


# ------------------------------------------------------------------------------ switched-off tools
METER_OFF = {
    "es": "el medidor de course.memory está apagado mientras se comprueba activation_bytes: la cuenta "
          "la haces tú, con torch.autograd.graph.saved_tensors_hooks",
    "en": "course.memory's meter is switched off while activation_bytes is checked: do the counting "
          "yourself, with torch.autograd.graph.saved_tensors_hooks",
}
SAMPLER_OFF = {
    "es": "DistributedSampler está apagado mientras se comprueba shard_indices: el reparto lo escribes tú",
    "en": "DistributedSampler is switched off while shard_indices is checked: write the split yourself",
}


def course_meter_off():
    """``course.memory``'s meter (and so ``saved_bytes``, ``model_saved_bytes``) refuses to run."""
    return checks.switched_off([(SavedTensorMeter, "__enter__"), (SavedTensorMeter, "_pack")], METER_OFF)


def distributed_sampler_off():
    """``DistributedSampler`` refuses to be built or iterated."""
    return checks.switched_off([(DistributedSampler, "__init__"), (DistributedSampler, "__iter__")],
                               SAMPLER_OFF)


# ---------------------------------------------------------------------- exercise 1: activation bytes
def _mlp(width_in: int, hidden: int, width_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width_in, hidden), nn.ReLU(), nn.Linear(hidden, width_out))


def check_activation_bytes_on(activation_bytes, model, x, expected: int, label: str, hint=None) -> None:
    """``activation_bytes(model, x)``, with the course's meter off, returns ``expected``."""
    __tracebackhide__ = True
    name = f"activation_bytes({label})"
    hint = hint or HINTS["activation_bytes"]
    with course_meter_off():
        got = checks.check_runs(activation_bytes, model, x, name=name, hint=hint)
    checks.check_equal(got, expected, name=name, hint=hint)


def check_activation_bytes(activation_bytes) -> None:
    """An MLP on a random batch: its input and the ReLU's output (saved twice) count, once each;
    the second layer's weight, saved too, does not. In float64 every byte count doubles."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    batch, width_in, hidden, width_out = (draw(generator, 3, 40) for _ in range(4))
    with weights_from(generator):
        model = _mlp(width_in, hidden, width_out)
    x = torch.randn(batch, width_in, generator=generator)
    layers = f"Linear({width_in}, {hidden}) → ReLU → Linear({hidden}, {width_out})"
    for dtype, size in [(torch.float32, 4), (torch.float64, 8)]:
        check_activation_bytes_on(activation_bytes, model.to(dtype), x.to(dtype),
                                  batch * (width_in + hidden) * size,
                                  f"{layers}, x {tuple(x.shape)} {dtype}")


def check_activation_bytes_leaves_buffers_out(activation_bytes) -> None:
    """Linear → BatchNorm1d. Training mode saves the input, BatchNorm's input, and the batch's mean
    and inverse deviation (one number per feature each); eval mode saves the running statistics
    instead, which are buffers and do not count."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    batch, width_in, features = (draw(generator, 3, 40) for _ in range(3))
    with weights_from(generator):
        model = nn.Sequential(nn.Linear(width_in, features), nn.BatchNorm1d(features))
    x = torch.randn(batch, width_in, generator=generator)
    inputs = batch * (width_in + features) * 4
    for mode, expected in [("train", inputs + 2 * features * 4), ("eval", inputs)]:
        getattr(model, mode)()
        label = f"Linear({width_in}, {features}) → BatchNorm1d, model.{mode}(), x {tuple(x.shape)}"
        check_activation_bytes_on(activation_bytes, model, x, expected, label,
                                  hint=HINTS["activation_bytes_buffers"])


# ------------------------------------------------------------------- exercise 2: segments for budget
def blocks(depth: int, width: int) -> nn.Sequential:
    """The lesson's deep model: ``depth`` blocks Linear → LayerNorm → GELU."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                           for _ in range(depth)])


def saved_with_segments(model: nn.Sequential, x, segments: int) -> int:
    """Bytes kept for backward when ``model`` runs through ``checkpoint_sequential`` in ``segments``
    segments, the model's parameters and buffers left out."""
    with SavedTensorMeter(exclude=model_state_tensors(model)) as meter:
        output = checkpoint_sequential(model, segments, x, use_reentrant=False)
    del output  # alive until the meter closed, so that nothing was freed while it counted
    return meter.bytes


def check_segments_for_budget_on(segments_for_budget, model, x, budget: int, label: str) -> None:
    """The definition: the count returned fits the budget and no smaller count does; ``None`` only
    when no count from 1 to ``len(model)`` fits."""
    __tracebackhide__ = True
    name, hint = f"segments_for_budget({label}, budget_bytes={budget})", HINTS["segments_for_budget"]
    got = checks.check_runs(segments_for_budget, model, x, budget, name=name, hint=hint)
    if got is not None:
        checks.check_type(got, int, name=name, hint=hint)
        checks.check_true(1 <= got <= len(model), name=name, hint=hint,
                          expected=f"1 ≤ k ≤ {len(model)}", got=f"k = {got}")
        used = saved_with_segments(model, x, got)
        checks.check_true(used <= budget, name=name, hint=hint,
                          expected={"es": f"un k cuyos bytes guardados quepan en {budget}",
                                    "en": f"a k whose saved bytes fit {budget}"},
                          got={"es": f"k = {got}, que guarda {used} bytes",
                               "en": f"k = {got}, which saves {used} bytes"})
    for smaller in range(1, len(model) + 1 if got is None else got):
        used = saved_with_segments(model, x, smaller)
        checks.check_true(used > budget, name=name, hint=hint,
                          expected={"es": f"k ≤ {smaller} (k = {smaller} ya cabe: guarda {used} bytes)",
                                    "en": f"k ≤ {smaller} (k = {smaller} fits already: saves {used} bytes)"},
                          got=f"k = {got}")


def check_segments_for_budget(segments_for_budget) -> None:
    """A random deep model and three budgets: what one segment saves (the answer is 1), what a
    random count saves (the answer is that count or fewer), and nothing at all (no count fits)."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    depth, width, batch = draw(generator, 5, 9), 16 * draw(generator, 2, 5), draw(generator, 8, 40)
    with weights_from(generator):
        model = blocks(depth, width)
    x = torch.randn(batch, width, generator=generator)
    label = f"{depth} × (Linear({width}, {width}) → LayerNorm → GELU), x {tuple(x.shape)}"
    for segments in (1, draw(generator, 2, depth)):
        check_segments_for_budget_on(segments_for_budget, model, x,
                                     saved_with_segments(model, x, segments), label)
    check_segments_for_budget_on(segments_for_budget, model, x, 0, label)


# -------------------------------------------------------------------- exercise 3: freeze the backbone
def _cnn_and_images(generator):
    channels = (draw(generator, 2, 6), draw(generator, 2, 6))
    classes = draw(generator, 2, 9)
    with weights_from(generator):
        model = training.make_cnn(channels=channels, num_classes=classes)
    images = torch.randn(3, 1, 28, 28, generator=generator)
    return model, images, f"make_cnn(channels={channels}, num_classes={classes})"


def check_only_the_head_trains(freeze_backbone, model, images, label, hint=None) -> None:
    """After ``freeze_backbone(model)``: it returned the head's number of elements, exactly the
    head's parameters ask for gradients, and a backward pass fills exactly their ``.grad``.
    ``label`` describes the model, in one language or as ``{"es": ..., "en": ...}``."""
    __tracebackhide__ = True
    label = say(label)
    hint, name = hint or HINTS["freeze_backbone"], f"freeze_backbone({label})"
    got = checks.check_runs(freeze_backbone, model, name=name, hint=hint)
    head = {id(p) for p in model[-1].parameters()}
    wrong = [n for n, p in model.named_parameters() if p.requires_grad != (id(p) in head)]
    checks.check_equal(wrong, [], hint=hint, name={
        "es": f"parámetros con requires_grad equivocado ({label})",
        "en": f"parameters with the wrong requires_grad ({label})"})
    checks.check_equal(got, sum(p.numel() for p in model[-1].parameters()), name=name, hint=hint)
    model(images).sum().backward()
    wrong = [n for n, p in model.named_parameters() if (p.grad is not None) != (id(p) in head)]
    checks.check_equal(wrong, [], hint=hint, name={
        "es": f"parámetros cuyo .grad sobra o falta tras backward() ({label})",
        "en": f"parameters with a .grad they should not have, or without one, after backward() ({label})"})


def freeze_head(model: nn.Sequential) -> nn.Sequential:
    """``model`` with its last layer frozen beforehand, as someone else might have left it."""
    for p in model[-1].parameters():
        p.requires_grad_(False)
    return model


def check_freeze_backbone(freeze_backbone) -> None:
    """A CNN of random sizes: everything but its last layer frozen."""
    __tracebackhide__ = True
    check_only_the_head_trains(freeze_backbone, *_cnn_and_images(checks.fresh_generator()))


def check_head_trains_again(freeze_backbone, model, images, label: str) -> None:
    """``model``'s head is frozen, then ``freeze_backbone`` must leave only the head trainable."""
    __tracebackhide__ = True
    frozen_before = {"es": f"{label}, con la cabeza congelada antes", "en": f"{label}, head frozen before"}
    check_only_the_head_trains(freeze_backbone, freeze_head(model), images, frozen_before,
                               hint=HINTS["freeze_backbone_head"])


def check_freeze_backbone_unfreezes_the_head(freeze_backbone) -> None:
    """A CNN whose head was frozen before the call: the head must train again."""
    __tracebackhide__ = True
    check_head_trains_again(freeze_backbone, *_cnn_and_images(checks.fresh_generator()))


# ------------------------------------------------------------------- exercise 4: trainable optimizer
def check_optimizer_on(trainable_optimizer, model, images, lr: float, label: str) -> None:
    """An AdamW at ``lr`` holding exactly the trainable parameters: a step with gradients of zeros
    on the frozen ones leaves them where they were."""
    __tracebackhide__ = True
    hint, name = HINTS["trainable_optimizer"], f"trainable_optimizer({label}, lr={lr:g})"
    optimizer = checks.check_runs(trainable_optimizer, model, lr, name=name, hint=hint)
    checks.check_type(optimizer, torch.optim.AdamW, name=name, hint=hint)
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    frozen_held = sum(not p.requires_grad and id(p) in held for p in model.parameters())
    checks.check_true(held == trainable, name=name, hint=hint,
                      expected={"es": f"los {len(trainable)} parámetros entrenables, ningún congelado",
                                "en": f"the {len(trainable)} trainable parameters, no frozen one"},
                      got={"es": f"{len(held)} parámetros, {frozen_held} de ellos congelados",
                           "en": f"{len(held)} parameters, {frozen_held} of them frozen"})
    checks.check_close(optimizer.param_groups[0]["lr"], lr, name=f"{name}.param_groups[0]['lr']", hint=hint)
    frozen = {key: p for key, p in model.named_parameters() if not p.requires_grad}
    before = {key: p.detach().clone() for key, p in frozen.items()}
    for p in frozen.values():
        p.grad = torch.zeros_like(p)          # what zero_grad(set_to_none=False) leaves behind
    model(images).sum().backward()
    optimizer.step()
    moved = [key for key, p in frozen.items() if not torch.equal(p, before[key])]
    checks.check_equal(moved, [], hint=hint, name={
        "es": f"parámetros congelados que se movieron tras optimizer.step() ({label})",
        "en": f"frozen parameters that moved after optimizer.step() ({label})"})


def check_trainable_optimizer(trainable_optimizer) -> None:
    """An MLP of random width with a frozen backbone, and a random learning rate."""
    __tracebackhide__ = True
    generator = checks.fresh_generator()
    hidden, classes = draw(generator, 4, 40), draw(generator, 2, 9)
    with weights_from(generator):
        model = training.make_mlp(hidden=hidden, num_classes=classes)
    for p in model[:-1].parameters():
        p.requires_grad_(False)
    lr = draw(generator, 1, 9) * 10.0 ** -draw(generator, 2, 4)
    images = torch.randn(3, 1, 28, 28, generator=generator)
    check_optimizer_on(trainable_optimizer, model, images, lr,
                       f"make_mlp(hidden={hidden}, num_classes={classes}) | model[:-1]: requires_grad=False")


# ------------------------------------------------------------------------ exercise 5: shard indices
# Worked out by hand from the rules: 10 examples over 3 processes pad to 12 with 0 and 1 again;
# 7 over 4 pad to 8 with 0 again; 2 over 5 pad to 5 going round the two examples twice more.
BY_HAND = {(10, 3): [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]],
           (7, 4): [[0, 4], [1, 5], [2, 6], [3, 0]],
           (2, 5): [[0], [1], [0], [1], [0]]}
# The lesson's printout of DistributedSampler: 10 examples, 3 processes, shuffled with seed 0.
SHUFFLED_10_OVER_3 = {0: [[4, 5, 0, 2], [1, 3, 8, 4], [7, 9, 6, 1]],
                      1: [[5, 2, 9, 4], [6, 0, 3, 5], [1, 8, 7, 6]]}


def _shards(shard_indices, n, replicas, *, hint, **options) -> list:
    """Every process's share, from ``shard_indices`` with DistributedSampler switched off."""
    __tracebackhide__ = True
    shown = "".join(f", {key}={value}" for key, value in options.items())
    shares = []
    with distributed_sampler_off():
        for rank in range(replicas):
            name = f"shard_indices({n}, {replicas}, {rank}{shown})"
            share = checks.check_runs(shard_indices, n, replicas, rank, name=name, hint=hint, **options)
            checks.check_type(share, list, name=name, hint=hint)
            shares.append(share)
    return shares


def check_shards_on(shard_indices, n: int, replicas: int, expected: list, *, hint=None, **options) -> None:
    """Every process's share, from rank 0 to the last, is the one in ``expected``."""
    __tracebackhide__ = True
    hint = hint or HINTS["shard_indices"]
    shown = "".join(f", {key}={value}" for key, value in options.items())
    checks.check_equal(_shards(shard_indices, n, replicas, hint=hint, **options), expected, hint=hint,
                       name=f"[shard_indices({n}, {replicas}, rank{shown}) for rank in range({replicas})]")


def check_split_properties(shard_indices, n: int, replicas: int, *, hint=None, **options) -> list:
    """Equal shares of ⌈n / replicas⌉; read across the processes (rank 0's first index, rank 1's
    first, …, then everyone's second…) they give every example exactly once, then the padding, which
    repeats the start. Returns that order."""
    __tracebackhide__ = True
    hint = hint or HINTS["shard_indices"]
    shares = _shards(shard_indices, n, replicas, hint=hint, **options)
    size = math.ceil(n / replicas)
    shown = "".join(f", {key}={value}" for key, value in options.items())
    label = f"shard_indices({n}, {replicas}, rank{shown})"
    checks.check_equal([len(share) for share in shares], [size] * replicas, hint=hint, name={
        "es": f"longitudes de {label} para rank = 0…{replicas - 1}",
        "en": f"lengths of {label} for rank = 0…{replicas - 1}"})
    order = [share[i] for i in range(size) for share in shares]
    checks.check_equal(sorted(order[:n]), list(range(n)), hint=hint, name={
        "es": f"los {n} primeros índices leídos a través de los procesos, ordenados ({label})",
        "en": f"the first {n} indices read across the processes, sorted ({label})"})
    checks.check_equal(order[n:], order[:len(order) - n], hint=hint, name={
        "es": f"el relleno tras los {n} ejemplos (debe repetir el principio) ({label})",
        "en": f"the padding after the {n} examples (it must repeat the start) ({label})"})
    return order


def check_shard_indices_in_order(shard_indices) -> None:
    """Small cases worked out by hand, then the properties of a split of random size."""
    __tracebackhide__ = True
    hint = HINTS["shard_indices"]
    for (n, replicas), expected in BY_HAND.items():
        check_shards_on(shard_indices, n, replicas, expected)
    generator = checks.fresh_generator()
    n, replicas = draw(generator, 11, 60), draw(generator, 2, 7)
    order = check_split_properties(shard_indices, n, replicas)
    checks.check_equal(order[:n], list(range(n)), hint=hint, name={
        "es": f"el orden sin barajar, leído a través de los procesos (shard_indices({n}, {replicas}, rank))",
        "en": f"the unshuffled order, read across the processes (shard_indices({n}, {replicas}, rank))"})


def check_shard_indices_shuffled(shard_indices) -> None:
    """The lesson's printout for 10 examples, then a random split: its properties, the same result
    for the same seed + epoch, another order in another epoch."""
    __tracebackhide__ = True
    hint = HINTS["shard_indices_shuffled"]
    for epoch, expected in SHUFFLED_10_OVER_3.items():
        check_shards_on(shard_indices, 10, 3, expected, hint=hint, shuffle=True, seed=0, epoch=epoch)
    generator = checks.fresh_generator()
    n, replicas = draw(generator, 20, 60), draw(generator, 2, 7)
    seed, epoch = draw(generator, 0, 99), draw(generator, 1, 9)

    def split(seed, epoch):
        return check_split_properties(shard_indices, n, replicas, hint=hint, shuffle=True, seed=seed,
                                      epoch=epoch)

    name = f"shard_indices({n}, {replicas}, rank, shuffle=True, ...)"
    order, same, other = split(seed, epoch), split(seed + 1, epoch - 1), split(seed, epoch + 1)
    checks.check_true(order == same, name=name, hint=hint,
                      expected={"es": f"el mismo reparto con seed={seed}, epoch={epoch} que con "
                                      f"seed={seed + 1}, epoch={epoch - 1} (misma suma)",
                                "en": f"the same split with seed={seed}, epoch={epoch} as with "
                                      f"seed={seed + 1}, epoch={epoch - 1} (same sum)"},
                      got={"es": "repartos distintos", "en": "different splits"})
    checks.check_true(order != other, name=name, hint=hint,
                      expected={"es": f"otro orden en la época {epoch + 1} que en la {epoch}",
                                "en": f"another order in epoch {epoch + 1} than in epoch {epoch}"},
                      got={"es": "el mismo orden", "en": "the same order"})


# ---------------------------------------------------------------------- exercise 6: average gradients
def _gradients(model, x, y) -> dict:
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def per_rank_gradients(model, x, y, world: int) -> tuple[list, dict]:
    """Each of ``world`` processes' gradients on its share of the batch, and the whole batch's."""
    shares = [_gradients(model, x[rank::world], y[rank::world]) for rank in range(world)]
    return shares, _gradients(model, x, y)


def check_average_on(average_gradients, per_rank: list, expected: dict, label: str) -> None:
    """``average_gradients(per_rank)`` is a dict with ``expected``'s names and values."""
    __tracebackhide__ = True
    hint, name = HINTS["average_gradients"], f"average_gradients({label})"
    got = checks.check_runs(average_gradients, per_rank, name=name, hint=hint)
    checks.check_type(got, dict, name=name, hint=hint)
    checks.check_equal(sorted(got), sorted(expected), name=f"sorted({name})", hint=hint)
    for key, value in expected.items():
        checks.check_close(got[key], value, name=f"{name}[{key!r}]", hint=hint)


def check_average_gradients(average_gradients) -> None:
    """A case by hand, then the property that makes DDP work: the mean of equal shares' gradients is
    the whole batch's gradient."""
    __tracebackhide__ = True
    by_hand = [{"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0])},
               {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([4.0])}]
    check_average_on(average_gradients, by_hand, {"w": torch.tensor([2.0, 4.0]), "b": torch.tensor([2.0])},
                     "[{'w': [1., 2.], 'b': [0.]}, {'w': [3., 6.], 'b': [4.]}]")
    check_average_on(average_gradients, *random_ranks())


def random_ranks() -> tuple:
    """Per-rank gradients of a random MLP on a random batch split in equal shares, the whole batch's
    gradient, and a label: what ``check_average_on`` takes."""
    generator = checks.fresh_generator()
    world, hidden = draw(generator, 2, 4), draw(generator, 4, 30)
    batch = world * draw(generator, 1, 4)
    with weights_from(generator):
        model = _mlp(6, hidden, 3)
    x, y = torch.randn(batch, 6, generator=generator), torch.randint(0, 3, (batch,), generator=generator)
    return (*per_rank_gradients(model, x, y, world),
            f"world_size={world}, batch={batch}, MLP(6 → {hidden} → 3)")


def check_inputs_left_alone(average_gradients, per_rank: list, expected: dict, label: str) -> None:
    """``average_gradients`` returns a new dict holding ``expected`` and leaves every input tensor as
    it was."""
    __tracebackhide__ = True
    hint, name = HINTS["average_gradients_inputs"], f"average_gradients({label})"
    kept = [{key: value.clone() for key, value in grads.items()} for grads in per_rank]
    got = checks.check_runs(average_gradients, per_rank, name=name, hint=hint)
    changed = [f"per_rank[{rank}][{key!r}]"
               for rank, (grads, copy) in enumerate(zip(per_rank, kept, strict=True))
               for key in copy if not torch.equal(grads[key], copy[key])]
    checks.check_equal(changed, [], hint=hint, name={
        "es": f"gradientes de entrada modificados ({label})", "en": f"input gradients modified ({label})"})
    checks.check_true(all(got is not grads for grads in per_rank), name=name, hint=hint,
                      expected={"es": "un diccionario nuevo", "en": "a new dictionary"},
                      got={"es": "uno de los de entrada", "en": "one of the input ones"})
    check_average_on(average_gradients, per_rank, expected, label)


def check_average_gradients_leaves_inputs(average_gradients) -> None:
    """The gradients of random processes: inputs untouched, the result new (and right)."""
    __tracebackhide__ = True
    check_inputs_left_alone(average_gradients, *random_ranks())
