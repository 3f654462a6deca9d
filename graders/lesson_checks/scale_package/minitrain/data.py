"""The data: a small synthetic classification problem, the same in every process."""
import torch
from torch.utils.data import Dataset


class Blobs(Dataset):
    """Points around `classes` centres; remembers the indices it hands out in this process."""

    def __init__(self, examples, seed, features=8, classes=4):
        generator = torch.Generator().manual_seed(seed)
        centres = 2 * torch.randn(classes, features, generator=generator)
        self.y = torch.randint(0, classes, (examples,), generator=generator)
        self.x = centres[self.y] + torch.randn(examples, features, generator=generator)
        self.seen = []                       # the indices read in this process, in order

    def __len__(self):
        return len(self.y)

    def __getitem__(self, index):
        self.seen.append(int(index))
        return self.x[index], self.y[index]
