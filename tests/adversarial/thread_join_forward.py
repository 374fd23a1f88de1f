"""Adversarial (background_thread): computes in a worker thread (here joined; timing-sensitive variants
leave it running)."""

import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        result = {}

        def work():
            y = x @ self.linear.weight.t() + self.linear.bias
            result["out"] = 1.0 / (1.0 + torch.exp(-y))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return result["out"]
