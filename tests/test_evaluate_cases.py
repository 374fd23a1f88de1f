"""The evaluator's cases: where their time goes, a case that is an earlier case's very computation reuses
its truth, and models and inputs made with the device as the default device (CPU fallback)."""

import json
import textwrap

import pytest
import torch

from fuseforge.evaluate import harness
from fuseforge.evaluate.cli import main

HEADER = "import torch\nimport torch.nn as nn\n\n"
FLOAT_MODEL = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        return torch.tanh(self.linear(x))


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return [8]
"""
FLOAT_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        return torch.tanh(torch.addmm(self.linear.bias, x, self.linear.weight.t()))
"""
INDEX_MODEL = """
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.table = nn.Embedding(n, 6)

    def forward(self, idx):
        return self.table(idx).sum(-1)


def get_inputs():
    return [torch.randint(0, 10, (5, 3))]


def get_init_inputs():
    return [10]
"""
INDEX_CANDIDATE = """
RUNS = []


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.table = nn.Embedding(n, 6)

    def forward(self, idx):
        RUNS.append(1)
        return self.table.weight[idx].sum(-1)
"""


def _verify(tmp_path, model: str, candidate: str, *extra: str) -> dict:
    model_path, cand_path = tmp_path / "model.py", tmp_path / "candidate.py"
    model_path.write_text(HEADER + textwrap.dedent(model))
    cand_path.write_text(HEADER + textwrap.dedent(candidate))
    out = tmp_path / "out"
    main([str(model_path), str(cand_path), "--out", str(out), "--device", "cpu", "--skip-bench", *extra])
    return json.loads((out / "50_verify.json").read_text())


def test_every_case_says_where_its_time_went(tmp_path):
    record = _verify(tmp_path, FLOAT_MODEL, FLOAT_CANDIDATE, "--seeds", "1", "--extra-batch", "3")
    assert record["verdict"] == "correct", record["reason"]
    steps = {"build", "inputs", "truth", "eager", "candidate", "compare"}
    assert set(record["seconds"]) == {"load", "cases"} | steps
    assert record["seconds"]["truth"] == pytest.approx(sum(c["seconds"]["truth"] for c in record["cases"]), abs=2e-3)
    for case in record["cases"]:
        assert set(case["seconds"]) == {"build", "inputs", "truth", "eager", "candidate", "compare"}
        assert all(v >= 0 for v in case["seconds"].values())
        assert case["reused_from"] is None  # floating inputs: every case is its own computation


def test_the_signed_case_of_a_model_without_floating_inputs_reuses_the_file_cases_truth(tmp_path):
    record = _verify(tmp_path, INDEX_MODEL, INDEX_CANDIDATE, "--seeds", "2")
    assert record["verdict"] == "correct", record["reason"]
    by_label = {(c["seed"], c["distribution"]): c for c in record["cases"]}
    for seed in (0, 1):
        file_case, signed = by_label[(seed, "file")], by_label[(seed, "signed")]
        assert file_case["reused_from"] is None and "truth" in file_case["seconds"]
        assert signed["reused_from"] == f"seed {seed} / file"
        assert "truth" not in signed["seconds"] and "candidate" in signed["seconds"]  # the candidate still ran
        assert signed["outputs"][0]["truth_rms"] == file_case["outputs"][0]["truth_rms"]
    # different seeds are different computations (other weights)
    assert by_label[(0, "file")]["outputs"][0]["truth_rms"] != by_label[(1, "file")]["outputs"][0]["truth_rms"]


def test_a_wrong_candidate_still_fails_the_case_that_reuses_a_truth(tmp_path):
    wrong = INDEX_CANDIDATE.replace("return self.table.weight[idx].sum(-1)",
                                    "return self.table.weight[idx].sum(-1) + (0.1 if len(RUNS) % 2 == 0 else 0.0)")
    record = _verify(tmp_path, INDEX_MODEL, wrong, "--seeds", "1")
    assert record["verdict"] == "incorrect"
    assert record["reason"].startswith("seed 0 / signed")


def _programs(tmp_path, model: str):
    path = tmp_path / "model.py"
    path.write_text(HEADER + textwrap.dedent(model))
    progs = harness.load_reference(path)
    progs.candidate_cls = progs.model_cls
    return progs


def test_inputs_and_weights_for_the_cpu_are_drawn_as_before(tmp_path):
    progs = _programs(tmp_path, FLOAT_MODEL)
    for dist in harness.DISTRIBUTIONS:
        default = harness.draw_inputs(progs, 1, dist)
        on_cpu = harness.draw_inputs(progs, 1, dist, device=torch.device("cpu"))
        assert all(torch.equal(a, b) for a, b in zip(default, on_cpu))
    ref, _ = harness.build_pair(progs, 2)
    ref_cpu, _ = harness.build_pair(progs, 2, torch.device("cpu"))
    assert torch.equal(ref.linear.weight, ref_cpu.linear.weight)


NUMPY_INPUTS_MODEL = FLOAT_MODEL.replace("return [torch.rand(4, 8)]",
                                         "return [torch.from_numpy(torch.rand(4, 8).numpy())]")


def test_a_file_whose_inputs_cannot_be_drawn_on_the_device_gets_them_drawn_on_the_cpu(tmp_path):
    progs = _programs(tmp_path, NUMPY_INPUTS_MODEL)
    meta = torch.device("meta")  # tensors without data: .numpy() raises, as it does on a GPU
    [x] = harness.draw_inputs(progs, 0, "file", device=meta)
    [expected] = harness.draw_inputs(progs, 0, "file")
    assert x.device.type == "cpu" and torch.equal(x, expected)


def test_a_file_whose_inputs_can_be_drawn_on_the_device_gets_them_there(tmp_path):
    progs = _programs(tmp_path, FLOAT_MODEL)
    [x] = harness.draw_inputs(progs, 0, "signed", device=torch.device("meta"))
    assert x.device.type == "meta" and x.shape == (4, 8)
    ref, cand = harness.build_pair(progs, 0, torch.device("meta"))
    assert ref.linear.weight.device.type == "meta"


@pytest.mark.gpu
def test_on_cuda_weights_and_inputs_are_made_on_the_gpu_from_the_files_own_distributions(tmp_path):
    progs = _programs(tmp_path, FLOAT_MODEL)
    dev = torch.device("cuda")
    [x] = harness.draw_inputs(progs, 0, "file", device=dev)
    [again] = harness.draw_inputs(progs, 0, "file", device=dev)
    assert x.is_cuda and torch.equal(x, again) and 0 <= x.min() and x.max() < 1
    [signed] = harness.draw_inputs(progs, 0, "signed", device=dev)
    assert signed.is_cuda and signed.min() < 0
    ref, cand = harness.build_pair(progs, 0, dev)
    assert ref.linear.weight.is_cuda and torch.equal(ref.linear.weight, cand.linear.weight)
