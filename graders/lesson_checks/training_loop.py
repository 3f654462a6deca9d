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
import importlib
import math
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from graders import checks
from graders.checks import say

HINTS = {
    "make_transform": {
        "es": "son dos transformaciones encadenadas, y el orden cuenta (sección 1, «Transformaciones y "
              "normalización»): primero la imagen pasa a un tensor float con valores en [0, 1] y forma "
              "(canal, alto, ancho); después se le resta la media y se divide entre la desviación "
              "típica que recibe la función, no unas fijas",
        "en": "it is two transforms chained, and the order matters (section 1, \"Transforms and "
              "normalisation\"): first the image becomes a float tensor with values in [0, 1] and shape "
              "(channel, height, width); then the mean the function receives is subtracted and the result "
              "divided by its standard deviation, not by fixed ones",
    },
    "make_loaders": {
        "es": "dos conjuntos de datos de torchvision, el de entrenamiento y el de prueba, leídos de `root` "
              "sin descargar nada y con la transformación que recibe la función; y dos DataLoader con "
              "el mismo tamaño de lote: solo el de entrenamiento se baraja, los dos usan `num_workers`, y "
              "la memoria fijada solo tiene sentido si `device` es CUDA (sección 1, «El DataLoader»)",
        "en": "two torchvision data sets, the training one and the test one, read from `root` without "
              "downloading anything and with the transform the function receives; and two DataLoaders "
              "with the same batch size: only the training one shuffles, both use `num_workers`, and "
              "pinned memory only makes sense when `device` is CUDA (section 1, \"The DataLoader\")",
        "more": "make_loaders",
    },
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
              "más pequeño (enunciado del ejercicio 3); devuelve un número de Python",
        "en": "each batch contributes its mean loss times its number of examples, and the sum is "
              "divided by the total number of examples, not by the number of batches: the last batch "
              "may be smaller (exercise 3's text); return a Python number",
    },
    "evaluate": {
        "es": "evaluar pide dos cosas distintas (sección 4, «Evaluar»): poner las capas en modo "
              "evaluación, que cambia Dropout y BatchNorm, y recorrer el loader sin construir el grafo; "
              "ninguna sustituye a la otra, y al salir el modelo vuelve al modo en que entró. La "
              "pérdida se pondera por el tamaño de cada lote, como en el ejercicio 3",
        "en": "evaluating takes two different things (section 4, \"Evaluating\"): putting the layers in "
              "evaluation mode, which changes Dropout and BatchNorm, and going through the loader "
              "without building the graph; neither replaces the other, and on the way out the model "
              "goes back to the mode it came in with. The loss is weighted by each batch's size, as "
              "in exercise 3",
        "more": "evaluate",
    },
    "adamw_step": {
        "es": "Adam guarda entre llamadas dos medias móviles por peso, la del gradiente y la de su "
              "cuadrado, y cuenta los pasos desde 1; como las dos empezaron en cero, se dividen por su "
              "corrección de sesgo antes de usarlas, y eps se suma fuera de la raíz (sección 5, «Dentro "
              "de Adam y AdamW»). `param` cambia en el sitio (in-place): dar otro valor al nombre "
              "dentro de la función no cambia el tensor de quien la llama",
        "en": "Adam keeps two running averages per weight between calls, of the gradient and of its "
              "square, and counts steps from 1; since both started at zero, they are divided by their "
              "bias correction before use, and eps is added outside the square root (section 5, "
              "\"Inside Adam and AdamW\"). `param` changes in place: giving the name another value "
              "inside the function does not change the caller's tensor",
        "more": "adamw_step",
    },
    "adamw_decay": {
        "es": "en AdamW el decaimiento no pasa por el gradiente ni por las medias móviles: en cada paso, "
              "antes del paso de Adam, cada peso pierde por su cuenta una fracción lr·weight_decay de sí "
              "mismo (sección 5, enunciado del ejercicio). Sumado al gradiente, el denominador adaptativo "
              "lo reescala: eso es Adam con L2",
        "en": "in AdamW the decay goes through neither the gradient nor the running averages: in every "
              "step, before Adam's step, each weight loses a fraction lr·weight_decay of itself on its "
              "own (section 5, the exercise's text). Added to the gradient, the adaptive denominator "
              "rescales it: that is Adam with L2",
    },
    "warmup_cosine": {
        "es": "dos tramos (sección 6, «Calentamiento y coseno»): una recta que sale de 0 y llega a max_lr "
              "justo en el paso warmup_steps, y medio coseno cuya fracción recorrida vale 0 en el paso "
              "warmup_steps y 1 en el último paso, total_steps − 1, donde la tasa es min_lr; devuelve "
              "un float de Python",
        "en": "two pieces (section 6, \"Warm-up and cosine\"): a straight line that starts at 0 and "
              "reaches max_lr right at step warmup_steps, and half a cosine whose fraction done is 0 at "
              "step warmup_steps and 1 at the last step, total_steps − 1, where the rate is min_lr; "
              "return a Python float",
        "more": "warmup_cosine",
    },
    "warmup_cosine_scheduler": {
        "es": "LambdaLR multiplica la tasa con la que se creó el optimizador por lo que devuelve tu "
              "función en cada paso: es un factor, no una tasa (sección 6, «Calentamiento y coseno»). "
              "El máximo es la lr del optimizador, y el factor del último paso lleva a min_lr",
        "en": "LambdaLR multiplies the rate the optimizer was created with by what your function returns "
              "at each step: it is a factor, not a rate (section 6, \"Warm-up and cosine\"). The peak is "
              "the optimizer's lr, and the last step's factor leads to min_lr",
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
              "sola vez antes de empezar, pondera la pérdida de cada microlote por su parte del lote "
              "grande y deja que el optimizador dé un único paso con la suma",
        "en": "gradients add up in `.grad` as long as nothing clears them (section 8): clear them once "
              "before you start, weigh each micro-batch's loss by its share of the large batch, and "
              "let the optimizer take a single step with the sum",
        "more": "accumulation_step",
    },
    "accumulation_loss": {
        "es": "la pérdida del lote grande es la suma de las pérdidas ya ponderadas de los microlotes "
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
    "log_epoch": {
        "es": "cada punto que escribe un SummaryWriter es una etiqueta, un valor y un paso, y se lee tal "
              "como se escribió (sección 11): las pérdidas por lote siguen numerándose de una época a la "
              "siguiente en lugar de volver a 0, y cada métrica de la época va con su propia etiqueta, "
              "escrita en la misma carpeta, y con la época como paso",
        "en": "each point a SummaryWriter writes is a tag, a value and a step, and it is read back as "
              "written (section 11): per-batch losses keep counting from one epoch to the next instead "
              "of going back to 0, and each epoch metric goes under its own tag, written into the same "
              "folder, with the epoch as its step",
        "more": "log_epoch",
    },
    "concept_check": checks.CONCEPT_HINT,
}

MORE_HINTS = {
    "make_loaders": {
        "es": "La clase de torchvision se construye dos veces, con `train=True` y con `train=False`, "
              "ambas con `download=False`. Cada DataLoader recibe su conjunto, el tamaño de lote, si baraja "
              "o no, `num_workers` y `pin_memory`; este último es un booleano que sale de comparar el "
              "tipo del dispositivo (`torch.device(device).type`) con \"cuda\", que vale tanto para "
              "\"cuda\" como para \"cuda:0\" o un `torch.device`.",
        "en": "The torchvision class is built twice, with `train=True` and with `train=False`, both with "
              "`download=False`. Each DataLoader gets its data set, the batch size, whether it shuffles, "
              "`num_workers` and `pin_memory`; the last one is a boolean that comes from comparing the "
              "device's type (`torch.device(device).type`) with \"cuda\", which works for \"cuda\", "
              "\"cuda:0\" and a `torch.device` alike.",
    },
    "log_epoch": {
        "es": "Con n = len(batch_losses), el lote i de la época `epoch` es el paso epoch · n + i. Recorre "
              "`metrics.items()` y escribe cada valor con su clave como etiqueta y `epoch` como paso, con "
              "`add_scalar` (en singular: `add_scalars` escribe cada curva en una subcarpeta, que "
              "TensorBoard trata como otro experimento).",
        "en": "With n = len(batch_losses), batch i of epoch `epoch` is step epoch · n + i. Go through "
              "`metrics.items()` and write each value with its key as the tag and `epoch` as the step, with "
              "`add_scalar` (singular: `add_scalars` writes each curve into a subfolder, which TensorBoard "
              "treats as another run).",
    },
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
    "adamw_step": {
        "es": "En la primera llamada `state` está vacío: guarda en él un contador de pasos a cero y dos "
              "tensores de ceros con la forma de `param`. En cada llamada: suma 1 al contador, mezcla el "
              "gradiente nuevo en cada media con su beta, divide cada media entre 1 menos su beta elevada "
              "al número de pasos, y resta a `param` lr veces la primera media corregida dividida entre la "
              "raíz de la segunda más eps. Las operaciones acabadas en `_`, y `-=`, cambian el tensor en "
              "su sitio.",
        "en": "On the first call `state` is empty: store in it a step counter at zero and two tensors of "
              "zeros shaped like `param`. On every call: add 1 to the counter, blend the new gradient into "
              "each average with its beta, divide each average by 1 minus its beta to the power of the "
              "number of steps, and subtract from `param` lr times the corrected first average divided by "
              "the square root of the second plus eps. Operations ending in `_`, and `-=`, change the "
              "tensor in place.",
    },
    "warmup_cosine": {
        "es": "Durante el calentamiento la tasa es proporcional al paso. Después, la fracción recorrida "
              "son los pasos dados desde el final del calentamiento divididos entre los que hay hasta el "
              "último paso (el último es total_steps − 1, no total_steps). El coseno de π por esa fracción "
              "va de 1 a −1; súmale 1 y divide entre 2 para que vaya de 1 a 0, y úsalo como la parte de "
              "la distancia entre min_lr y max_lr que queda por encima de min_lr.",
        "en": "During the warm-up the rate is proportional to the step. After it, the fraction done is "
              "the steps taken since the end of the warm-up divided by those up to the last step (the "
              "last one is total_steps − 1, not total_steps). The cosine of π times that fraction goes "
              "from 1 to −1; add 1 and divide by 2 so that it goes from 1 to 0, and use it as the share "
              "of the distance between min_lr and max_lr that stays above min_lr.",
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
        "es": "N es el número total de ejemplos de todos los microlotes juntos. Cada microlote tiene "
              "su pasada hacia delante, su pérdida multiplicada por len(y) / N y su pasada hacia atrás; "
              "entre microlotes no se borra nada, y el optimizador solo interviene al principio (para "
              "borrar) y al final (el paso). La segunda celda de la sección 8 hace la acumulación.",
        "en": "N is the total number of examples of all micro-batches together. Each micro-batch gets "
              "its forward pass, its loss multiplied by len(y) / N and its backward pass; nothing is "
              "cleared between micro-batches, and the optimizer only acts at the start (to clear) and "
              "at the end (the step). The cell of section 8 does the accumulation.",
    },
}

CONCEPT_KEYS = ["softmax_before_loss", "eval_disables_grad", "grads_accumulate", "step_before_backward",
                "keep_last_epoch", "accumulation_matches", "clip_keeps_direction", "pin_memory_cpu",
                "normalize_with_test", "adam_l2_is_adamw", "lambda_returns_rate", "inference_tensor_reuse",
                "log_step_restarts"]

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


# -------------------------------------------------------------------- exercise 1: the data, by hand
DATA_HELPERS_OFF = {
    "es": "{name} está desactivado durante esta comprobación: el ejercicio pide construir los datos "
          "con torchvision y DataLoader",
    "en": "{name} is switched off during this check: the exercise asks you to build the data with "
          "torchvision and DataLoader",
}
SPLIT_SIZES = {"train": 60_000, "test": 10_000}
# What DataLoader warns about the machine, not the answer: more workers than cores (the loaders built
# with workers are only looked at), pinned memory without a GPU. A grade cell must not write to stderr.
MACHINE_WARNINGS = (r"This DataLoader will create", r"'pin_memory' argument is set as true")


@contextlib.contextmanager
def quiet_machine_warnings():
    with warnings.catch_warnings():
        for message in MACHINE_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


def _random_image(generator: torch.Generator, height: int, width: int):
    """A greyscale PIL image of random pixels, and those pixels as a uint8 ``(1, H, W)`` tensor."""
    from torchvision.transforms.functional import to_pil_image

    pixels = torch.randint(0, 256, (1, height, width), generator=generator, dtype=torch.uint8)
    return to_pil_image(pixels), pixels


def check_make_transform(make_transform, *, mean=None, std=None, size=(28, 28)) -> None:
    """A uint8 PIL image becomes float32 ``(1, H, W)``: scaled to [0, 1], then normalised with the
    mean and standard deviation given (drawn afresh on each run unless the call fixes them)."""
    __tracebackhide__ = True
    hint = HINTS["make_transform"]
    g = checks.fresh_generator()
    mean = round(0.1 + 0.5 * torch.rand(1, generator=g).item(), 3) if mean is None else mean
    std = round(0.2 + 0.4 * torch.rand(1, generator=g).item(), 3) if std is None else std
    label = f"make_transform({mean}, {std})"
    transform = checks.check_runs(make_transform, mean, std, name=label, hint=hint)
    checks.check_true(callable(transform), name=label, hint=hint, got=checks.describe(transform),
                      expected={"es": "una transformación: algo que se llama con una imagen",
                                "en": "a transform: something you call with an image"})
    image, pixels = _random_image(g, *size)
    name = f"{label}(PIL image, {size[0]}×{size[1]} uint8 pixels)"
    got = checks.check_runs(transform, image, name=name, hint=hint)
    expected = (pixels.to(torch.float32) / 255 - mean) / std
    checks.check_close(got, expected, name=name, hint=hint, rtol=1e-5, atol=1e-5)


class PixelsPlus:
    """The transform the checks hand to ``make_loaders``: the raw pixels as float32 ``(1, 28, 28)``
    plus an offset drawn by the check, so that every image a loader gives can be traced back to the
    files (and to the transform having been applied)."""

    def __init__(self, offset: float):
        self.offset = offset

    def __call__(self, image):
        from torchvision.transforms.functional import pil_to_tensor

        return pil_to_tensor(image).to(torch.float32) + self.offset

    def __repr__(self):
        return f"PixelsPlus({self.offset})"


def raw_split(split: str):
    """``(images uint8 (N, 28, 28), labels (N,))`` of a FashionMNIST split, as the course reads it."""
    from course import data

    dataset = data.fashion_mnist(train=split == "train")
    return dataset.data, dataset.targets


def _labels_by_image(split: str) -> dict:
    """The raw bytes of each image of a split → the set of labels that image has there."""
    images, labels = raw_split(split)
    index = {}
    for pixels, label in zip(images.reshape(len(images), -1).numpy(), labels.tolist(), strict=True):
        index.setdefault(pixels.tobytes(), set()).add(label)
    return index


@contextlib.contextmanager
def data_helpers_off(student_function):
    """The course's own ways to the data (``fashion_mnist``, ``make_loader``, ``fashion_splits``) off."""
    from course import data, training  # here, not at the top: every kernel imports this module at start

    targets = [(data, "fashion_mnist"), (training, "make_loader"), (training, "fashion_splits")]
    with checks.switched_off(targets, DATA_HELPERS_OFF, getattr(student_function, "__globals__", {})):
        yield


def build_loaders(make_loaders, *, batch_size: int, offset: float, num_workers: int = 0, device="cpu"):
    """``make_loaders(root, PixelsPlus(offset), batch_size, ...)`` with the course's data helpers off;
    checks that it returns two DataLoaders and gives them back with the call's label."""
    __tracebackhide__ = True
    from course import data

    hint = HINTS["make_loaders"]
    root = data.ensure_fashion_mnist()
    label = (f"make_loaders(root, transform, {batch_size}, num_workers={num_workers}, "
             f"device={str(device)!r})")
    with data_helpers_off(make_loaders), quiet_machine_warnings():
        result = checks.check_runs(make_loaders, root, PixelsPlus(offset), batch_size, name=label,
                                   hint=hint, num_workers=num_workers, device=device)
    checks.check_type(result, (tuple, list), name=label, hint=hint)
    checks.check_equal(len(result), 2, hint=hint, name={"es": f"len({label})", "en": f"len({label})"})
    for which, loader in zip(("train_loader", "test_loader"), result, strict=True):
        checks.check_type(loader, DataLoader, name=f"{which} = {label}[{which == 'test_loader':d}]",
                          hint=hint)
    return result[0], result[1], label


def first_batch(loader, name: str, hint):
    """``next(iter(loader))`` as ``(images, labels)``, checked to be a pair of tensors."""
    __tracebackhide__ = True
    with quiet_machine_warnings():
        batch = checks.check_runs(lambda: next(iter(loader)), name=f"next(iter({name}))", hint=hint)
    checks.check_type(batch, (tuple, list), name=f"next(iter({name}))", hint=hint)
    checks.check_equal(len(batch), 2, name=f"len(next(iter({name})))", hint=hint)
    return batch[0], batch[1]


def _draw_offset(generator) -> float:
    return round(0.25 + torch.rand(1, generator=generator).item(), 3)


def check_loaders_batches(make_loaders, *, batch_size: int | None = None) -> None:
    """The training and test splits whole, and first batches of the right shapes and dtypes whose
    every image comes from the right split, through the transform given, with its own label."""
    __tracebackhide__ = True
    hint = HINTS["make_loaders"]
    g = checks.fresh_generator()
    batch_size = int(torch.randint(8, 41, (1,), generator=g)) if batch_size is None else batch_size
    offset = _draw_offset(g)
    train, test, _ = build_loaders(make_loaders, batch_size=batch_size, offset=offset)
    for split, loader in (("train", train), ("test", test)):
        name = f"{split}_loader"
        checks.check_equal(checks.check_runs(len, loader.dataset, name=f"len({name}.dataset)", hint=hint),
                           SPLIT_SIZES[split], name=f"len({name}.dataset)", hint=hint)
        images, labels = first_batch(loader, name, hint)
        checks.check_shape(images, (batch_size, 1, 28, 28), name=f"{name}: images", hint=hint)
        checks.check_dtype(images, torch.float32, name=f"{name}: images", hint=hint)
        checks.check_shape(labels, (batch_size,), name=f"{name}: labels", hint=hint)
        checks.check_dtype(labels, torch.int64, name=f"{name}: labels", hint=hint)
        known = _labels_by_image(split)
        raw = (images - offset).round().clamp(0, 255).to(torch.uint8).reshape(batch_size, -1).numpy()
        for row, (pixels, label) in enumerate(zip(raw, labels.tolist(), strict=True)):
            found = known.get(pixels.tobytes())
            checks.check_true(found is not None and label in found, hint=hint, name={
                "es": f"{name}: imagen {row} del primer lote (con la transformación {PixelsPlus(offset)})",
                "en": f"{name}: image {row} of the first batch (with the transform {PixelsPlus(offset)})"},
                expected={"es": f"una imagen de {split} con la transformación aplicada, y su etiqueta",
                          "en": f"a {split} image with the transform applied, and its label"},
                got={"es": f"etiqueta {label}; " + ("imagen que no está en " + split if found is None
                                                    else f"la imagen tiene la etiqueta {sorted(found)}"),
                     "en": f"label {label}; " + (f"an image that is not in {split}" if found is None
                                                 else f"the image has label {sorted(found)}")})


def check_loaders_order(make_loaders, *, batch_size: int | None = None, workers: int | None = None) -> None:
    """Training order new every epoch, test order always the data set's; ``num_workers`` as given to
    both loaders, ``pin_memory`` on only for a CUDA device (the loaders built with workers or for CUDA
    are looked at, not iterated)."""
    __tracebackhide__ = True
    hint = HINTS["make_loaders"]
    g = checks.fresh_generator()
    batch_size = int(torch.randint(8, 41, (1,), generator=g)) if batch_size is None else batch_size
    workers = int(torch.randint(1, 4, (1,), generator=g)) if workers is None else workers
    offset = _draw_offset(g)
    train, test, _ = build_loaders(make_loaders, batch_size=batch_size, offset=offset)
    first, second = first_batch(train, "train_loader", hint), first_batch(train, "train_loader", hint)
    checks.check_true(not torch.equal(first[1], second[1]) or not torch.equal(first[0], second[0]),
                      hint=hint, name={"es": "train_loader: primer lote de dos épocas seguidas",
                                       "en": "train_loader: first batch of two epochs in a row"},
                      expected={"es": "distintos (barajado de nuevo en cada época)",
                                "en": "different (reshuffled every epoch)"},
                      got={"es": f"los mismos ejemplos, etiquetas {first[1][:8].tolist()}…",
                           "en": f"the same examples, labels {first[1][:8].tolist()}…"})
    images, labels = raw_split("test")
    for epoch in range(2):
        got = first_batch(test, "test_loader", hint)
        name = {"es": f"test_loader: etiquetas del primer lote de la pasada {epoch + 1}",
                "en": f"test_loader: labels of the first batch of pass {epoch + 1}"}
        checks.check_close(got[1], labels[:batch_size], name=name, hint=hint)
        checks.check_close(got[0], images[:batch_size, None].to(torch.float32) + offset, hint=hint, name={
            "es": f"test_loader: imágenes del primer lote de la pasada {epoch + 1} "
                  "(en el orden del conjunto)",
            "en": f"test_loader: images of the first batch of pass {epoch + 1} (in the data set's order)"})
    for device, pinned in (("cpu", False), (torch.device("cuda:0"), True), ("cuda", True)):
        train, test, label = build_loaders(make_loaders, batch_size=batch_size, offset=offset,
                                           num_workers=workers, device=device)
        for which, loader in (("train_loader", train), ("test_loader", test)):
            checks.check_equal(loader.num_workers, workers, name=f"{which}.num_workers ({label})", hint=hint)
            checks.check_equal(bool(loader.pin_memory), pinned, name=f"{which}.pin_memory ({label})",
                               hint=hint)


# ------------------------------------------------------------------------------ exercise 2: accuracy
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


# ----------------------------------------------------------------------- exercise 3: train_one_epoch
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


# ------------------------------------------------------------------------------ exercise 4: evaluate
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


# --------------------------------------------------------------------------- exercise 5: adamw_step
def adam_shortcuts() -> list:
    """Torch's Adam and AdamW, as classes and as the functions that do one step of them."""
    adam, adamw = (importlib.import_module(f"torch.optim.{name}") for name in ("adam", "adamw"))
    functional = importlib.import_module("torch.optim._functional")
    return [(torch.optim, "Adam"), (torch.optim, "AdamW"), (adam, "Adam"), (adamw, "AdamW"),
            (adam, "adam"), (adamw, "adamw"), (functional, "adam"), (functional, "adamw"),
            (adam, "_single_tensor_adam"), (adam, "_multi_tensor_adam"), (adam, "_fused_adam"),
            (torch, "_fused_adam_"), (torch, "_fused_adamw_")]


def _adamw_label(lr, betas, eps, weight_decay) -> str:
    return f"adamw_step(param, grad, state, lr={lr:g}, betas={tuple(betas)}, eps={eps:g}, " \
           f"weight_decay={weight_decay:g})"


def adamw_case(generator: torch.Generator, steps: int, size: int = 8):
    """Float64 weights and ``steps`` gradients whose sizes range from 1e-9 to 10 (one size per
    weight), so that the adaptive denominator, the bias correction and where ``eps`` goes all show."""
    start = torch.randn(size, generator=generator, dtype=torch.float64)
    scales = torch.logspace(-9, 1, size, dtype=torch.float64)[torch.randperm(size, generator=generator)]
    grads = [torch.randn(size, generator=generator, dtype=torch.float64) * scales for _ in range(steps)]
    return start, grads


def torch_adamw_trajectory(start, grads, *, lr, betas, eps, weight_decay) -> list:
    """The weights after each step of ``torch.optim.AdamW`` fed with ``grads``."""
    param = nn.Parameter(start.clone())
    optimizer = torch.optim.AdamW([param], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                  foreach=False)
    trajectory = []
    for grad in grads:
        param.grad = grad.clone()
        optimizer.step(closure=None)
        trajectory.append(param.detach().clone())
    return trajectory


def check_adamw_trajectory(adamw_step, start, grads, *, lr, betas, eps, weight_decay, hint) -> None:
    """The student's steps, one by one, against ``torch.optim.AdamW`` fed the same gradients."""
    __tracebackhide__ = True
    expected = torch_adamw_trajectory(start, grads, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    label = _adamw_label(lr, betas, eps, weight_decay)
    param, state = start.clone(), {}
    for step, (grad, after) in enumerate(zip(grads, expected, strict=True), start=1):
        with checks.switched_off(adam_shortcuts(), HELPER_OFF, getattr(adamw_step, "__globals__", {})):
            checks.check_runs(adamw_step, param, grad.clone(), state, lr, betas, eps, weight_decay,
                              name=label, hint=hint)
        checks.check_close(param, after, hint=hint, name={
            "es": f"param tras {step} llamada(s) a {label}, frente a torch.optim.AdamW",
            "en": f"param after {step} call(s) to {label}, vs torch.optim.AdamW"})


def check_adamw_step_moments(adamw_step, *, seed=None, steps: int = 4, lr: float = 1e-2,
                             betas=(0.9, 0.999), eps: float = 1e-8) -> None:
    """Without weight decay, several steps match ``torch.optim.AdamW`` (so, Adam): both moments kept
    in ``state``, bias correction, ``eps`` outside the square root, ``param`` changed in place."""
    __tracebackhide__ = True
    generator = checks.fresh_generator() if seed is None else torch.Generator().manual_seed(seed)
    start, grads = adamw_case(generator, steps)
    check_adamw_trajectory(adamw_step, start, grads, lr=lr, betas=betas, eps=eps, weight_decay=0.0,
                           hint=HINTS["adamw_step"])


def check_adamw_step_decay(adamw_step, *, seed=None, steps: int = 4, lr: float = 1e-2,
                           betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.1) -> None:
    """Decoupled weight decay: with a zero gradient each weight shrinks by exactly ``1 − lr·wd``
    (Adam with an L2 term moves it by about ``lr``); with gradients, every step matches AdamW's."""
    __tracebackhide__ = True
    hint = HINTS["adamw_decay"]
    generator = checks.fresh_generator() if seed is None else torch.Generator().manual_seed(seed)
    start, grads = adamw_case(generator, steps)
    param = start.clone()
    label = _adamw_label(lr, betas, eps, weight_decay)
    with checks.switched_off(adam_shortcuts(), HELPER_OFF, getattr(adamw_step, "__globals__", {})):
        checks.check_runs(adamw_step, param, torch.zeros_like(param), {}, lr, betas, eps, weight_decay,
                          name=label, hint=hint)
    checks.check_close(param, start * (1 - lr * weight_decay), hint=hint, name={
        "es": f"param tras una llamada a {label} con gradiente cero (cada peso × (1 − lr·weight_decay))",
        "en": f"param after one call to {label} with a zero gradient (each weight × (1 − lr·weight_decay))"})
    check_adamw_trajectory(adamw_step, start, grads, lr=lr, betas=betas, eps=eps,
                           weight_decay=weight_decay, hint=hint)


# ------------------------------------------------------------------------ exercise 6: warmup_cosine
SCHEDULE_SHORTCUTS = [(torch.optim.lr_scheduler, name) for name in (
    "CosineAnnealingLR", "OneCycleLR", "SequentialLR", "LinearLR", "ChainedScheduler",
    "CosineAnnealingWarmRestarts", "PolynomialLR")]
SQRT_HALF = math.sqrt(0.5)


def schedule_case(generator: torch.Generator):
    """Random lengths (a decay whose length is a multiple of 4) and rates: ``(T, W, max_lr, min_lr)``."""
    warmup = int(torch.randint(2, 11, (), generator=generator))
    decay = 4 * int(torch.randint(2, 12, (), generator=generator))
    max_lr = float(10 ** (torch.rand((), generator=generator) * 2 - 2))
    min_lr = max_lr * float(torch.rand((), generator=generator)) * 0.2
    return warmup + decay + 1, warmup, max_lr, min_lr


def _schedule_label(function, total_steps, warmup_steps, max_lr, min_lr) -> str:
    return f"{function}(..., total_steps={total_steps}, warmup_steps={warmup_steps}, " \
           f"max_lr={max_lr:.4g}, min_lr={min_lr:.4g})"


def _scheduler_label(total_steps, warmup_steps, max_lr, min_lr) -> str:
    return f"warmup_cosine_scheduler(SGD(..., lr={max_lr:.4g}), total_steps={total_steps}, " \
           f"warmup_steps={warmup_steps}, min_lr={min_lr:.4g})"


def check_schedule_shape(rates, total_steps, warmup_steps, max_lr, min_lr, *, label, hint) -> None:
    """The rates of ``total_steps`` steps have the shape of a warm-up followed by half a cosine.

    Values worked out by hand: ``max_lr · step / warmup_steps`` during the warm-up, ``max_lr`` at
    ``warmup_steps``, ``min_lr`` at the last step, and at a quarter, half and three quarters of the
    decay ``min_lr + (max_lr − min_lr)·c`` with ``c = (1 + √½)/2, ½, (1 − √½)/2`` (``cos`` of π/4,
    π/2, 3π/4); in between, never rising, and symmetric about the middle of the decay.
    """
    __tracebackhide__ = True
    checks.check_equal(len(rates), total_steps, hint=hint, name={
        "es": f"número de tasas de {label}", "en": f"number of rates of {label}"})
    decay = total_steps - 1 - warmup_steps
    span = max_lr - min_lr
    known = {step: max_lr * step / warmup_steps for step in range(warmup_steps)}
    known[warmup_steps] = max_lr
    known[total_steps - 1] = min_lr
    if decay % 4 == 0:
        for quarter, share in [(1, (1 + SQRT_HALF) / 2), (2, 0.5), (3, (1 - SQRT_HALF) / 2)]:
            known[warmup_steps + quarter * decay // 4] = min_lr + span * share
    for step in sorted(known):
        checks.check_close(rates[step], known[step], hint=hint, name={
            "es": f"tasa del paso {step} de {label}", "en": f"rate at step {step} of {label}"})
    tolerance = 1e-9 * max_lr   # rounding only
    rising = [step for step in range(warmup_steps, total_steps - 1)
              if rates[step + 1] > rates[step] + tolerance]
    checks.check_true(not rising, hint=hint, name={
        "es": f"{label}, desde el paso {warmup_steps} hasta el último",
        "en": f"{label}, from step {warmup_steps} to the last one"},
        expected={"es": "una tasa que nunca sube", "en": "a rate that never rises"},
        got={"es": f"sube en los pasos {rising[:5]}", "en": f"it rises at steps {rising[:5]}"})
    lopsided = [warmup_steps + i for i in range(decay + 1)
                if abs(rates[warmup_steps + i] + rates[total_steps - 1 - i] - max_lr - min_lr) > tolerance]
    checks.check_true(not lopsided, hint=hint, name={
        "es": f"simetría del medio coseno de {label}", "en": f"symmetry of the half cosine of {label}"},
        expected={"es": "tasa(paso) + tasa(paso simétrico) = max_lr + min_lr",
                  "en": "rate(step) + rate(mirrored step) = max_lr + min_lr"},
        got={"es": f"no se cumple en los pasos {lopsided[:5]}", "en": f"it fails at steps {lopsided[:5]}"})


def warmup_cosine_rates(warmup_cosine, total_steps, warmup_steps, max_lr, min_lr, *, hint) -> list:
    """The student's rate at each step, each checked to be a Python float, shortcuts off."""
    __tracebackhide__ = True
    label = _schedule_label("warmup_cosine", total_steps, warmup_steps, max_lr, min_lr)
    rates = []
    with checks.switched_off(SCHEDULE_SHORTCUTS, HELPER_OFF, getattr(warmup_cosine, "__globals__", {})):
        for step in range(total_steps):
            rate = checks.check_runs(warmup_cosine, step, total_steps, warmup_steps, max_lr, min_lr,
                                     name=label, hint=hint)
            checks.check_type(rate, float, hint=hint, name={
                "es": f"tasa del paso {step} de {label}", "en": f"rate at step {step} of {label}"})
            rates.append(rate)
    return rates


def check_warmup_cosine(warmup_cosine, *, case=None) -> list:
    """A linear warm-up from 0 to ``max_lr``, then half a cosine down to ``min_lr`` at the last step.

    ``case`` is ``(total_steps, warmup_steps, max_lr, min_lr)``; by default, fresh random lengths.
    Returns the rates, for hidden tests to compare with a reference.
    """
    __tracebackhide__ = True
    hint = HINTS["warmup_cosine"]
    total_steps, warmup_steps, max_lr, min_lr = case or schedule_case(checks.fresh_generator())
    rates = warmup_cosine_rates(warmup_cosine, total_steps, warmup_steps, max_lr, min_lr, hint=hint)
    label = _schedule_label("warmup_cosine", total_steps, warmup_steps, max_lr, min_lr)
    check_schedule_shape(rates, total_steps, warmup_steps, max_lr, min_lr, label=label, hint=hint)
    return rates


def scheduler_rates(warmup_cosine_scheduler, total_steps, warmup_steps, max_lr, min_lr, *, hint) -> list:
    """The rates a loop of ``total_steps`` optimizer steps gets from the student's scheduler."""
    __tracebackhide__ = True
    label = _scheduler_label(total_steps, warmup_steps, max_lr, min_lr)
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=max_lr)
    rates = []
    with checks.switched_off(SCHEDULE_SHORTCUTS, HELPER_OFF,
                             getattr(warmup_cosine_scheduler, "__globals__", {})):
        scheduler = checks.check_runs(warmup_cosine_scheduler, optimizer, total_steps, warmup_steps, min_lr,
                                      name=label, hint=hint)
        checks.check_type(scheduler, torch.optim.lr_scheduler.LambdaLR, name=label, hint=hint)
        for step in range(total_steps):
            rate = scheduler.get_last_lr()[0]
            checks.check_close(optimizer.param_groups[0]["lr"], rate, hint=hint, name={
                "es": f"lr del optimizador en el paso {step}, frente a get_last_lr()",
                "en": f"the optimizer's lr at step {step}, vs get_last_lr()"})
            rates.append(rate)
            optimizer.step(closure=None)
            checks.check_runs(scheduler.step, name=label, hint=hint)
    return rates


def check_warmup_cosine_scheduler(warmup_cosine_scheduler, *, case=None) -> list:
    """A ``LambdaLR`` whose rates, in a loop of optimizer steps, follow the warm-up and the cosine,
    with the optimizer's own lr as the peak. Returns the rates (for hidden tests)."""
    __tracebackhide__ = True
    hint = HINTS["warmup_cosine_scheduler"]
    total_steps, warmup_steps, max_lr, min_lr = case or schedule_case(checks.fresh_generator())
    rates = scheduler_rates(warmup_cosine_scheduler, total_steps, warmup_steps, max_lr, min_lr, hint=hint)
    label = _scheduler_label(total_steps, warmup_steps, max_lr, min_lr) + ".get_last_lr()"
    check_schedule_shape(rates, total_steps, warmup_steps, max_lr, min_lr, label=label, hint=hint)
    return rates


# ----------------------------------------------------------------------------------- exercise 7: fit
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


# --------------------------------------------------------------------- exercise 8: accumulation_step
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
    return {"es": f"accumulation_step(..., microlotes de tamaños {list(sizes)})",
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


# ------------------------------------------------------------------------ exercise 9: make_classifier
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
                      name={"es": f"exactitud del clasificador en {len(targets)} imágenes de prueba",
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


# --------------------------------------------------------------------------- exercise 10: log_epoch
def watch_log_epoch(log_epoch, *, epochs: int, batches: int, tags, generator: torch.Generator):
    """Call ``log_epoch`` once per epoch with one ``SummaryWriter`` on a fresh folder, flush the
    writer, and read that folder back (with ``course.tracking``) before the writer is closed.

    The check flushes: on a local disk the writer's thread usually writes within milliseconds, so
    whether an answer flushes could only be told apart by a race.

    Returns ``(scalars read back, the losses given per epoch, the metrics given per epoch)``.
    """
    __tracebackhide__ = True
    import tempfile

    from course import tracking  # here, not at the top: it imports tensorboard

    losses = [[round(v, 4) for v in (0.2 + 2 * torch.rand(batches, generator=generator)).tolist()]
              for _ in range(epochs)]
    metrics = [{tag: round(torch.rand(1, generator=generator).item(), 4) for tag in tags}
               for _ in range(epochs)]
    with tempfile.TemporaryDirectory() as folder:
        summary = tracking.SummaryWriter(folder)
        try:
            for number, (batch_losses, epoch_metrics) in enumerate(zip(losses, metrics, strict=True)):
                checks.check_runs(log_epoch, summary, number, batch_losses, epoch_metrics,
                                  name=f"log_epoch(writer, {number}, batch_losses, metrics)",
                                  hint=HINTS["log_epoch"])
            summary.flush()
            scalars = tracking.read_scalars(folder)
        finally:
            summary.close()
    return scalars, losses, metrics


def _check_points(scalars: dict, tag: str, steps, values, *, what: dict, hint) -> None:
    __tracebackhide__ = True
    points = scalars.get(tag, [])
    name = {language: f"{text} ({tag!r})" for language, text in what.items()}
    checks.check_true(tag in scalars, name=name, hint=hint, expected=repr(tag), got={
        "es": f"etiquetas en la carpeta del escritor: {sorted(scalars)}",
        "en": f"tags in the writer's folder: {sorted(scalars)}"})
    checks.check_equal([step for step, _ in points], list(steps), hint=hint,
                       name={language: f"{text}: steps" if language == "en" else f"{text}: pasos"
                             for language, text in name.items()})
    checks.check_close(torch.tensor([value for _, value in points], dtype=torch.float64),
                       torch.tensor(values, dtype=torch.float32).double(), hint=hint,
                       name={language: f"{text}: values" if language == "en" else f"{text}: valores"
                             for language, text in name.items()})


def check_log_epoch_steps(log_epoch, *, epochs: int = 3, batches: int = 4,
                          tags=("accuracy/val", "lr")) -> None:
    """Every batch loss under ``loss/train``, at a step that keeps counting across epochs."""
    __tracebackhide__ = True
    hint = HINTS["log_epoch"]
    scalars, losses, _ = watch_log_epoch(log_epoch, epochs=epochs, batches=batches, tags=tags,
                                         generator=checks.fresh_generator())
    _check_points(scalars, "loss/train", range(epochs * batches), [v for epoch in losses for v in epoch],
                  hint=hint, what={"es": f"pérdidas por lote de {epochs} épocas de {batches} lotes",
                                   "en": f"per-batch losses of {epochs} epochs of {batches} batches"})


def check_log_epoch_metrics(log_epoch, *, epochs: int = 3, batches: int = 2,
                            tags=("accuracy/val", "lr")) -> None:
    """Every metric under its own tag, one point per epoch, at the epoch's number."""
    __tracebackhide__ = True
    hint = HINTS["log_epoch"]
    scalars, _, metrics = watch_log_epoch(log_epoch, epochs=epochs, batches=batches, tags=tags,
                                          generator=checks.fresh_generator())
    for tag in tags:
        _check_points(scalars, tag, range(epochs), [epoch[tag] for epoch in metrics], hint=hint,
                      what={"es": f"métrica de época tras {epochs} épocas",
                            "en": f"epoch metric after {epochs} epochs"})
