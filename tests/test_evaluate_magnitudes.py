"""The verifier's cases at the magnitudes `fuseforge check` grades (large x 2^20, tiny x 2^-20, shifted + 16 RMS):
a candidate right on the file's inputs but not there is incorrect, so what `optimize` keeps passes the grader's
magnitude cases too; where the model's own fp32 math is not finite there, or no input is floating, the case is
skipped and says why. Likewise `optimize` verifies at the other batch sizes the grader runs."""

import torch
from test_evaluate_cases import _verify as verify_on_the_cpu

from fuseforge.evaluate import harness

SOFTMAX_MODEL = """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return []
"""
# exp without the row's max subtracted: right for inputs in [0, 1), inf / inf = NaN once they are large
NAIVE_SOFTMAX = """
class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(dim=-1, keepdim=True)
"""
HONEST_SOFTMAX = """
class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)
"""
VARIANCE_MODEL = """
class Model(nn.Module):
    def forward(self, x):
        return x.var(dim=-1, unbiased=False)


def get_inputs():
    return [torch.randn(8, 256)]


def get_init_inputs():
    return []
"""
# E[x^2] - E[x]^2 in one pass: exact enough while the mean is ~0 (the file's and signed inputs), catastrophic
# cancellation once a common offset 16 times the spread makes both terms 257 times the variance
ONE_PASS_VARIANCE = """
class ModelNew(nn.Module):
    def forward(self, x):
        return (x * x).mean(dim=-1) - x.mean(dim=-1) ** 2
"""
EXP_MODEL = """
class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""
EXP_CANDIDATE = """
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.exp(x)
"""
INDEX_MODEL = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(10, 6)

    def forward(self, idx):
        return self.table(idx).sum(-1)


def get_inputs():
    return [torch.randint(0, 10, (5, 3))]


def get_init_inputs():
    return []
"""
INDEX_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(10, 6)

    def forward(self, idx):
        return self.table.weight[idx].sum(-1)
"""


def _verify(tmp_path, model: str, candidate: str, *extra: str) -> dict:
    return verify_on_the_cpu(tmp_path, model, candidate, "--seeds", "1", *extra)


def _by_distribution(record: dict) -> dict:
    return {c["distribution"]: c for c in record["cases"] if not c["batch"]}


def test_a_candidate_right_on_the_files_inputs_that_overflows_at_large_magnitudes_is_incorrect(tmp_path):
    record = _verify(tmp_path, SOFTMAX_MODEL, NAIVE_SOFTMAX)
    cases = _by_distribution(record)
    assert cases["file"]["passed"] and cases["signed"]["passed"]
    assert cases["large"]["passed"] is False
    assert record["verdict"] == "incorrect" and record["reason"].startswith("seed 0 / large")
    assert record["settings"]["magnitudes"] == ["large", "tiny", "shifted"]


def test_the_same_computation_done_stably_passes_every_magnitude(tmp_path):
    record = _verify(tmp_path, SOFTMAX_MODEL, HONEST_SOFTMAX)
    assert record["verdict"] == "correct", record["reason"]
    cases = _by_distribution(record)
    assert all(cases[k]["passed"] for k in ("large", "tiny", "shifted"))


def test_a_one_pass_variance_fails_the_shifted_inputs_only(tmp_path):
    cases = _by_distribution(_verify(tmp_path, VARIANCE_MODEL, ONE_PASS_VARIANCE, "--no-magnitudes"))
    assert set(cases) == {"file", "signed"}  # --no-magnitudes: the main cases only
    assert all(c["passed"] for c in cases.values())
    record = _verify(tmp_path, VARIANCE_MODEL, ONE_PASS_VARIANCE)
    cases = _by_distribution(record)
    assert cases["shifted"]["passed"] is False
    assert record["verdict"] == "incorrect" and record["reason"].startswith("seed 0 / shifted")


def test_a_magnitude_where_the_models_own_fp32_math_overflows_is_skipped_and_says_so(tmp_path):
    record = _verify(tmp_path, EXP_MODEL, EXP_CANDIDATE)
    cases = _by_distribution(record)
    assert record["verdict"] == "correct", record["reason"]
    assert cases["large"]["skipped"] and cases["large"]["passed"] is None
    assert "not finite at large magnitudes" in cases["large"]["reason"]
    assert cases["tiny"]["passed"] and cases["shifted"]["passed"]  # e^(x + 16) is still finite


def test_a_model_without_floating_inputs_skips_the_magnitudes(tmp_path):
    record = _verify(tmp_path, INDEX_MODEL, INDEX_CANDIDATE)
    cases = _by_distribution(record)
    assert record["verdict"] == "correct", record["reason"]
    for kind in harness.MAGNITUDES:
        assert cases[kind]["skipped"] and cases[kind]["reason"] == "no floating input to move to other magnitudes"


def test_the_magnitudes_move_floating_inputs_only(tmp_path):
    x, n = torch.full((4, 4), 2.0), torch.arange(4)
    large, tiny, shifted = (harness.magnitude([x, n], k) for k in harness.MAGNITUDES)
    assert torch.equal(large[0], x * 2.0**20) and torch.equal(tiny[0], x * 2.0**-20)
    assert torch.equal(shifted[0], x + 16 * 2.0)
    assert all(m[1] is n for m in (large, tiny, shifted))


def test_optimize_verifies_at_the_batch_sizes_check_grades_where_the_batch_is_free():
    """Catches a verification that ran one other batch size where `check` runs three (about half, twice the file's,
    and 1): a kernel failing only at twice the batch (its 64-bit index path, say) was graded incorrect after
    `optimize` kept it."""
    import types

    from fuseforge.pipeline import extra_batch_sizes

    def run(dynamic: bool):
        return types.SimpleNamespace(captured=types.SimpleNamespace(dynamic_batch=dynamic),
                                     loaded=types.SimpleNamespace(inputs=[torch.randn(64, 3), 2.0]))
    assert extra_batch_sizes(run(True)) == [33, 128, 1] == harness.batch_sizes(64, None)
    assert extra_batch_sizes(run(False)) == []


def test_each_extra_batch_size_is_a_case_of_its_own(tmp_path):
    record = _verify(tmp_path, SOFTMAX_MODEL, HONEST_SOFTMAX, "--no-magnitudes", "--extra-batch", "3",
                     "--extra-batch", "8", "--extra-batch", "1")
    assert record["verdict"] == "correct", record["reason"]
    assert [c["batch"] for c in record["cases"] if c["batch"]] == [3, 8, 1]
    assert record["settings"]["extra_batches"] == [3, 8, 1]
