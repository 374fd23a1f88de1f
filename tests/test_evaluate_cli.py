"""`python -m fuseforge.evaluate` end to end on the CPU, with tiny models and hand-written candidates."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fuseforge.evaluate.cli import main

REPO = Path(__file__).resolve().parents[1]
HEADER = "import torch\nimport torch.nn as nn\n\n"

LINEAR_MODEL = """
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))


def get_inputs():
    return [torch.rand(8, 16)]


def get_init_inputs():
    return [16, 32]
"""

LINEAR_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.{name} = nn.Linear(in_features, out_features)

    def forward(self, x):
        {prologue}
        out = torch.sigmoid(x @ self.{name}.weight.t() + self.{name}.bias)
        {epilogue}
        return out
"""

BN_MODEL = """
class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        return self.bn(self.linear(x))


def get_inputs():
    return [torch.rand(16, 8)]


def get_init_inputs():
    return [8]
"""

BN_CANDIDATE = """
class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.bn = nn.BatchNorm1d(features)

    def forward(self, x):
        bn = self.bn
        y = x @ self.linear.weight.t() + self.linear.bias
        mean, var = y.mean(0), y.var(0, unbiased=False)
        n = y.shape[0]
        if {update_stats}:
            bn.running_mean.mul_(1 - bn.momentum).add_(mean, alpha=bn.momentum)
            bn.running_var.mul_(1 - bn.momentum).add_(var * n / (n - 1), alpha=bn.momentum)
        bn.num_batches_tracked.add_(1)
        return (y - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias
"""


def _linear_candidate(name="linear", prologue="pass", epilogue="pass") -> str:
    return LINEAR_CANDIDATE.format(name=name, prologue=prologue, epilogue=epilogue)


def _files(tmp_path: Path, model: str, candidate: str) -> tuple[Path, Path]:
    model_path, cand_path = tmp_path / "model.py", tmp_path / "candidate.py"
    model_path.write_text(HEADER + textwrap.dedent(model))
    cand_path.write_text(HEADER + textwrap.dedent(candidate))
    return model_path, cand_path


def _evaluate(tmp_path: Path, model: str, candidate: str, *extra: str) -> tuple[int, dict]:
    model_path, cand_path = _files(tmp_path, model, candidate)
    out = tmp_path / "out"
    code = main([str(model_path), str(cand_path), "--out", str(out), "--device", "cpu", "--skip-bench",
                 *extra])
    return code, json.loads((out / "50_verify.json").read_text())


def test_an_honest_reimplementation_is_correct_with_exit_code_zero(tmp_path, capsys):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate())
    assert code == 0
    assert record["schema"] == "fuseforge.verify/1"
    assert record["verdict"] == "correct" and record["reason"] is None
    assert [(c["seed"], c["distribution"]) for c in record["cases"]] == [
        (s, d) for s in range(3) for d in ("file", "signed")] + [(0, "large"), (0, "tiny"), (0, "shifted")]
    assert record["allclose"] is True
    assert record["worst"]["ratio"] <= 1.0
    assert "verify: correct" in capsys.readouterr().out
    assert not (tmp_path / "out" / "60_bench.json").exists()


def test_the_signed_distribution_redraws_inputs_with_negative_values(tmp_path):
    _, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(), "--seeds", "1")
    file_case, signed_case = record["cases"][:2]
    assert file_case["outputs"][0]["truth_rms"] != signed_case["outputs"][0]["truth_rms"]
    assert record["settings"]["distributions"] == ["file", "signed"]


def test_a_candidate_off_by_1e_3_is_incorrect(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(epilogue="out = out + 1e-3"))
    assert code == 1
    assert record["verdict"] == "incorrect"
    assert record["reason"].startswith("seed 0 / file: output: error vs fp64")
    output = record["cases"][0]["outputs"][0]
    assert output["cand_err"] > output["bound"] and output["passed"] is False


def test_a_candidate_with_one_nan_is_incorrect(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(epilogue="out[0, 0] = float('nan')"))
    assert code == 1 and record["verdict"] == "incorrect"
    assert "1 NaN where the fp64 truth is finite" in record["reason"]


def test_a_renamed_parameter_is_an_interface_mismatch_naming_the_keys(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(name="fc"))
    assert code == 1 and record["verdict"] == "interface_mismatch"
    assert set(record["interface"]["missing"]) == {"linear.weight", "linear.bias"}
    assert set(record["interface"]["unexpected"]) == {"fc.weight", "fc.bias"}
    assert "linear.weight" in record["reason"]


def test_a_parameter_of_another_shape_is_an_interface_mismatch(tmp_path):
    candidate = _linear_candidate().replace("nn.Linear(in_features, out_features)",
                                            "nn.Linear(in_features, out_features + 1)")
    code, record = _evaluate(tmp_path, LINEAR_MODEL, candidate)
    assert code == 1 and record["verdict"] == "interface_mismatch"
    assert record["interface"]["shape_mismatches"]["linear.weight"] == [[32, 16], [33, 16]]


def test_a_candidate_raising_in_forward_is_an_error_with_a_one_line_reason(tmp_path, capsys):
    code, record = _evaluate(tmp_path, LINEAR_MODEL,
                             _linear_candidate(prologue="raise RuntimeError('kernel launch failed\\nmore')"))
    assert code == 1 and record["verdict"] == "error"
    assert record["reason"] == "ModelNew forward raised RuntimeError: kernel launch failed"
    assert "Traceback" in capsys.readouterr().err


def test_a_candidate_with_a_syntax_error_is_an_error_naming_the_line(tmp_path):
    broken = _linear_candidate().replace("def forward(self, x):", "def forward(self, x)")
    code, record = _evaluate(tmp_path, LINEAR_MODEL, broken)
    assert code == 1 and record["verdict"] == "error"
    assert "syntax error" in record["reason"] and "candidate.py:" in record["reason"]


def test_a_candidate_file_without_modelnew_is_an_error(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate().replace("ModelNew", "Other"))
    assert code == 1 and record["verdict"] == "error" and "ModelNew" in record["reason"]


def test_a_candidate_returning_a_tuple_where_the_model_returns_a_tensor_is_incorrect(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(epilogue="out = (out, out)"))
    assert code == 1 and record["verdict"] == "incorrect" and "a tuple of 2 tensors" in record["reason"]


def test_an_honest_batchnorm_candidate_updates_running_stats_and_is_correct(tmp_path):
    code, record = _evaluate(tmp_path, BN_MODEL, BN_CANDIDATE.format(update_stats=True))
    assert code == 0, record["reason"]
    names = [b["name"] for b in record["cases"][0]["buffers"]]
    assert names == ["buffer bn.running_mean", "buffer bn.running_var", "buffer bn.num_batches_tracked"]
    assert record["cases"][0]["buffers"][2]["exact"] is True


def test_a_batchnorm_candidate_that_skips_the_running_stats_fails_on_the_buffers(tmp_path):
    code, record = _evaluate(tmp_path, BN_MODEL, BN_CANDIDATE.format(update_stats=False))
    assert code == 1 and record["verdict"] == "incorrect"
    assert "buffer bn.running_mean" in record["reason"]
    case = record["cases"][0]
    assert all(o["passed"] for o in case["outputs"])  # the output itself is right
    assert not case["buffers"][0]["passed"] and case["buffers"][2]["passed"]


def test_a_candidate_hardcoding_the_batch_fails_only_the_extra_batch_case(tmp_path):
    candidate = _linear_candidate(prologue="x = x.reshape(8, 16)")
    code, record = _evaluate(tmp_path, LINEAR_MODEL, candidate)
    assert code == 0
    code, record = _evaluate(tmp_path, LINEAR_MODEL, candidate, "--extra-batch", "12")
    assert code == 1 and record["verdict"] == "incorrect"
    extra = record["cases"][-1]
    assert extra["batch"] == 12 and extra["passed"] is False
    assert all(c["passed"] for c in record["cases"][:-1])
    assert record["reason"].startswith("seed 0 / file / batch 12: ModelNew forward raised")


def test_an_extra_batch_larger_than_the_file_batch_uses_fresh_rows(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(), "--extra-batch", "20")
    assert code == 0, record["reason"]
    assert record["cases"][-1]["input_shapes"] == [[20, 16]]


def test_an_extra_batch_the_model_itself_rejects_is_skipped(tmp_path):
    # BatchNorm in train mode raises on a batch of one: not the candidate's fault.
    code, record = _evaluate(tmp_path, BN_MODEL, BN_CANDIDATE.format(update_stats=True), "--extra-batch", "1")
    assert code == 0
    assert record["cases"][-1]["skipped"] is True and record["cases"][-1]["passed"] is None


def test_a_broken_model_file_is_an_error_blamed_on_the_model(tmp_path):
    code, record = _evaluate(tmp_path, LINEAR_MODEL.replace("def get_inputs", "def no_inputs"),
                             _linear_candidate())
    assert code == 1 and record["verdict"] == "error" and "get_inputs" in record["reason"]


def test_a_failed_verification_removes_a_stale_bench_file(tmp_path):
    stale = tmp_path / "out" / "60_bench.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    code, _ = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(epilogue="out = out + 1e-3"))
    assert code == 1 and not stale.exists()


def test_the_bench_on_cpu_times_eager_and_candidate_and_skips_compile(tmp_path, capsys):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL, _linear_candidate())
    out = tmp_path / "out"
    code = main([str(model_path), str(cand_path), "--out", str(out), "--device", "cpu",
                 "--trials", "3", "--warmup", "1", "--no-compile"])
    assert code == 0
    bench = json.loads((out / "60_bench.json").read_text())
    assert bench["schema"] == "fuseforge.bench/1" and bench["error"] is None
    assert bench["settings"]["trials"] == 3 and bench["settings"]["timer"] == "perf_counter"
    assert bench["variants"]["compile"] == {"status": "skipped", "reason": "--no-compile"}
    assert bench["variants"]["compile_max_autotune"]["status"] == "skipped"
    assert bench["speedup"]["vs_compile_max_autotune"] is None
    for name in ("eager", "candidate"):
        v = bench["variants"][name]
        assert v["status"] == "ok" and v["trials"] == 3
        assert 0 < v["min_ms"] <= v["p10_ms"] <= v["median_ms"] <= v["p90_ms"]
        assert v["peak_bytes"] is None  # no memory statistics on the CPU
    eager, cand = bench["variants"]["eager"], bench["variants"]["candidate"]
    assert bench["speedup"]["vs_eager"] == pytest.approx(eager["median_ms"] / cand["median_ms"])
    assert bench["speedup"]["vs_compile"] is None
    assert bench["environment"]["torch"] and "bench: candidate" in capsys.readouterr().out


def test_max_autotune_is_timed_only_when_asked_for_and_only_on_cuda(tmp_path):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL, _linear_candidate())
    for flags, reason in (([], "off (no --max-autotune)"), (["--max-autotune"], "not on cuda")):
        out = tmp_path / f"out{len(flags)}"
        assert main([str(model_path), str(cand_path), "--out", str(out), "--device", "cpu",
                     "--trials", "2", "--warmup", "1", *flags]) == 0
        bench = json.loads((out / "60_bench.json").read_text())
        assert bench["variants"]["compile_max_autotune"] == {"status": "skipped", "reason": reason}


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_on_cuda_max_autotune_is_a_third_baseline_with_its_own_speedup(tmp_path):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL.replace("rand(8, 16)", "rand(256, 16)"),
                                   _linear_candidate())
    out = tmp_path / "out"
    assert main([str(model_path), str(cand_path), "--out", str(out), "--device", "cuda", "--trials", "5",
                 "--max-autotune"]) == 0
    bench = json.loads((out / "60_bench.json").read_text())
    v = bench["variants"]["compile_max_autotune"]
    assert v["status"] == "ok" and v["median_ms"] > 0, v
    assert bench["speedup"]["vs_compile_max_autotune"] == pytest.approx(
        v["median_ms"] / bench["variants"]["candidate"]["median_ms"])


def test_the_module_runs_as_a_command_and_exits_one_on_a_wrong_candidate(tmp_path):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL, _linear_candidate(epilogue="out = out * 1.01"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "fuseforge.evaluate", str(model_path), str(cand_path),
                           "--out", str(out), "--device", "cpu", "--seeds", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "verify: incorrect" in proc.stdout
    assert json.loads((out / "50_verify.json").read_text())["verdict"] == "incorrect"
    assert not (out / "60_bench.json").exists()


@pytest.mark.gpu
def test_an_honest_candidate_on_cuda_verifies_and_is_benched_against_eager_and_compile(tmp_path):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL.replace("rand(8, 16)", "rand(256, 16)"),
                                   _linear_candidate())
    out = tmp_path / "out"
    code = main([str(model_path), str(cand_path), "--out", str(out), "--device", "cuda",
                 "--trials", "10", "--extra-batch", "100"])
    assert code == 0
    verify = json.loads((out / "50_verify.json").read_text())
    assert verify["verdict"] == "correct" and verify["environment"]["gpu"]
    bench = json.loads((out / "60_bench.json").read_text())
    assert bench["error"] is None and bench["settings"]["timer"] == "cuda_events"
    assert bench["settings"]["l2_flush_bytes"] == 256 * 2**20
    for name in ("eager", "compile", "candidate"):
        v = bench["variants"][name]
        assert v["status"] == "ok", v
        assert v["median_ms"] > 0 and v["peak_bytes"] >= 0 and v["peak_abs_bytes"] >= v["peak_bytes"]
    assert bench["speedup"]["vs_compile"] > 0 and bench["environment"]["capability"]


@pytest.mark.gpu
@pytest.mark.parametrize("rows, cols", [(8, 32), (1024, 1024)])  # the allocator's small and large pools
def test_on_cuda_an_output_left_half_unwritten_reads_as_nan_and_fails(tmp_path, rows, cols):
    model = LINEAR_MODEL.replace("rand(8, 16)", f"rand({rows}, 16)").replace("[16, 32]", f"[16, {cols}]")
    candidate = _linear_candidate(
        prologue="result = torch.empty(x.shape[0], self.linear.weight.shape[0], device=x.device)",
        epilogue="result[: x.shape[0] // 2] = out[: x.shape[0] // 2]; out = result")
    code, record = _evaluate(tmp_path, model, candidate, "--device", "cuda")  # the last --device wins
    assert code == 1 and record["verdict"] == "incorrect"
    assert "NaN where the fp64 truth is finite" in record["reason"]


def test_the_inputs_do_not_depend_on_random_numbers_the_candidate_constructor_draws(tmp_path):
    _, honest = _evaluate(tmp_path, LINEAR_MODEL, _linear_candidate(), "--seeds", "1")
    greedy = _linear_candidate().replace("super().__init__()", "super().__init__()\n        torch.rand(999)")
    _, drawing = _evaluate(tmp_path, LINEAR_MODEL, greedy, "--seeds", "1")
    assert drawing["verdict"] == "correct"
    rms = [[c["outputs"][0]["truth_rms"] for c in r["cases"]] for r in (honest, drawing)]
    assert rms[0] == rms[1]


FLAG_MODEL = """
class Model(nn.Module):
    def forward(self, x):  # reports the matmul precision it ran under
        return x * (1.0 if torch.get_float32_matmul_precision() == "highest" else 2.0)


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def restore_matmul_precision():
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


def test_a_candidate_that_loosens_matmul_precision_globally_does_not_loosen_eager(
    tmp_path, restore_matmul_precision
):
    torch.set_float32_matmul_precision("highest")
    candidate = """
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 1.0
"""
    code, record = _evaluate(tmp_path, FLAG_MODEL, candidate, "--seeds", "1")
    assert code == 0, record["reason"]


INPLACE_MODEL = """
class Model(nn.Module):
    def forward(self, x):  # mutates its input
        x.mul_(2)
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""


def test_each_run_gets_its_own_inputs_so_a_model_mutating_them_spoils_no_other_run(tmp_path):
    candidate = """
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x * 2)
"""
    code, record = _evaluate(tmp_path, INPLACE_MODEL, candidate, "--seeds", "1")
    assert code == 0, record["reason"]


@pytest.mark.gpu
def test_on_cuda_a_device_side_assert_in_the_candidate_is_an_error_verdict(tmp_path):
    # A sticky CUDA error spoils the process, hence a subprocess.
    model_path, cand_path = _files(
        tmp_path, LINEAR_MODEL, _linear_candidate(prologue="x = x[torch.full((8,), 99, device=x.device)]")
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "fuseforge.evaluate", str(model_path), str(cand_path), "--out", str(out),
         "--device", "cuda"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1
    record = json.loads((out / "50_verify.json").read_text())
    assert record["verdict"] == "error" and record["reason"].startswith("ModelNew forward raised")
    assert "CUDA" in record["reason"]


def test_zero_seeds_is_refused_rather_than_verifying_nothing(tmp_path, capsys):
    model_path, cand_path = _files(tmp_path, LINEAR_MODEL, _linear_candidate())
    with pytest.raises(SystemExit) as exit_info:
        main([str(model_path), str(cand_path), "--out", str(tmp_path / "out"), "--seeds", "0"])
    assert exit_info.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def test_a_one_line_reason_names_the_cuda_error_a_later_line_of_the_message_gives():
    """A call that failed because an earlier kernel broke the CUDA context says so on its one line."""
    from fuseforge.evaluate.harness import one_line

    exc = RuntimeError("Error(s) in loading state_dict for ModelNew:\n\tWhile copying the parameter named "
                       "\"w\", an exception occurred : ('CUDA error: an illegal memory access was encountered\\n').")
    assert one_line(exc).startswith("RuntimeError: Error(s) in loading state_dict for ModelNew: While copying")
    assert "CUDA error: an illegal memory access" in one_line(exc)
    assert one_line(ValueError("plain\nsecond line")) == "ValueError: plain"
