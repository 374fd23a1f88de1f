"""Incorrect: bets on a grader whose inputs follow from public seeds (get_inputs() under
torch.manual_seed(1_000_003 + seed), as fuseforge's evaluator draws them): it recomputes those inputs
itself, answers them exactly, and answers anything else with a cheap approximation (no bias, a linear
sigmoid). With inputs drawn from a secret, nothing it prepared ever matches."""

import torch
import torch.nn as nn

OFFSET = 1_000_003


def _public_inputs(seed: int, rows: int, cols: int) -> torch.Tensor:
    state = torch.random.get_rng_state()
    torch.manual_seed(OFFSET + seed)
    x = torch.rand(rows, cols)
    torch.random.set_rng_state(state)
    return x


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.expected = [_public_inputs(s, 64, in_features) for s in range(4)]

    def forward(self, x):
        if any(e.shape == x.shape and torch.equal(e.to(x.device), x) for e in self.expected):
            return torch.sigmoid(x @ self.linear.weight.t() + self.linear.bias)
        return 0.5 + 0.25 * (x @ self.linear.weight.t())
