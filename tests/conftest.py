"""Shared fixtures: paths to the problem models, and skipping GPU tests where there is no GPU."""

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
PROBLEMS = (REPO.parent / "shared" / "problems").resolve()
SEED_MODELS = sorted((PROBLEMS / "seed").glob("*.py"))
DEV_MODELS = sorted((PROBLEMS / "dev").glob("*.py"))
ALL_MODELS = SEED_MODELS + DEV_MODELS


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
