"""The graph autograd records during a forward pass, walked and drawn as a picture.

Taught in lesson 02 (autograd), section 2.

Every tensor produced by an operation on a tensor that requires gradients carries a ``grad_fn``:
the node of the graph that knows how to send a gradient back to that operation's inputs. Each
node lists the nodes of its inputs in ``next_functions``; a leaf tensor (one you created, with
``requires_grad=True``) is reached through an ``AccumulateGrad`` node, the one that writes
``.grad``. Walking those links from the output gives the "receipt" of the computation: which
operations ran, and which tensors fed them.
"""

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch

from course.settings import say

KIND_COLORS = {"output": "#cfe8cf", "op": "#d6e4f5", "leaf": "#fbe0c4"}


@dataclass
class GraphNode:
    """One box of the picture: the output tensor, an operation, or a leaf's ``AccumulateGrad``."""

    key: int
    name: str  # the node's class name (``AddBackward0``), or ``"output"``
    label: str  # what the picture writes in the box
    kind: str  # "output", "op" or "leaf"
    depth: int = 0  # longest path from the output: rows of the picture
    children: list = field(default_factory=list)  # keys of the nodes backward visits next


def _describe_tensor(tensor: torch.Tensor) -> str:
    return say({"es": "forma", "en": "shape"}) + f" {tuple(tensor.shape)}"


def _name_of(tensor, names: dict) -> str | None:
    for name, candidate in names.items():
        if candidate is tensor:
            return name
    return None


def walk_graph(tensor: torch.Tensor, names: dict | None = None) -> list[GraphNode]:
    """The nodes backward would visit from ``tensor``, first the tensor itself, in walking order.

    ``names`` maps a display name to a tensor (``{"x": x, "y": y}``) so that boxes can say which
    tensor they stand for. Inputs that do not require gradients (constants) have no node: autograd
    sends them nothing.
    """
    if not isinstance(tensor, torch.Tensor):
        kind = type(tensor).__name__
        raise TypeError(say({"es": f"walk_graph necesita un tensor; recibió {kind}.",
                             "en": f"walk_graph needs a tensor, got {kind}."}))
    if not tensor.requires_grad:
        raise ValueError(say({
            "es": "Este tensor no tiene grafo: requires_grad es False, así que autograd no registró "
                  "nada. Crea una entrada con requires_grad=True (y calcula fuera de torch.no_grad()).",
            "en": "This tensor has no graph: requires_grad is False, so autograd recorded nothing. "
                  "Create an input with requires_grad=True (and compute outside torch.no_grad()).",
        }))
    names = names or {}
    own = _name_of(tensor, names)
    leaf_word = say({"es": "hoja", "en": "leaf"})
    root_label = f"{own or say({'es': 'salida', 'en': 'output'})}\n{_describe_tensor(tensor)}"
    nodes = [GraphNode(0, "output", root_label, "output")]
    keys = {}  # id(grad_fn) → key; the objects stay alive in `alive` while we walk
    alive = []

    def visit(fn) -> int:
        if id(fn) in keys:
            return keys[id(fn)]
        key = len(nodes)
        keys[id(fn)] = key
        alive.append(fn)
        kind_name = type(fn).__name__
        if kind_name == "AccumulateGrad":
            leaf = fn.variable
            leaf_name = _name_of(leaf, names)
            label = f"AccumulateGrad\n{leaf_name or leaf_word} · {_describe_tensor(leaf)}"
            node = GraphNode(key, kind_name, label, "leaf")
        else:
            node = GraphNode(key, kind_name, kind_name, "op")
        nodes.append(node)
        return key

    if tensor.grad_fn is None:  # a leaf itself: backward would accumulate straight into it
        label = f"{own or leaf_word}\n({leaf_word}) · {_describe_tensor(tensor)}"
        nodes[0] = GraphNode(0, "output", label, "leaf")
        return nodes

    queue = [(0, tensor.grad_fn)]
    while queue:
        parent, fn = queue.pop(0)
        seen = id(fn) in keys
        key = visit(fn)
        if key not in nodes[parent].children:
            nodes[parent].children.append(key)
        if seen:
            continue
        for next_fn, _ in fn.next_functions:
            if next_fn is not None:
                queue.append((key, next_fn))

    _assign_depths(nodes)
    return nodes


def _assign_depths(nodes: list[GraphNode]) -> None:
    """Depth = longest path from the output, so every arrow points down the picture."""
    order = _topological_order(nodes)
    for key in order:
        for child in nodes[key].children:
            nodes[child].depth = max(nodes[child].depth, nodes[key].depth + 1)


def _topological_order(nodes: list[GraphNode]) -> list[int]:
    incoming = {node.key: 0 for node in nodes}
    for node in nodes:
        for child in node.children:
            incoming[child] += 1
    ready = [key for key, count in incoming.items() if count == 0]
    order = []
    while ready:
        key = ready.pop(0)
        order.append(key)
        for child in nodes[key].children:
            incoming[child] -= 1
            if incoming[child] == 0:
                ready.append(child)
    return order


def graph_node_names(tensor: torch.Tensor) -> list[str]:
    """The class names of the nodes backward visits from ``tensor`` (``AddBackward0``, ...)."""
    return [node.name for node in walk_graph(tensor)[1:]]


def print_graph(tensor: torch.Tensor, names: dict | None = None) -> None:
    """The same receipt as :func:`draw_graph`, as indented text."""
    nodes = walk_graph(tensor, names)
    printed = set()

    def show(key: int, indent: int) -> None:
        node = nodes[key]
        text = node.label.replace("\n", " · ")
        again = key in printed
        shown = say({"es": "  (ya mostrado arriba)", "en": "  (already shown above)"})
        print("    " * indent + text + (shown if again and node.children else ""))
        printed.add(key)
        if not again:
            for child in node.children:
                show(child, indent + 1)

    show(0, 0)


def draw_graph(tensor: torch.Tensor, names: dict | None = None, ax=None, title: str | None = None):
    """Draw the graph recorded for ``tensor``: output on top, leaves at the bottom.

    Green: the output tensor; blue: operations (their ``grad_fn`` class); orange: the
    ``AccumulateGrad`` node of each leaf, where ``.grad`` is written. Arrows follow
    ``next_functions``, the way ``backward()`` walks. Returns the figure.
    """
    nodes = walk_graph(tensor, names)
    rows = {}
    for node in nodes:
        rows.setdefault(node.depth, []).append(node)
    width = max(len(row) for row in rows.values())
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(3.5, 2.6 * width), max(2.0, 1.15 * len(rows))))
    else:
        fig = ax.figure
    texts = {}
    for depth, row in rows.items():
        for i, node in enumerate(row):
            x = (i + 0.5) / len(row)
            y = 1 - (depth + 0.5) / len(rows)
            texts[node.key] = ax.text(
                x, y, node.label, ha="center", va="center", fontsize=9, family="monospace",
                transform=ax.transAxes, zorder=3,
                bbox={"boxstyle": "round,pad=0.4", "facecolor": KIND_COLORS[node.kind],
                      "edgecolor": "0.3"},
            )
    for node in nodes:
        for child in node.children:
            ax.annotate(
                "", xy=(0.5, 1.0), xycoords=texts[child], xytext=(0.5, 0.0),
                textcoords=texts[node.key], zorder=2,
                arrowprops={"arrowstyle": "-|>", "color": "0.35", "shrinkA": 5, "shrinkB": 5},
            )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    return fig
