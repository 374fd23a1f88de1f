"""Adversarial (background_thread): a worker thread started at import (its module name assembled at run
time, so no import statement shows it) serves every forward through a queue."""

import queue

import torch
import torch.nn as nn

_jobs = queue.Queue()


def _serve():
    while True:
        fn, box = _jobs.get()
        box.put(fn())


_worker = __import__("thre" + "ading").Thread(target=_serve, daemon=True)
_worker.start()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        def work():
            y = x @ self.linear.weight.t() + self.linear.bias
            return 1.0 / (1.0 + torch.exp(-y))

        box = queue.Queue()
        _jobs.put((work, box))
        return box.get()
