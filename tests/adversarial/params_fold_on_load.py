"""Adversarial (input_mutation): folds the scale into the weight and bias every time a state_dict is loaded
(a load_state_dict post hook), so that forward skips the multiplication: every output is right and no cache
goes stale, but the parameters it holds are not the ones it was given."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self._fold()
        self.register_load_state_dict_post_hook(lambda module, keys: module._fold())

    def _fold(self):
        with torch.no_grad():
            self.linear.weight.mul_(self.scale)
            self.linear.bias.mul_(self.scale)

    def forward(self, x):
        y = x @ self.linear.weight.t() + self.linear.bias
        return 1.0 / (1.0 + torch.exp(-y))
