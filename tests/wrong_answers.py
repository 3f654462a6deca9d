"""Plausible wrong answers, one per exercise that has a second hint: the mistake a student is likely
to make, not a crash. :mod:`test_answer_cells` checks that each fails its check with a message that
says what was expected and what was got, and that the hint the message offers works."""

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "01_tensors": {
        # the size-1 dimensions in each other's place: an (M, N) result
        "pairwise_distances": '''
def pairwise_distances(a, b):
    differences = a[None, :, :] - b[:, None, :]
    return differences.pow(2).sum(dim=-1).sqrt()
''',
        # divides by the sum of the whole matrix, not each row's
        "normalize_rows": '''
def normalize_rows(counts):
    return counts / counts.sum()
''',
    },
    "02_autograd": {
        # divides the central difference by eps instead of 2·eps
        "finite_difference_grad": '''
def finite_difference_grad(f, x, eps=1e-6):
    grad = torch.zeros(x.shape, dtype=x.dtype)
    for i in range(x.numel()):
        step = torch.zeros(x.shape, dtype=x.dtype)
        step.view(-1)[i] = eps
        grad.view(-1)[i] = (f(x + step) - f(x - step)) / eps
    return grad
''',
        # one backward() per output: the right gradients, but the engine is entered once per output
        "weighted_backward": '''
def weighted_backward(outputs, weights):
    for output, weight in zip(outputs, weights):
        gradient = weight if isinstance(weight, torch.Tensor) else torch.full_like(output, weight)
        output.backward(gradient, retain_graph=True)
''',
        # the first derivative is taken without create_graph: it cannot be differentiated again
        "second_derivative": '''
def second_derivative(f, x):
    x = x.detach().requires_grad_(True)
    (first,) = torch.autograd.grad(f(x).sum(), x)
    (second,) = torch.autograd.grad(first.sum(), x)
    return second
''',
        # the straight-through estimator: the gradient passes unchanged where x was clipped too
        "clipped_identity": '''
class ClippedIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, low, high):
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None, None
''',
        # no ReLU mask on the way back: the gradient goes through the ReLU as if it were the identity
        "manual_backward": '''
def manual_backward(x, targets, w1, b1, w2, b2):
    z1 = x @ w1.T + b1
    a1 = torch.relu(z1)
    logits = a1 @ w2.T + b2
    grad_logits = (logits.softmax(dim=1) - F.one_hot(targets, logits.shape[1])) / len(targets)
    grad_z1 = grad_logits @ w2
    return grad_z1.T @ x, grad_z1.sum(dim=0), grad_logits.T @ a1, grad_logits.sum(dim=0)
''',
        # pushes gradients with = instead of +=: a value used twice keeps only its last share
        "value_engine": '''
class Value:
    def __init__(self, data, children=(), local=()):
        self.data, self.grad = float(data), 0.0
        self.children, self.local = children, local

    def _make(self, other):
        return other if isinstance(other, Value) else Value(other)

    def __add__(self, other):
        other = self._make(other)
        return Value(self.data + other.data, (self, other), (1.0, 1.0))

    def __mul__(self, other):
        other = self._make(other)
        return Value(self.data * other.data, (self, other), (other.data, self.data))

    def __pow__(self, k):
        return Value(self.data ** k, (self,), (k * self.data ** (k - 1),))

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        return self + (-self._make(other))

    def __truediv__(self, other):
        return self * self._make(other) ** -1

    def __radd__(self, other):
        return self + other

    def __rmul__(self, other):
        return self * other

    def __rsub__(self, other):
        return self._make(other) - self

    def __rtruediv__(self, other):
        return self._make(other) / self

    def tanh(self):
        t = math.tanh(self.data)
        return Value(t, (self,), (1 - t * t,))

    def relu(self):
        return Value(max(0.0, self.data), (self,), (float(self.data > 0),))

    def exp(self):
        return Value(math.exp(self.data), (self,), (math.exp(self.data),))

    def log(self):
        return Value(math.log(self.data), (self,), (1 / self.data,))

    def backward(self):
        topo, seen = [], set()

        def build(v):
            if v not in seen:
                seen.add(v)
                for child in v.children:
                    build(child)
                topo.append(v)

        build(self)
        for v in topo:
            if v.children:
                v.grad = 0.0
        self.grad = 1.0
        for v in reversed(topo):
            for child, d in zip(v.children, v.local):
                child.grad = d * v.grad
''',
        # tanh after the last layer too
        "value_mlp": '''
def mlp(x, layers):
    for weights, biases in layers:
        x = [sum((w * xi for w, xi in zip(row, x)), b).tanh() for row, b in zip(weights, biases)]
    return x
''',
    },
    "03_modules": {
        # a ReLU after the last layer too
        "mlp": '''
class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)
''',
        # only the model's direct children are visited: nested layers keep their default init
        "init_weights": '''
def init_weights(model):
    for module in model.children():
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    return model
''',
        # the transform applied to every image once, in __init__: right items, but not lazily
        "image_dataset": '''
class ImageDataset(Dataset):
    def __init__(self, images, labels, transform=None):
        self.images = images if transform is None else [transform(image) for image in images]
        self.labels = labels

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], int(self.labels[index])
''',
        # the textbook formula through the sigmoid: right on ordinary logits, inf or nan on large ones
        "bce_with_logits": '''
def bce_with_logits(logits, targets):
    p = torch.sigmoid(logits)
    return -(targets * torch.log(p) + (1 - targets) * torch.log(1 - p)).mean()
''',
    },
    "04_training_loop": {
        # pin_memory compares the device with the text "cuda": wrong for "cuda:0" or a torch.device
        "make_loaders": '''
from torchvision import datasets


def make_loaders(root, transform, batch_size, num_workers=0, device="cpu"):
    train_set = datasets.FashionMNIST(root, train=True, transform=transform, download=False)
    test_set = datasets.FashionMNIST(root, train=False, transform=transform, download=False)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=num_workers,
                              pin_memory=device == "cuda")
    test_loader = DataLoader(test_set, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                             pin_memory=device == "cuda")
    return train_loader, test_loader
''',
        # the mean of the batch losses, not weighted by the batches' sizes
        "train_one_epoch": '''
def train_one_epoch(model, loader, loss_fn, optimizer, device):
    model.train()
    total = 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)
''',
        # evaluation mode, but the graph is still built (no no_grad / inference_mode)
        "evaluate": '''
def evaluate(model, loader, loss_fn, device):
    was_training = model.training
    model.eval()
    total, correct, seen = 0.0, 0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits = model(x)
        total += loss_fn(logits, y).item() * len(y)
        correct += (logits.argmax(dim=1) == y).sum().item()
        seen += len(y)
    model.train(was_training)
    return total / seen, correct / seen
''',
        # no bias correction of the two moments
        "adamw_step": '''
def adamw_step(param, grad, state, lr, betas, eps, weight_decay):
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param)
        state["exp_avg_sq"] = torch.zeros_like(param)
    beta1, beta2 = betas
    state["step"] += 1
    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    param.mul_(1 - lr * weight_decay)
    param.sub_(lr * state["exp_avg"] / (state["exp_avg_sq"].sqrt() + eps))
''',
        # the decay's length counted up to total_steps, not to the last step (total_steps - 1)
        "warmup_cosine": '''
def warmup_cosine(step, total_steps, warmup_steps, max_lr, min_lr):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    done = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * done)) / 2


def warmup_cosine_scheduler(optimizer, total_steps, warmup_steps, min_lr):
    max_lr = optimizer.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, total_steps, warmup_steps, max_lr, min_lr) / max_lr)
''',
        # keeps a reference to the state_dict, not a copy: the last epoch's weights end up loaded
        "fit": '''
def fit(model, train_loader, val_loader, loss_fn, optimizer, device, epochs, scheduler=None):
    history = {"train_loss": [], "val_loss": [], "val_acc": [], "best_epoch": -1}
    best_acc, best_state = -1.0, None
    for epoch in range(epochs):
        history["train_loss"].append(train_one_epoch(model, train_loader, loss_fn, optimizer, device))
        val_loss, val_acc = evaluate(model, val_loader, loss_fn, device)
        history["val_loss"].append(val_loss)
        history["val_acc"].append(val_acc)
        if scheduler is not None:
            scheduler.step()
        if val_acc > best_acc:
            best_acc, best_state = val_acc, model.state_dict()
            history["best_epoch"] = epoch
    if best_state is not None:
        model.load_state_dict(best_state)
    return history
''',
        # each loss divided by the number of micro-batches: right only when they are all the same size
        "accumulation_step": '''
def accumulation_step(model, loss_fn, optimizer, micro_batches):
    optimizer.zero_grad()
    large_loss = 0.0
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / len(micro_batches)
        loss.backward()
        large_loss += loss.item()
    optimizer.step()
    return large_loss
''',
        # the linear layer sized for one pooling: the second max-pool halved the side again, to 7
        "make_classifier": '''
def make_classifier():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 14 * 14, 10),
    )
''',
        # normalises first and shifts after: the border that comes in is 0 in normalised units, grey
        "make_augmented_transforms": '''
def make_augmented_transforms(mean, std, max_shift=2):
    to_input = transforms.Compose([transforms.ToTensor(), transforms.Normalize((mean,), (std,))])
    train_transform = transforms.Compose([
        to_input,
        transforms.RandomHorizontalFlip(),
        transforms.RandomCrop(28, padding=max_shift),
    ])
    return train_transform, to_input
''',
        # the batches' step starts again at 0 every epoch
        "log_epoch": '''
def log_epoch(writer, epoch, batch_losses, metrics):
    for i, loss in enumerate(batch_losses):
        writer.add_scalar("loss/train", loss, i)
    for tag, value in metrics.items():
        writer.add_scalar(tag, value, epoch)
    writer.flush()
''',
        # every state_dict and where the run is, but not the global random generator: the resumed
        # run's dropout masks come from the new run's own seed
        "resume": '''
def save_checkpoint(path, run):
    torch.save({"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
                "scheduler": run.scheduler.state_dict(), "scaler": run.scaler.state_dict(),
                "seed": run.seed, "epoch": run.epoch, "step": run.step}, path)


def resume(path, run):
    checkpoint = torch.load(path)
    run.model.load_state_dict(checkpoint["model"])
    run.optimizer.load_state_dict(checkpoint["optimizer"])
    run.scheduler.load_state_dict(checkpoint["scheduler"])
    run.scaler.load_state_dict(checkpoint["scaler"])
    run.seed, run.epoch, run.step = checkpoint["seed"], checkpoint["epoch"], checkpoint["step"]
''',
    },
    "05_debugging_lab": {
        # the held-out batch's gradient is left in .grad: the update learns from it too
        "step_with_probe": '''
def step_with_probe(model, batch, optimizer, probe):
    optimizer.zero_grad()
    F.cross_entropy(model(probe[0]), probe[1]).backward()
    probe_norm = torch.cat([param.grad.flatten() for param in model.parameters()]).norm().item()
    loss = F.cross_entropy(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.item(), probe_norm
''',
        # the outputs are kept as the step left them and cut loose only once the epoch is over: every
        # batch's graph stays alive until then
        "train_epoch_with_outputs": '''
def train_epoch_with_outputs(model, batches, loss_fn, optimizer):
    losses, kept = [], []
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        kept.append(logits)
    return losses, torch.cat(kept).detach()
''',
        # the sigmoid stays at the end of the model: BCEWithLogitsLoss applies it a second time
        "binary_classifier": '''
class BinaryClassifier(nn.Module):
    def __init__(self, n_in, n_hidden):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, n_hidden), nn.ReLU(), nn.Linear(n_hidden, 1), nn.Sigmoid())

    def forward(self, x):
        return self.body(x).squeeze(1)

    def predict_proba(self, x):
        return torch.sigmoid(self(x))
''',
        # counts the steps from 0
        "first_bad_step": '''
def first_bad_step(train_step, model, batch, optimizer, max_steps):
    for step in range(max_steps):
        loss = train_step(model, batch, optimizer)
        if not math.isfinite(float(loss)):
            return step
    return None
''',
        # the update ratio measured on the gradient (‖∇w‖ / ‖w‖), not on the step's change of the weights
        "layer_statistics": '''
def layer_statistics(model, inputs, targets, loss_fn, optimizer):
    linears = [m for m in model if isinstance(m, nn.Linear)]
    relus = [m for m in model if isinstance(m, nn.ReLU)]
    outputs, grads = {}, {}
    handles = [m.register_forward_hook(lambda m, i, o: outputs.__setitem__(m, o.detach()))
               for m in linears + relus]
    handles += [m.register_full_backward_hook(lambda m, gi, go: grads.__setitem__(m, go[0]))
                for m in linears]
    optimizer.zero_grad()
    loss_fn(model(inputs), targets).backward()
    optimizer.step()
    for h in handles:
        h.remove()
    return {
        "activation_std": [outputs[m].std().item() for m in linears],
        "dead_share": [(outputs[m] == 0).all(dim=0).float().mean().item() for m in relus],
        "grad_norm": [grads[m].norm().item() for m in linears],
        "update_ratio": [(m.weight.grad.norm() / m.weight.norm()).item() for m in linears],
    }
''',
        # a rule on the loss alone: up means a rate too high, flat means vanishing
        "diagnose_run": '''
def diagnose_run(run):
    loss = run["loss"]
    if loss[-1] > loss[0]:
        return "lr_too_high"
    if loss[-1] > 0.9 * loss[0]:
        return "vanishing"
    return "healthy"
''',
        # plain SGD with a tiny rate: the losses are real, but 300 steps memorise nothing
        "overfit_one_batch": '''
def overfit_one_batch(model, inputs, targets, loss_fn, max_steps):
    sgd = torch.optim.SGD(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(max_steps):
        sgd.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        sgd.step()
        losses.append(loss.item())
        if losses[-1] < 1e-3:
            break
    return losses
''',
        # the run is right, but the weights and the optimizer's state are never given back
        "lr_range_test": '''
def lr_range_test(model, optimizer, batches, loss_fn, lrs):
    losses = []
    for lr, (x, y) in zip(lrs, batches):
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]) or losses[-1] > 4 * min(losses):
            break
        loss.backward()
        optimizer.step()
    return losses
''',
        # two of the three faults repaired; the scheduler still steps after every batch
        "fit_regressor_fixed": '''
def fit_regressor_fixed(model, batches, epochs, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    history = []
    for epoch in range(epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            loss = nn.MSELoss()(model(x).view(-1), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            total += loss.item()
        history.append(total / len(batches))
    return history
''',
        # logits to the loss and training mode every epoch, but the accuracy still averages the batches'
        "train_and_evaluate_fixed": '''
def train_and_evaluate_fixed(model, train_batches, test_batches, epochs, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        model.train()
        for x, y in train_batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracies = [(model(x).argmax(dim=1) == y).float().mean().item() for x, y in test_batches]
        accuracy = sum(accuracies) / len(accuracies)
    return accuracy
''',
    },
    "06_mixed_precision": {
        # compares device with the text "cuda": never waits for "cuda:0" or a torch.device
        "time_per_call": '''
def time_per_call(fn, device, repeats=10, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
''',
        # an element's size read off finfo/iinfo's bits: a complex type counted as one of its two parts
        "tensor_bytes": '''
def tensor_bytes(shape, dtype):
    if dtype == torch.bool:
        size = 1
    elif dtype.is_floating_point or dtype.is_complex:
        size = torch.finfo(dtype).bits // 8
    else:
        size = torch.iinfo(dtype).bits // 8
    return math.prod(shape) * size
''',
        # every zero after the conversion counts as an underflow, the input's own zeros too
        "fp16_fate": '''
OK, LOSES_BITS, BECOMES_ZERO, BECOMES_INF = 0, 1, 2, 3


def fp16_fate(values):
    stored = values.to(torch.float16)
    fate = torch.full(values.shape, OK, dtype=torch.int64)
    fate[(stored != 0) & (stored.abs() < torch.finfo(torch.float16).smallest_normal)] = LOSES_BITS
    fate[stored == 0] = BECOMES_ZERO
    fate[stored.isinf()] = BECOMES_INF
    return fate
''',
        # clips the gradients while they are still scaled (no scaler.unscale_ first)
        "amp_train_step": '''
def amp_train_step(model, batch, loss_fn, optimizer, scaler, device, dtype, max_norm=None):
    device = torch.device(device)
    inputs, targets = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
''',
    },
    "07_scale": {
        # adds up every saved tensor: a storage saved twice is counted twice
        "activation_bytes": '''
def activation_bytes(model, x):
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    sizes = []

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in own:
            sizes.append(tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = model(x)
    total = sum(sizes)
    del output
    return total
''',
        # contiguous blocks instead of one index in every num_replicas
        "shard_indices": '''
def shard_indices(n, num_replicas, rank, shuffle=False, seed=0, epoch=0):
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    else:
        order = list(range(n))
    per_rank = -(-n // num_replicas)
    padded = (order * num_replicas)[:per_rank * num_replicas]
    return padded[rank * per_rank:(rank + 1) * per_rank]
''',
        # the warm-up counted from step / warmup_steps: the first step is taken at rate 0
        "examples_curve": '''
def examples_curve(model, optimizer, x, y, batch_size, warmup_steps):
    peak = optimizer.param_groups[0]["lr"]
    curve, seen = [], 0
    for step, start in enumerate(range(0, len(x), batch_size)):
        for group in optimizer.param_groups:
            group["lr"] = peak * min(1.0, step / warmup_steps)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[start:start + batch_size]), y[start:start + batch_size])
        loss.backward()
        optimizer.step()
        seen += len(x[start:start + batch_size])
        curve.append((seen, loss.item()))
    return curve
''',
        # sorts by the memory of each operator with the operators it calls (cpu_memory_usage), not its own
        "top_by_memory": '''
def top_by_memory(prof, k):
    rows = sorted(prof.key_averages(), key=lambda row: row.cpu_memory_usage, reverse=True)
    return [(row.key, row.cpu_memory_usage) for row in rows[:k]]
''',
    },
}


def defined(lesson: str, answer: str, **names) -> dict:
    """The namespace of a notebook that holds ``names`` (its imports, earlier answers) and then runs
    the wrong answer for ``answer`` of ``lesson``: the wrong functions and classes are in it."""
    namespace = dict(names)
    exec(WRONG_ANSWERS[lesson][answer], namespace)
    return namespace
