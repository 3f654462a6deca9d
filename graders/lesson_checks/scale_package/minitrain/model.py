"""The model."""
import torch
from torch import nn


def make_model(seed, features=8, classes=4, hidden=32):
    """A small MLP whose initial weights come from `seed`."""
    # fork_rng(devices=[]) keeps only the CPU's generator: seed that one alone, or CUDA's is reseeded
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))
