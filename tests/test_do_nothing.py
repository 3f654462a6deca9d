"""The do-nothing answers are made from the answer's own source, and really do nothing."""

import torch
from do_nothing import do_nothing_answers

ANSWER = '''
import math
SCALE = 2.0
def area(radius, exact=True):
    """docstring"""
    return math.pi * radius ** 2 * SCALE
class Doubler(torch.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor
    def forward(self, x):
        return self.factor * x
'''


def _run(source):
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace


def test_functions_return_none_zero_or_their_first_argument():
    variants = {name: _run(source) for name, source in do_nothing_answers(ANSWER).items()}
    assert set(variants) == {"returns None", "returns 0", "returns its first argument"}
    assert [v["area"](3.0) for v in variants.values()] == [None, 0, 3.0]
    assert all(v["SCALE"] == 2.0 and "math" in v for v in variants.values()), "constants and imports kept"


def test_a_class_keeps_its_signature_and_becomes_an_identity_module():
    identity = _run(do_nothing_answers(ANSWER)["returns its first argument"])["Doubler"](3)
    x = torch.arange(4.0)
    assert isinstance(identity, torch.nn.Module) and torch.equal(identity(x), x)
    assert list(identity.parameters()) == []


def test_an_autograd_function_passes_values_and_gradients_through():
    source = '''
class Clip(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)
'''
    clip = _run(do_nothing_answers(source)["returns its first argument"])["Clip"]
    x = torch.tensor([-1.0, 2.0], requires_grad=True)
    clip.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(2))


def test_an_answer_dict_answers_all_true_or_all_false():
    source = "ANSWERS = {'a': None, 'b': None}\nANSWERS.update({'a': True, 'b': False})\nlookup = {'x': 1}"
    variants = do_nothing_answers(source)
    assert set(variants) == {"answers all True", "answers all False"}
    everything_true = _run(variants["answers all True"])
    assert everything_true["ANSWERS"] == {"a": True, "b": True}
    assert everything_true["lookup"] == {"x": 1}, "only the answers change"
    assert _run(variants["answers all False"])["ANSWERS"] == {"a": False, "b": False}


def test_a_cell_magic_has_no_variant():
    assert do_nothing_answers("%%writefile train.py\nprint('hi')\n") == {}
