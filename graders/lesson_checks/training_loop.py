"""Lesson 04 · The training loop: the visible checks of its exercises, their harnesses, and hints.

The harnesses watch a student's loop from outside: a forward hook and a spy loss record what
happens to each batch and in which order, a spy optimizer records what ``.grad`` held each time it
was asked to take a step, and a planned validation loader makes the validation accuracy follow a
plan. Expected values come from what the spies recorded or from cases built so that the answer is
known (labels that agree with the model's prediction on exactly ``k`` examples), never from a
reference loop. While a check runs, the course's own loop (``training.run_epoch``,
``training.fit_model``) and model builders are switched off: the exercises ask for the student's.
"""

import contextlib
import copy
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from graders import checks
from graders.checks import say

HINTS = {
    "accuracy": {
        "es": "la clase predicha de cada fila es la posición de su mayor logit (sección 3, último "
              "párrafo); la exactitud es la fracción de filas en que coincide con la clase verdadera, "
              "devuelta como número de Python y no como tensor",
        "en": "each row's predicted class is the position of its largest logit (section 3, last "
              "paragraph); accuracy is the fraction of rows where it matches the true class, returned "
              "as a Python number, not a tensor",
    },
    "train_one_epoch": {
        "es": "cada lote recorre los cinco pasos de la sección 4, en su orden y con el modelo en modo "
              "entrenamiento; `.grad` suma en lugar de sobrescribir, así que el gradiente del lote "
              "anterior sigue ahí si nadie lo borra, y borrarlo justo antes del paso lo deja sin nada",
        "en": "each batch goes through the five steps of section 4, in their order and with the model "
              "in training mode; `.grad` adds up instead of overwriting, so the previous batch's "
              "gradient is still there unless something clears it, and clearing it right before the "
              "step leaves the step nothing to use",
        "more": "train_one_epoch",
    },
    "train_one_epoch_loss": {
        "es": "cada lote aporta su pérdida media multiplicada por su número de ejemplos, y la suma se "
              "divide entre el total de ejemplos, no entre el número de lotes: el último lote puede ser "
              "más pequeño (enunciado del ejercicio 2); devuelve un número de Python",
        "en": "each batch contributes its mean loss times its number of examples, and the sum is "
              "divided by the total number of examples, not by the number of batches: the last batch "
              "may be smaller (exercise 2's text); return a Python number",
    },
    "evaluate": {
        "es": "evaluar pide dos cosas distintas (sección 4, «Evaluar»): poner las capas en modo "
              "evaluación, que cambia Dropout y BatchNorm, y recorrer el loader sin construir el grafo; "
              "ninguna sustituye a la otra, y al salir el modelo vuelve al modo en que entró. La "
              "pérdida se pondera por el tamaño de cada lote, como en el ejercicio 2",
        "en": "evaluating takes two different things (section 4, \"Evaluating\"): putting the layers in "
              "evaluation mode, which changes Dropout and BatchNorm, and going through the loader "
              "without building the graph; neither replaces the other, and on the way out the model "
              "goes back to the mode it came in with. The loss is weighted by each batch's size, as "
              "in exercise 2",
        "more": "evaluate",
    },
    "fit": {
        "es": "en cada época, tu train_one_epoch y una sola evaluación con tu evaluate; el mejor estado "
              "solo cambia cuando la exactitud de validación mejora estrictamente, y `state_dict()` "
              "devuelve referencias a los tensores vivos, que el optimizador sigue cambiando: hace "
              "falta una copia de verdad (sección 7); al final, el modelo recupera ese estado",
        "en": "in every epoch, your train_one_epoch and a single evaluation with your evaluate; the "
              "best state only changes when validation accuracy strictly improves, and `state_dict()` "
              "returns references to the live tensors, which the optimizer keeps changing: it takes a "
              "real copy (section 7); at the end, the model gets that state back",
        "more": "fit",
    },
    "fit_history": {
        "es": "history guarda, por época, lo que devolvieron tu train_one_epoch y tu evaluate, con "
              "exactamente las claves del enunciado; un programador por época avanza una vez al final "
              "de cada época, después de entrenar (sección 6)",
        "en": "history keeps, per epoch, what your train_one_epoch and your evaluate returned, with "
              "exactly the keys of the exercise; a per-epoch scheduler steps once at the end of each "
              "epoch, after training (section 6)",
    },
    "accumulation_step": {
        "es": "los gradientes se suman en `.grad` mientras nadie los borre (sección 8): bórralos una "
              "sola vez antes de empezar, pondera la pérdida de cada micro-lote por su parte del lote "
              "grande y deja que el optimizador dé un único paso con la suma",
        "en": "gradients add up in `.grad` as long as nothing clears them (section 8): clear them once "
              "before you start, weigh each micro-batch's loss by its share of the large batch, and "
              "let the optimizer take a single step with the sum",
        "more": "accumulation_step",
    },
    "accumulation_loss": {
        "es": "la pérdida del lote grande es la suma de las pérdidas ya ponderadas de los micro-lotes "
              "(sección 8), devuelta como número de Python",
        "en": "the large batch's loss is the sum of the micro-batches' already weighted losses "
              "(section 8), returned as a Python number",
    },
    "make_classifier": {
        "es": "monta la red con capas de `nn` (la sección 2 describe los bloques convolución → "
              "BatchNorm → ReLU → max-pool, y cuántos parámetros tiene cada modelo); la salida son 10 "
              "logits por imagen, sin softmax (sección 3). Si no llega al 80 %, más canales o más épocas",
        "en": "build the network from `nn` layers (section 2 describes the convolution → BatchNorm → "
              "ReLU → max-pool blocks, and how many parameters each model has); the output is 10 "
              "logits per image, no softmax (section 3). If it falls short of 80 %, more channels or "
              "more epochs",
    },
    "concept_check": checks.CONCEPT_HINT,
}

MORE_HINTS = {
    "train_one_epoch": {
        "es": "Vuelve a la lista numerada de la sección 4 y a la celda que la sigue: allí los cinco "
              "pasos se repiten sobre un mismo lote; tu bucle hace lo mismo con cada lote del loader, "
              "después de llevarlo al dispositivo. El modo del modelo se fija una vez, antes del bucle, "
              "y la pérdida de cada lote se va acumulando ya multiplicada por su tamaño.",
        "en": "Go back to the numbered list of section 4 and the cell after it: there the five steps "
              "repeat on one and the same batch; your loop does the same with every batch of the "
              "loader, after moving it to the device. The model's mode is set once, before the loop, "
              "and each batch's loss is added up already multiplied by its size.",
    },
    "evaluate": {
        "es": "Piensa en tres momentos: al entrar, anota en qué modo estaba el modelo y pásalo a modo "
              "evaluación; en medio, todo el recorrido del loader dentro del contexto que impide "
              "construir el grafo (la celda de ejemplo de «Evaluar» lo usa), sumando la pérdida "
              "ponderada y los aciertos; al salir, devuelve el modelo al modo anotado.",
        "en": "Think of three moments: on entry, note which mode the model was in and switch it to "
              "evaluation mode; in the middle, the whole pass over the loader inside the context that "
              "stops the graph from being built (the example cell of \"Evaluating\" uses it), adding "
              "up the weighted loss and the hits; on exit, give the model back the mode you noted.",
    },
    "fit": {
        "es": "Guarda dos cosas fuera del bucle de épocas: la mejor exactitud vista (empieza por debajo "
              "de cualquier exactitud posible) y una copia independiente del estado de esa época, con "
              "su índice. Con `>` un empate no cambia nada. Después del bucle, carga la copia en el "
              "modelo; la celda de la sección 7 muestra por qué una referencia no sirve.",
        "en": "Keep two things outside the epoch loop: the best accuracy seen (starting below any "
              "possible accuracy) and an independent copy of that epoch's state, with its index. With "
              "`>` a tie changes nothing. After the loop, load the copy into the model; the cell of "
              "section 7 shows why a reference will not do.",
    },
    "accumulation_step": {
        "es": "N es el número total de ejemplos de todos los micro-lotes juntos. Cada micro-lote tiene "
              "su pasada hacia delante, su pérdida multiplicada por len(y) / N y su pasada hacia atrás; "
              "entre micro-lotes no se borra nada, y el optimizador solo interviene al principio (para "
              "borrar) y al final (el paso). La segunda celda de la sección 8 hace la acumulación.",
        "en": "N is the total number of examples of all micro-batches together. Each micro-batch gets "
              "its forward pass, its loss multiplied by len(y) / N and its backward pass; nothing is "
              "cleared between micro-batches, and the optimizer only acts at the start (to clear) and "
              "at the end (the step). The cell of section 8 does the accumulation.",
    },
}

CONCEPT_KEYS = ["softmax_before_loss", "eval_disables_grad", "grads_accumulate", "step_before_backward",
                "keep_last_epoch", "accumulation_matches", "clip_keeps_direction", "pin_memory_cpu",
                "normalize_with_test"]

CPU = torch.device("cpu")
BATCH_EVENTS = ["forward", "loss", "backward", "step"]
# The course's reference loop and model builders: the exercises ask for the student's own.
COURSE_LOOP = ("run_epoch", "fit_model")
COURSE_MODELS = ("make_cnn", "make_mlp")


# ---------------------------------------------------------------------------- helpers switched off
HELPER_OFF = {
    "es": "{name} está desactivado durante esta comprobación: el ejercicio pide tu propio código",
    "en": "{name} is switched off during this check: the exercise asks for your own code",
}


def switched_off(names, student_function=None):
    """Inside the block, ``course.training``'s ``names``, under any name, raise ``ShortcutUsed``."""
    from course import training  # here, not at the top: every kernel imports this module at start

    return checks.switched_off([(training, name) for name in names], HELPER_OFF,
                               getattr(student_function, "__globals__", {}))


@contextlib.contextmanager
def replaced(namespace: dict, values: dict):
    """Inside the block, ``namespace`` holds ``values``; afterwards those keys are put back.

    Unlike ``mock.patch.dict``, the rest of the namespace (a notebook's globals) is left alone.
    """
    missing = object()
    saved = {key: namespace.get(key, missing) for key in values}
    namespace.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is missing:
                namespace.pop(key, None)
            else:
                namespace[key] = value


def _run(function, *args, name, hint, helpers=COURSE_LOOP):
    """``function(*args)`` with the course helpers switched off; an exception becomes a failed check."""
    __tracebackhide__ = True
    with switched_off(helpers, function):
        return checks.check_runs(function, *args, name=name, hint=hint)


def _label(function: str, examples: int, batch_size: int) -> dict:
    return {"es": f"{function}(...) ({examples} ejemplos, lotes de {batch_size})",
            "en": f"{function}(...) ({examples} examples, batches of {batch_size})"}


def _with(label: dict, detail: dict) -> dict:
    return {language: f"{label[language]}: {detail[language]}" for language in label}


# --------------------------------------------------------------------------------------- recorders
class LoopRecorder:
    """What a loop did to a model, in order: forward passes, loss calls, backward passes, steps.

    Attach it with :meth:`watch`; pass :meth:`loss` as the loss function and a :class:`SpySGD`
    built with this recorder as the optimizer. For each event it keeps what a check needs: the
    model's mode at each forward pass, whether its output was in a graph, each loss value and batch
    size, whether a backward pass found gradients already in ``.grad``, and a copy of ``.grad`` at
    each step.
    """

    def __init__(self):
        self.events, self.modes, self.outputs_in_graph = [], [], []
        self.losses, self.sizes = [], []
        self.stale_backwards = 0
        self.step_grads = []
        self.parameters = []

    def watch(self, model: nn.Module) -> nn.Module:
        self.parameters = list(model.parameters())
        model.register_forward_hook(self._on_forward)
        return model

    def _on_forward(self, module, inputs, output):
        self.events.append("forward")
        self.modes.append(all(m.training for m in module.modules()))
        self.outputs_in_graph.append(output.requires_grad)

    def loss(self, logits, targets):
        """Cross-entropy that records its value and batch size, and the backward pass it starts."""
        value = nn.functional.cross_entropy(logits, targets)
        self.events.append("loss")
        self.losses.append(value.item())
        self.sizes.append(len(targets))
        if value.requires_grad:
            value.register_hook(self._on_backward)
        return value

    def _on_backward(self, grad):
        self.events.append("backward")
        if _holds_gradient(self.parameters):
            self.stale_backwards += 1
        return grad

    def on_step(self):
        self.events.append("step")
        self.step_grads.append([None if p.grad is None else p.grad.detach().clone()
                                for p in self.parameters])

    def weighted_loss(self) -> float:
        """The mean loss per example of every batch the loss function saw."""
        total = sum(value * size for value, size in zip(self.losses, self.sizes, strict=True))
        return total / max(sum(self.sizes), 1)

    def empty_steps(self) -> int:
        """Steps taken with no gradient at all in ``.grad``."""
        return sum(not any(g is not None and bool(g.abs().sum() > 0) for g in grads)
                   for grads in self.step_grads)


def _holds_gradient(parameters) -> bool:
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in parameters)


class SpySGD(torch.optim.SGD):
    """Plain SGD that tells a :class:`LoopRecorder` each time it is asked to take a step."""

    def __init__(self, params, recorder: LoopRecorder, lr: float = 0.1):
        super().__init__(params, lr=lr)
        self.recorder = recorder

    def step(self, closure=None):
        self.recorder.on_step()
        return super().step(closure)


def _first_batch_off(events, batches):
    """``(batch number, events of that batch)`` of the first batch whose events are not the expected."""
    for batch in range(max(batches, math.ceil(len(events) / len(BATCH_EVENTS)))):
        got = events[batch * len(BATCH_EVENTS):(batch + 1) * len(BATCH_EVENTS)]
        if got != BATCH_EVENTS:
            return batch, got
    return None, None


# ------------------------------------------------------------------------------ exercise 1: accuracy
def planned_logits(seed: int, examples: int, classes: int):
    """Random logits, targets that agree with the largest logit in exactly ``right`` rows, ``right``."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(examples, classes, generator=g)
    predicted = logits.max(dim=1).indices
    right = int(torch.randint(1, examples, (1,), generator=g))
    shift = torch.randint(1, classes, (examples,), generator=g)
    targets = (predicted + shift) % classes
    agree = torch.randperm(examples, generator=g)[:right]
    targets[agree] = predicted[agree]
    return logits, targets, right


def check_accuracy(accuracy, *, seed: int = 1401, examples: int = 12, classes: int = 5) -> None:
    """A case worked out by hand, then random logits whose targets agree on a known number of rows."""
    __tracebackhide__ = True
    hint = HINTS["accuracy"]
    by_hand = (torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [0.5, 0.2, 0.1]]),
               torch.tensor([0, 1, 0, 2]))
    *planned, right = planned_logits(seed, examples, classes)
    for (logits, targets), expected in [(by_hand, 0.5), (planned, right / examples)]:
        name = f"accuracy(logits {tuple(logits.shape)}, targets)"
        got = checks.check_runs(accuracy, logits, targets, name=name, hint=hint)
        checks.check_type(got, float, name=name, hint=hint)
        checks.check_close(got, expected, name=name, hint=hint)


# ----------------------------------------------------------------------- exercise 2: train_one_epoch
def _small_mlp(seed: int, widths) -> nn.Sequential:
    torch.manual_seed(seed)
    layers = []
    for inputs, outputs in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(inputs, outputs), nn.Tanh()]
    del layers[-1]  # logits out: no activation after the last layer
    mlp = nn.Sequential(*layers)
    return mlp


def _classification_loader(seed: int, examples: int, batch_size: int, features: int, classes: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(examples, features, generator=g)
    y = torch.randint(0, classes, (examples,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size)


def watch_train_one_epoch(train_one_epoch, *, seed: int, examples: int, batch_size: int, widths):
    """Run ``train_one_epoch`` on a small MLP left in eval mode, with every step recorded.

    Returns ``(recorder, returned value, batches in the loader)``.
    """
    __tracebackhide__ = True
    recorder = LoopRecorder()
    model = recorder.watch(_small_mlp(seed, widths))
    model.train(False)  # the function under test must switch it to training mode
    loader = _classification_loader(seed, examples, batch_size, widths[0], widths[-1])
    optimizer = SpySGD(model.parameters(), recorder, lr=0.2)
    returned = _run(train_one_epoch, model, loader, recorder.loss, optimizer, CPU,
                    name=_label("train_one_epoch", examples, batch_size), hint=HINTS["train_one_epoch"])
    return recorder, returned, len(loader)


def check_train_one_epoch_steps(train_one_epoch, *, seed: int = 1402, examples: int = 10,
                                batch_size: int = 4, widths=(5, 8, 3)) -> None:
    """Per batch: forward, loss, backward, step, in training mode, each step with its own gradient."""
    __tracebackhide__ = True
    hint = HINTS["train_one_epoch"]
    recorder, _, batches = watch_train_one_epoch(train_one_epoch, seed=seed, examples=examples,
                                                 batch_size=batch_size, widths=widths)
    label = _label("train_one_epoch", examples, batch_size)
    checks.check_equal(recorder.events.count("step"), batches, hint=hint, name=_with(
        label, {"es": f"pasos del optimizador ({batches} lotes)",
                "en": f"optimizer steps ({batches} batches)"}))
    batch, got = _first_batch_off(recorder.events, batches)
    if batch is not None:
        checks.fail(_with(label, {"es": f"lo que ocurrió en el lote {batch}",
                                  "en": f"what happened in batch {batch}"}),
                    say({"es": "los pasos no van en su orden", "en": "the steps are out of order"}),
                    " → ".join(BATCH_EVENTS), " → ".join(got) or "-", hint)
    checks.check_true(all(recorder.modes), hint=hint,
                      name=_with(label, {"es": "modo del modelo en cada pasada hacia delante",
                                         "en": "the model's mode at each forward pass"}),
                      expected={"es": "entrenamiento en todas", "en": "training in all of them"},
                      got={"es": f"model.training por pasada: {recorder.modes}",
                           "en": f"model.training per pass: {recorder.modes}"})
    checks.check_equal(recorder.stale_backwards, 0, hint=hint, name=_with(
        label, {"es": "pasadas hacia atrás que encontraron en .grad gradientes de otro lote",
                "en": "backward passes that found another batch's gradients in .grad"}))
    checks.check_equal(recorder.empty_steps(), 0, hint=hint, name=_with(
        label, {"es": "pasos del optimizador con .grad vacío", "en": "optimizer steps with an empty .grad"}))


def check_train_one_epoch_loss(train_one_epoch, *, seed: int = 1403, examples: int = 10,
                               batch_size: int = 4, widths=(5, 8, 3)) -> None:
    """The returned value is the mean loss per example of the batch losses the spy recorded."""
    __tracebackhide__ = True
    hint = HINTS["train_one_epoch_loss"]
    recorder, returned, _ = watch_train_one_epoch(train_one_epoch, seed=seed, examples=examples,
                                                  batch_size=batch_size, widths=widths)
    label = _label("train_one_epoch", examples, batch_size)
    checks.check_equal(sum(recorder.sizes), examples, hint=hint, name=_with(
        label, {"es": "ejemplos que pasaron por loss_fn", "en": "examples that went through loss_fn"}))
    checks.check_type(returned, float, name=label, hint=hint)
    checks.check_close(returned, recorder.weighted_loss(), name=label, hint=hint)


# ------------------------------------------------------------------------------ exercise 3: evaluate
def evaluation_case(seed: int, examples: int, batch_size: int, classes: int = 4, features: int = 6):
    """A model with BatchNorm and Dropout in training mode, and a loader whose labels agree with the
    model's evaluation-mode prediction on exactly ``right`` examples: ``(model, loader, right)``.

    The running statistics are unlike any single batch's, so evaluating in training mode (batch
    statistics, Dropout on) predicts other classes and gets another accuracy.
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(16, classes))
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(32, features, generator=g) * 2 + 1)
    x = torch.randn(examples, features, generator=g)
    judge = copy.deepcopy(model).eval()
    with torch.no_grad():
        predicted = judge(x).max(dim=1).indices
    right = int(torch.randint(1, examples, (1,), generator=g))
    y = (predicted + torch.randint(1, classes, (examples,), generator=g)) % classes
    agree = torch.randperm(examples, generator=g)[:right]
    y[agree] = predicted[agree]
    return model, DataLoader(TensorDataset(x, y), batch_size=batch_size), right


def check_evaluate_values(evaluate, *, seed: int = 1404, examples: int = 10, batch_size: int = 4) -> None:
    """``(mean loss per example, accuracy)``: the loss from what the spy loss saw, the accuracy known."""
    __tracebackhide__ = True
    hint = HINTS["evaluate"]
    model, loader, right = evaluation_case(seed, examples, batch_size)
    recorder = LoopRecorder()
    label = _label("evaluate", examples, batch_size)
    result = _run(evaluate, model, loader, recorder.loss, CPU, name=label, hint=hint)
    checks.check_type(result, tuple, name=label, hint=hint)
    checks.check_equal(len(result), 2, name={k: f"len({v})" for k, v in label.items()}, hint=hint)
    checks.check_equal(sum(recorder.sizes), examples, hint=hint, name=_with(
        label, {"es": "ejemplos que pasaron por loss_fn", "en": "examples that went through loss_fn"}))
    for position, what, expected in [(0, {"es": "pérdida", "en": "loss"}, recorder.weighted_loss()),
                                     (1, {"es": "exactitud", "en": "accuracy"}, right / examples)]:
        name = {k: f"{v}[{position}] ({what[k]})" for k, v in label.items()}
        checks.check_type(result[position], float, name=name, hint=hint)
        checks.check_close(result[position], expected, name=name, hint=hint)


def check_evaluate_leaves_no_trace(evaluate, *, seed: int = 1405, examples: int = 12,
                                   batch_size: int = 5) -> None:
    """No graph, no ``.grad``, no change to weights or BatchNorm statistics, the mode given back."""
    __tracebackhide__ = True
    hint = HINTS["evaluate"]
    for start_in_training in (True, False):
        model, loader, _ = evaluation_case(seed, examples, batch_size)
        recorder = LoopRecorder()
        recorder.watch(model).train(start_in_training)
        before = copy.deepcopy(model.state_dict())
        mode = "train()" if start_in_training else "eval()"
        label = {"es": f"evaluate(...) con el modelo en {mode}",
                 "en": f"evaluate(...) with the model in {mode}"}
        _run(evaluate, model, loader, nn.CrossEntropyLoss(), CPU, name=label, hint=hint)
        checks.check_true(recorder.outputs_in_graph != [] and not any(recorder.outputs_in_graph), hint=hint,
                          name=_with(label, {"es": "salidas del modelo", "en": "the model's outputs"}),
                          expected={"es": "sin grafo (requires_grad=False)",
                                    "en": "no graph (requires_grad=False)"},
                          got=f"requires_grad: {recorder.outputs_in_graph}")
        checks.check_true(all(p.grad is None for p in model.parameters()), hint=hint,
                          name=_with(label, {"es": ".grad de los parámetros", "en": "the parameters' .grad"}),
                          expected="None", got={"es": "gradientes calculados", "en": "gradients computed"})
        for key, value in model.state_dict().items():
            checks.check_close(value, before[key], hint=hint, name=_with(label, {
                "es": f"model.state_dict()[{key!r}], que no debe cambiar",
                "en": f"model.state_dict()[{key!r}], which must not change"}))
        checks.check_equal(sorted({m.training for m in model.modules()}), [start_in_training], hint=hint,
                           name=_with(label, {"es": "model.training al salir",
                                              "en": "model.training afterwards"}))


# ----------------------------------------------------------------------------------- exercise 4: fit
class PlannedValidation:
    """A validation loader whose labels make the accuracy follow a plan, one value per pass.

    Each pass records the model's weights, predicts with an identical copy and labels the first
    share of the examples with those predictions and the rest with another class.
    """

    def __init__(self, model: nn.Module, x: torch.Tensor, plan, classes: int):
        self.model, self.x, self.plan, self.classes = model, x, list(plan), classes
        self.twin = copy.deepcopy(model)
        self.dataset = TensorDataset(x, torch.zeros(len(x)))
        self.snapshots = []

    def __len__(self):
        return 2

    def __iter__(self):
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.twin.load_state_dict(state)
        share = self.plan[len(self.snapshots) % len(self.plan)]
        self.snapshots.append(state)
        halves = self.x.split(len(self.x) // 2)
        with torch.no_grad():
            predicted = torch.cat([self.twin(half).max(dim=1).indices for half in halves])
        right = round(share * len(self.x))
        labels = torch.where(torch.arange(len(self.x)) < right, predicted, (predicted + 1) % self.classes)
        return iter(list(zip(halves, labels.split(len(self.x) // 2), strict=True)))


class CallRecorder:
    """A stand-in for a function of the student's that records what each call returned."""

    def __init__(self, function):
        self.function, self.returned = function, []

    def __call__(self, *args, **kwargs):
        result = self.function(*args, **kwargs)
        self.returned.append(result)
        return result


@contextlib.contextmanager
def recording(function, *names):
    """Inside the block, the functions ``names`` of ``function``'s globals record their calls."""
    namespace = function.__globals__
    recorders = {name: CallRecorder(namespace[name]) for name in names if callable(namespace.get(name))}
    with replaced(namespace, recorders):
        yield {name: recorders.get(name, CallRecorder(None)) for name in names}


def watch_fit(fit, *, seed: int, plan, use_scheduler: bool):
    """Run ``fit`` for ``len(plan)`` epochs against a :class:`PlannedValidation`.

    Returns ``(model, history, validation, optimizer, calls)``; ``calls`` records what the student's
    ``train_one_epoch`` and ``evaluate`` returned inside ``fit``.
    """
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=4)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    validation = PlannedValidation(model, torch.randn(8, 4, generator=g), plan, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5) if use_scheduler else None
    with recording(fit, "train_one_epoch", "evaluate") as calls:
        history = _run(fit, model, train_loader, validation, nn.CrossEntropyLoss(), optimizer, CPU, len(plan),
                       scheduler, name=f"fit(..., epochs={len(plan)})", hint=HINTS["fit"])
    return model, history, validation, optimizer, calls


def check_fit_keeps_best(fit, *, seed: int = 1406, plan=(0.25, 0.75, 0.5, 0.625)) -> None:
    """One validation per epoch, the best epoch (first on a tie) reported and its weights loaded."""
    __tracebackhide__ = True
    hint = HINTS["fit"]
    model, history, validation, _, _ = watch_fit(fit, seed=seed, plan=plan, use_scheduler=False)
    epochs = len(plan)
    best = max(range(epochs), key=lambda epoch: (plan[epoch], -epoch))
    checks.check_type(history, dict, name=f"fit(..., epochs={epochs})", hint=hint)
    checks.check_equal(len(validation.snapshots), epochs, hint=hint,
                       name={"es": "recorridos de val_loader", "en": "passes over val_loader"})
    checks.check_equal(history.get("best_epoch"), best, hint=hint, name={
        "es": f"history['best_epoch'] (exactitudes de validación {list(plan)})",
        "en": f"history['best_epoch'] (validation accuracies {list(plan)})"})
    for key, value in model.state_dict().items():
        checks.check_close(value, validation.snapshots[best][key], hint=hint, name={
            "es": f"model.state_dict()[{key!r}] tras fit (se esperan los pesos de la época {best})",
            "en": f"model.state_dict()[{key!r}] after fit (expected: the weights of epoch {best})"})


def check_fit_history(fit, *, seed: int = 1407, plan=(0.5, 0.25, 0.75), use_scheduler: bool = True) -> None:
    """The lists hold, per epoch, what the student's train_one_epoch and evaluate returned."""
    __tracebackhide__ = True
    hint = HINTS["fit_history"]
    _, history, _, optimizer, calls = watch_fit(fit, seed=seed, plan=plan, use_scheduler=use_scheduler)
    epochs = len(plan)
    checks.check_type(history, dict, name=f"fit(..., epochs={epochs})", hint=hint)
    trained = calls["train_one_epoch"].returned
    evaluated = [result for result in calls["evaluate"].returned if isinstance(result, tuple)]
    checks.check_equal(len(trained), epochs, hint=hint, name={
        "es": "llamadas a tu train_one_epoch dentro de fit",
        "en": "calls to your train_one_epoch inside fit"})
    checks.check_equal(len(evaluated), epochs, hint=hint, name={
        "es": "llamadas a tu evaluate dentro de fit", "en": "calls to your evaluate inside fit"})
    expected = {"train_loss": trained, "val_loss": [loss for loss, _ in evaluated],
                "val_acc": [float(acc) for _, acc in evaluated]}
    for key, values in expected.items():
        checks.check_close(torch.tensor(history.get(key, []), dtype=torch.float64),
                           torch.tensor(values, dtype=torch.float64), name=f"history[{key!r}]", hint=hint)
    if use_scheduler:
        checks.check_close(optimizer.param_groups[0]["lr"], 0.5 * 0.5 ** epochs, hint=hint, name={
            "es": f"tasa de aprendizaje tras {epochs} épocas de StepLR(step_size=1, gamma=0.5)",
            "en": f"learning rate after {epochs} epochs of StepLR(step_size=1, gamma=0.5)"})


# --------------------------------------------------------------------- exercise 5: accumulation_step
def watch_accumulation_step(accumulation_step, *, seed: int, sizes, widths):
    """Run ``accumulation_step`` on a float64 MLP whose ``.grad`` holds leftovers from before.

    Returns ``(recorder, returned value, the large batch's loss, its gradient per parameter)``; the
    large batch's loss and gradient are those of all micro-batches concatenated into one batch.
    """
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(sum(sizes), widths[0], generator=g, dtype=torch.float64)
    y = torch.randint(0, widths[-1], (sum(sizes),), generator=g)
    model = _small_mlp(seed, widths).double()
    large = copy.deepcopy(model)
    large_loss = nn.functional.cross_entropy(large(x), y)
    large_grads = torch.autograd.grad(large_loss, list(large.parameters()))
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)   # leftovers of an earlier step
    recorder = LoopRecorder()
    recorder.watch(model)
    micro_batches = list(zip(x.split(list(sizes)), y.split(list(sizes)), strict=True))
    returned = _run(accumulation_step, model, nn.CrossEntropyLoss(), SpySGD(model.parameters(), recorder),
                    micro_batches, name=_accumulation_label(sizes), hint=HINTS["accumulation_step"])
    return recorder, returned, large_loss.item(), large_grads


def _accumulation_label(sizes) -> dict:
    return {"es": f"accumulation_step(..., micro-lotes de tamaños {list(sizes)})",
            "en": f"accumulation_step(..., micro-batches of sizes {list(sizes)})"}


def check_accumulation_step(accumulation_step, *, seed: int = 1408, sizes=(4, 4, 4),
                            widths=(5, 7, 3)) -> None:
    """A single step, taken with the large batch's gradient (leftovers cleared first)."""
    __tracebackhide__ = True
    hint = HINTS["accumulation_step"]
    recorder, _, _, large_grads = watch_accumulation_step(accumulation_step, seed=seed, sizes=sizes,
                                                          widths=widths)
    label = _accumulation_label(sizes)
    checks.check_equal(len(recorder.step_grads), 1, hint=hint, name=_with(
        label, {"es": "pasos del optimizador", "en": "optimizer steps"}))
    names = [name for name, _ in _small_mlp(seed, widths).named_parameters()]
    for name, got, expected in zip(names, recorder.step_grads[0], large_grads, strict=True):
        checks.check_close(torch.zeros_like(expected) if got is None else got, expected, hint=hint,
                           name=_with(label, {
                               "es": f".grad de {name} en el paso, frente al gradiente del lote grande",
                               "en": f".grad of {name} at the step, vs the large batch's gradient"}))


def check_accumulation_loss(accumulation_step, *, seed: int = 1409, sizes=(3, 5, 4),
                            widths=(5, 7, 3)) -> None:
    """The returned value is the large batch's loss, as a Python float."""
    __tracebackhide__ = True
    hint = HINTS["accumulation_loss"]
    _, returned, large_loss, _ = watch_accumulation_step(accumulation_step, seed=seed, sizes=sizes,
                                                         widths=widths)
    label = _accumulation_label(sizes)
    checks.check_type(returned, float, name=label, hint=hint)
    checks.check_close(returned, large_loss, name=label, hint=hint)


# ------------------------------------------------------------------------ exercise 6: make_classifier
def build_classifier(make_classifier) -> nn.Module:
    """``make_classifier()`` with the course's model builders switched off."""
    __tracebackhide__ = True
    hint = HINTS["make_classifier"]
    model = _run(make_classifier, name="make_classifier()", hint=hint, helpers=COURSE_MODELS)
    checks.check_type(model, nn.Module, name="make_classifier()", hint=hint)
    return model


def check_classifier_shape(make_classifier, *, batch: int = 2) -> nn.Module:
    """A new model each call, logits ``(N, 10)`` for images ``(N, 1, 28, 28)``."""
    __tracebackhide__ = True
    hint = HINTS["make_classifier"]
    model = build_classifier(make_classifier)
    images = torch.randn(batch, 1, 28, 28)
    name = f"make_classifier()(images {tuple(images.shape)})"
    logits = checks.check_runs(model, images, name=name, hint=hint)
    checks.check_shape(logits, (batch, 10), name=name, hint=hint)
    return model


def check_classifier(make_classifier, classifier, test_loader, device) -> None:
    """The builder works without the course's builders, and the trained ``classifier`` reaches 80 %."""
    __tracebackhide__ = True
    from course import training  # here, not at the top: every kernel imports this module at start

    hint = HINTS["make_classifier"]
    check_classifier_shape(make_classifier)
    checks.check_type(classifier, nn.Module, name="classifier", hint=hint)
    predictions, targets = training.predict(classifier, test_loader, device=device)
    score = (predictions == targets).double().mean().item()
    checks.check_true(score >= 0.80, hint=hint,
                      name={"es": f"exactitud del clasificador en {len(targets)} imágenes de test",
                            "en": f"classifier accuracy on {len(targets)} test images"},
                      expected="≥ 80 %", got=f"{score:.1%}")


def check_classifier_is_new(make_classifier, classifier) -> None:
    """Each call builds new, independent parameters: not the trained model, not a shared one."""
    __tracebackhide__ = True
    hint = HINTS["make_classifier"]
    first, second = check_classifier_shape(make_classifier, batch=5), build_classifier(make_classifier)
    shared = {p.data_ptr() for p in first.parameters()} & (
        {p.data_ptr() for p in second.parameters()} | {p.data_ptr() for p in classifier.parameters()})
    checks.check_true(first is not classifier and not shared, hint=hint,
                      name={"es": "dos llamadas a make_classifier()", "en": "two calls to make_classifier()"},
                      expected={"es": "dos modelos nuevos, sin parámetros compartidos",
                                "en": "two new models, sharing no parameters"},
                      got={"es": f"{len(shared)} parámetros compartidos",
                           "en": f"{len(shared)} shared parameters"})
