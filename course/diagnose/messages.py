"""What ``diagnose`` says, in each edition's language: a message and a line of advice per finding.

Taught in lesson 05 (debugging_lab), section 0.

``MESSAGES[language][code]`` is ``(message, advice)``; the message's ``{fields}`` are filled in with
what the observer saw. The other keys are the words the report is built from; a pair of forms is
``(singular, plural)`` (see :func:`plural`).
"""

MESSAGES = {
    "en": {
        "grads_not_cleared": (
            "backward() added this step's gradients on top of the previous ones ({params}): "
            "nothing cleared .grad, so every update uses a growing sum of old gradients.",
            "call optimizer.zero_grad() at the start of every step, before loss.backward().",
        ),
        "step_before_backward": (
            "optimizer.step() ran before loss.backward() in the same step, so it applied stale "
            "or missing gradients.",
            "keep the order zero_grad() → forward → loss → backward() → step().",
        ),
        "params_unchanged": (
            "{tensors} in {steps}: {params}.",
            "make sure the step calls optimizer.step() after loss.backward(), that the optimizer "
            "was built on model.parameters(), and that the loss depends on those parameters.",
        ),
        "eval_mode": (
            "a training forward pass ran in evaluation mode (in eval: {modules}); Dropout and "
            "BatchNorm behave as at test time, so the model trains on the wrong computation.",
            "call model.train() at the start of each training step, or restore the mode an "
            "evaluation found (mode = model.training ... model.train(mode)).",
        ),
        "no_grad_missing": (
            "a forward pass ran with gradients on, but no backward() used its graph: time and "
            "memory spent recording a graph nobody needs.",
            "wrap evaluation and monitoring passes in torch.no_grad() (or torch.inference_mode()).",
        ),
        "graph_kept": (
            "{what}: the graph of every step stays alive and memory keeps growing.",
            "keep numbers, not tensors: use loss.item() (or .detach()) for logs and running "
            "totals, and return loss.item().",
        ),
        "graph_kept_returned": "the step returned a tensor still attached to the graph ({what})",
        "graph_kept_alive": (
            "1 graph node built in this step was still alive after it ended",
            "{count} graph nodes built in this step were still alive after it ended",
        ),
        "graph_kept_why": "something keeps a tensor with a grad_fn: a running total, a list of losses...",
        "unchanged_tensors": (
            "1 parameter tensor did not change",
            "{count} parameter tensors did not change",
        ),
        "steps": ("1 step", "{count} steps"),
        "nan_or_inf": (
            "non-finite values (NaN or Inf) appeared in {what} at this step.",
            "lower the learning rate (try 10x smaller), normalise the inputs or clip the "
            "gradients; stop at the first non-finite loss to see where it starts.",
        ),
        "nan_loss": "the loss",
        "nan_grads": "the gradients of {params}",
        "nan_params": "the parameters {params}",
        "shape_mismatch": (
            "{operation} compared a prediction of shape {input} with a target of shape {target}; "
            "broadcasting makes it {result}, so the loss is wrong and no error says so.",
            "make the shapes equal: target.view_as(pred), or pred.squeeze(-1) when the model has "
            "one output.",
        ),
        "softmax_before_loss": (
            "{operation} received probabilities (rows that sum to 1) instead of raw logits; it "
            "applies log_softmax itself, so the gradients shrink and training stalls.",
            "remove the softmax from the model and give the loss the raw logits; apply softmax "
            "only when you need probabilities.",
        ),
        "sigmoid_before_logits_loss": (
            "{operation} (BCEWithLogitsLoss) received a sigmoid's output instead of raw logits; it "
            "applies the sigmoid itself, so the loss cannot go below a floor, the gradients shrink "
            "and the probabilities are squashed between 0.5 and 0.73.",
            "remove the sigmoid from the model and give the loss the raw logits (or keep it and use "
            "BCELoss, less stable); apply torch.sigmoid only when you need probabilities.",
        ),
        "device_mismatch": (
            "the step raised a device error: {error}",
            "move the batch to the model's device inside the step: "
            "device = next(model.parameters()).device; x, y = x.to(device), y.to(device).",
        ),
        "pickled_model": (
            "torch.load refused a whole pickled model: since PyTorch 2.6 it reads only weights "
            "by default (weights_only=True). {error}",
            "save model.state_dict() and load it into a freshly built model with "
            "model.load_state_dict(torch.load(path)).",
        ),
        "inplace_modified": (
            "backward() failed because an in-place operation overwrote a tensor autograd had "
            "saved: {error}",
            "replace the in-place operation (x += ..., x.relu_(), x[...] = ...) on forward-pass "
            "tensors with an out-of-place one (x = x + ...).",
        ),
        "step_raised": (
            "the step raised {kind}: {error}",
            "run the step once on its own and read the traceback; the other checks need a step "
            "that finishes.",
        ),
        "header": ("diagnose · {name} · {steps} step observed",
                   "diagnose · {name} · {steps} steps observed"),
        "none": "no problems found.",
        "some": ("{count} problem found:", "{count} problems found:"),
        "whole_model": "the whole model",
        "step": "step",
        "fix": "fix",
        "shape": "shape",
        "more": "and {count} more",
    },
    "es": {
        "grads_not_cleared": (
            "backward() sumó los gradientes de este paso a los del anterior ({params}): nadie "
            "vació .grad, así que cada actualización usa una suma creciente de gradientes viejos.",
            "llama a optimizer.zero_grad() al principio de cada paso, antes de loss.backward().",
        ),
        "step_before_backward": (
            "optimizer.step() se ejecutó antes que loss.backward() dentro del mismo paso, así que "
            "aplicó gradientes viejos o inexistentes.",
            "respeta el orden zero_grad() → pasada hacia delante → pérdida → backward() → step().",
        ),
        "params_unchanged": (
            "{tensors} en {steps}: {params}.",
            "comprueba que el paso llama a optimizer.step() después de loss.backward(), que el "
            "optimizador se creó con model.parameters() y que la pérdida depende de esos parámetros.",
        ),
        "eval_mode": (
            "una pasada hacia delante de entrenamiento se hizo en modo evaluación (en eval: {modules}); "
            "Dropout y BatchNorm se comportan como en la prueba, así que el modelo entrena un cálculo "
            "equivocado.",
            "llama a model.train() al principio de cada paso de entrenamiento, o restaura el modo "
            "que encontró la evaluación (modo = model.training ... model.train(modo)).",
        ),
        "no_grad_missing": (
            "una pasada hacia delante se hizo con los gradientes activados, pero ningún backward() "
            "usó su grafo: tiempo y memoria gastados en grabar un grafo que nadie necesita.",
            "envuelve las pasadas de evaluación y de seguimiento en torch.no_grad() (o "
            "torch.inference_mode()).",
        ),
        "graph_kept": (
            "{what}: el grafo de cada paso sigue vivo y la memoria no para de crecer.",
            "guarda números, no tensores: usa loss.item() (o .detach()) para registros y "
            "acumulados, y devuelve loss.item().",
        ),
        "graph_kept_returned": "el paso devolvió un tensor todavía unido al grafo ({what})",
        "graph_kept_alive": (
            "1 nodo del grafo creado en este paso seguía vivo al terminar",
            "{count} nodos del grafo creados en este paso seguían vivos al terminar",
        ),
        "graph_kept_why": "algo guarda un tensor con grad_fn: un acumulado, una lista de pérdidas...",
        "unchanged_tensors": (
            "1 tensor de parámetros no cambió",
            "{count} tensores de parámetros no cambiaron",
        ),
        "steps": ("1 paso", "{count} pasos"),
        "nan_or_inf": (
            "aparecieron valores no finitos (NaN o Inf) en {what} en este paso.",
            "baja la tasa de aprendizaje (prueba 10 veces menor), normaliza las entradas o recorta "
            "los gradientes; para en la primera pérdida no finita para ver dónde empieza.",
        ),
        "nan_loss": "la pérdida",
        "nan_grads": "el gradiente de {params}",
        "nan_params": "los parámetros {params}",
        "shape_mismatch": (
            "{operation} comparó una predicción de forma {input} con un objetivo de forma "
            "{target}; el broadcasting lo convierte en {result}, así que la pérdida está mal y "
            "ningún error lo dice.",
            "iguala las formas: target.view_as(pred), o pred.squeeze(-1) si el modelo tiene una "
            "sola salida.",
        ),
        "softmax_before_loss": (
            "{operation} recibió probabilidades (filas que suman 1) en lugar de logits; la pérdida "
            "ya aplica log_softmax, así que los gradientes se encogen y el entrenamiento se atasca.",
            "quita el softmax del modelo y pasa a la pérdida los logits tal cual; aplica softmax "
            "solo cuando necesites probabilidades.",
        ),
        "sigmoid_before_logits_loss": (
            "{operation} (BCEWithLogitsLoss) recibió la salida de un sigmoide en lugar de logits; la "
            "pérdida ya aplica el sigmoide, así que no puede bajar de cierto mínimo, los gradientes se "
            "encogen y las probabilidades quedan aplastadas entre 0.5 y 0.73.",
            "quita el sigmoide del modelo y pasa a la pérdida los logits tal cual (o consérvalo y usa "
            "BCELoss, menos estable); aplica torch.sigmoid solo cuando necesites probabilidades.",
        ),
        "device_mismatch": (
            "el paso lanzó un error de dispositivo: {error}",
            "mueve el lote al dispositivo del modelo dentro del paso: "
            "device = next(model.parameters()).device; x, y = x.to(device), y.to(device).",
        ),
        "pickled_model": (
            "torch.load rechazó un modelo entero guardado con pickle: desde PyTorch 2.6 solo lee "
            "pesos por defecto (weights_only=True). {error}",
            "guarda model.state_dict() y cárgalo en un modelo recién construido con "
            "model.load_state_dict(torch.load(ruta)).",
        ),
        "inplace_modified": (
            "backward() falló porque una operación in-place sobrescribió un tensor que autograd "
            "había guardado: {error}",
            "cambia la operación in-place (x += ..., x.relu_(), x[...] = ...) sobre tensores de la "
            "pasada hacia delante por una que cree un tensor nuevo (x = x + ...).",
        ),
        "step_raised": (
            "el paso lanzó {kind}: {error}",
            "ejecuta el paso una vez por separado y lee el traceback; las demás comprobaciones "
            "necesitan un paso que termine.",
        ),
        "header": ("diagnose · {name} · {steps} paso observado",
                   "diagnose · {name} · {steps} pasos observados"),
        "none": "ningún problema encontrado.",
        "some": ("{count} problema encontrado:", "{count} problemas encontrados:"),
        "whole_model": "todo el modelo",
        "step": "paso",
        "fix": "arreglo",
        "shape": "forma",
        "more": "y {count} más",
    },
}


def plural(forms, count) -> str:
    """``(singular, plural)`` chosen by ``count`` and filled in with it."""
    return forms[count != 1].format(count=count)


def name_list(names, words, limit=3) -> str:
    """The first ``limit`` names, then "and N more" in the language of ``words``."""
    names = list(names)
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += " " + words["more"].format(count=len(names) - limit)
    return shown
