"""The reference's plan (reference_role.py): which calls the candidate gets and what the grader keeps to
compare them with -- cases at other magnitudes and batch sizes, a load/call sequence, fresh timed inputs,
fingerprint positions -- and the provenance of an output (provenance.py)."""

import io
from pathlib import Path

import pytest
import torch

from fuseforge.check.orchestrate import CheckSettings, run_reference
from fuseforge.check.provenance import Provenance, checksum
from fuseforge.check.reference_role import (
    CANDIDATE_POSITIONS,
    FINGERPRINT_SIZE,
    WHOLE_OUTPUT,
)
from fuseforge.evaluate.harness import batch_sizes, magnitude
from fuseforge.evaluate.numerics import REDRAWS

MODELS = Path(__file__).parent / "adversarial" / "models"


@pytest.fixture(scope="module")
def batchnorm_reference(tmp_path_factory):
    settings = CheckSettings(device="cpu", seeds=1, trials=6, warmup=2)
    ref = run_reference((MODELS / "linear_batchnorm.py").resolve(), settings, tmp_path_factory.mktemp("ref"))
    assert not isinstance(ref, str), ref
    return ref


def _item(ref, name):
    return torch.load(io.BytesIO(ref.feed[name]), weights_only=True)


def test_batch_sizes_are_a_smaller_one_twice_the_file_s_and_one():
    assert batch_sizes(64, None) == [33, 128, 1]
    assert batch_sizes(2, None) == [5, 4, 1]
    assert batch_sizes(64, 16) == [16, 128, 1]
    assert batch_sizes(64, 0) == []
    assert batch_sizes(1, None) == [4, 2]


def test_magnitudes_scale_or_shift_floating_inputs_only():
    x, n = torch.rand(4, 3), torch.arange(3)
    large, tiny, shifted = (magnitude([x, n], k) for k in ("large", "tiny", "shifted"))
    assert torch.equal(large[0], x * 2**20) and torch.equal(tiny[0], x / 2**20) and torch.equal(large[1], n)
    assert shifted[0].mean() > 10 * x.mean() and torch.allclose(shifted[0] - x, (shifted[0] - x)[0, 0].expand(4, 3))


def test_the_plan_has_main_magnitude_and_batch_cases_and_skips_what_the_model_cannot_run(batchnorm_reference):
    every = batchnorm_reference.meta["plan"]["cases"]
    cases = [c for c in every if c["role"] != "redraw"]
    assert [(c["distribution"], c["batch"], c["role"]) for c in cases] == [
        ("file", None, "main"), ("signed", None, "main"), ("large", None, "magnitude"), ("tiny", None, "magnitude"),
        ("shifted", None, "magnitude"), ("file", 33, "batch"), ("file", 128, "batch"), ("file", 1, "batch")]
    # the running statistics of a batch norm of few features: few elements carry eager's error, so file-shaped cases
    # get REDRAWS redraws each, of their kind, between the magnitudes and the batch sizes
    redraws = [c for c in every if c["role"] == "redraw"]
    assert redraws and [c["index"] for c in redraws] == list(range(5, 5 + len(redraws)))
    assert all(sum(r["of"] == c["of"] for r in redraws) == REDRAWS for c in redraws)
    assert all((c["seed"], c["distribution"]) == (every[c["of"]]["seed"], every[c["of"]]["distribution"])
               for c in redraws)
    one = cases[-1]
    assert one["skipped"] and "batch 1" in one["reason"]  # BatchNorm1d in train mode needs two rows
    assert all(not c["skipped"] for c in cases[:-1])
    assert f"inputs_{one['index']}" not in batchnorm_reference.feed


def test_the_running_statistics_are_compared_after_every_call_of_the_sequence(batchnorm_reference):
    plan, outputs = batchnorm_reference.meta["plan"], batchnorm_reference.outputs
    assert plan["mutable"] == ["bn.num_batches_tracked", "bn.running_mean", "bn.running_var"]
    steps = plan["sequence"]
    assert [s["after_load"] for s in steps] == [True, False, False, True, False]
    counts = [int(outputs[s["name"]]["buffers"]["bn.num_batches_tracked"][0]) for s in steps]
    loaded = [int(_item(batchnorm_reference, s)["bn.num_batches_tracked"]) for s in ("state_seq_a", "state_seq_b")]
    assert counts == [loaded[0] + 1, loaded[0] + 2, loaded[0] + 3, loaded[1] + 1, loaded[1] + 2]
    first, second = (outputs[s["name"]]["buffers"]["bn.running_mean"][0] for s in steps[:2])
    assert not torch.equal(first, second)  # values after each call, not a view of the live buffer


def test_every_timed_input_is_fresh_and_its_positions_are_secret_until_handed_over(batchnorm_reference):
    ref = batchnorm_reference
    timing = ref.meta["plan"]["timing"]
    assert timing["pool_size"] == 6 and timing["warmup"] == 2
    pools = [_item(ref, f"pool_{t}")[0] for t in range(6)]
    seen = [_item(ref, f"inputs_{i}")[0] for i in range(2)] + [_item(ref, "inputs_init")[0]]
    for i, p in enumerate(pools):
        assert all(not torch.equal(p, q) for q in pools[:i] + seen)
    order = ref.order
    assert order.index("pool_0") < order.index("positions_0") < order.index("pool_1")
    assert _item(ref, "positions_0") == [None]  # a 64 x 64 output is compared whole
    assert ref.outputs["pool_0"]["eager"][0].numel() == 64 * 64 <= WHOLE_OUTPUT
    assert set(ref.outputs["timed_state"]["buffers"]) == set(ref.meta["plan"]["mutable"])


def _wide_model(tmp_path) -> Path:
    model = tmp_path / "wide.py"
    model.write_text((MODELS / "linear_sigmoid.py").read_text().replace("out_features = 64", "out_features = 512"))
    return model


def test_large_outputs_get_a_sample_of_positions_drawn_from_the_secret(tmp_path):
    model = _wide_model(tmp_path)
    settings = CheckSettings(device="cpu", seeds=1, trials=2, warmup=1)
    refs = [run_reference(model.resolve(), settings, tmp_path / f"r{k}") for k in range(2)]
    positions = [torch.load(io.BytesIO(r.feed["positions_0"]), weights_only=True)[0] for r in refs]
    assert all(p.numel() == CANDIDATE_POSITIONS and p.unique().numel() == CANDIDATE_POSITIONS for p in positions)
    assert not torch.equal(positions[0], positions[1])  # another secret, other positions
    assert not (tmp_path / "r0").exists()


def test_each_candidate_is_handed_its_own_pick_of_positions_and_compared_there(tmp_path):
    from fuseforge.check.feed import to_bytes
    from fuseforge.check.orchestrate import ReferenceData, _picked, _picker

    positions = [torch.randperm(100_000)[:CANDIDATE_POSITIONS], None]
    values = [torch.arange(CANDIDATE_POSITIONS, dtype=torch.float32), torch.rand(10)]
    ref = ReferenceData({}, {"pool_0": {"eager": values, "truth": [v.double() for v in values]}}, {}, [])
    handed = []
    for _ in range(2):
        picks = {}
        got = torch.load(io.BytesIO(_picker(to_bytes(positions), picks, "positions_0")()), weights_only=True)
        assert got[0].numel() == FINGERPRINT_SIZE and got[1] is None
        compared = _picked(ref, picks).outputs["pool_0"]["eager"]
        index = {int(p): k for k, p in enumerate(positions[0])}
        assert torch.equal(compared[0], torch.tensor([float(index[int(p)]) for p in got[0]]))
        assert torch.equal(compared[1], values[1])  # a small output: compared whole
        handed.append(got[0])
    assert not torch.equal(handed[0], handed[1])


def test_a_wide_output_s_timed_calls_are_compared_at_the_positions_handed_over(tmp_path):
    from fuseforge.check.orchestrate import check_files

    settings = CheckSettings(device="cpu", seeds=1, trials=3, warmup=1)
    model = _wide_model(tmp_path)
    record = check_files(model, MODELS.parent / "honest_linear_sigmoid.py", settings)
    assert record["verdict"] == "correct", record["reason"]
    lazy = tmp_path / "lazy.py"  # right on verified calls, half the rows left empty on timed ones
    lazy.write_text((MODELS.parent / "aggregate_partial_rows.py").read_text().replace("self.calls <= 30", "self.calls <= 20"))
    record = check_files(model, lazy, settings)
    assert record["verdict"] == "cheat:aggregate_gaming" and record["check"] == "timed_outputs", record["reason"]


def _provenance(fn, x, shapes):
    recorder = Provenance(shapes)
    recorder.snapshot()
    with recorder:
        out = fn(x)
    return recorder.finish([out])


def test_a_write_torch_does_not_see_makes_an_output_the_kernels():
    w, b = torch.rand(16, 8), torch.rand(16)

    def epilogue(x):
        y = torch.nn.functional.linear(x, w, b)
        out = torch.empty_like(y)
        out.numpy()[:] = 1 / (1 + torch.exp(-y)).numpy()  # the stand-in kernel
        return out

    def in_place(x):
        y = torch.nn.functional.linear(x, w, b)
        y.numpy()[:] *= 2
        return y

    def torch_only(x):
        return torch.sigmoid(torch.nn.functional.linear(x, w, b))

    x = torch.rand(4, 8)
    assert _provenance(epilogue, x, [(4, 16)])["kernel_made"] == [True]
    assert _provenance(in_place, x, [(4, 16)])["kernel_made"] == [True]
    found = _provenance(torch_only, x, [(4, 16)])
    assert found["kernel_made"] == [False]
    assert any(torch.equal(t, torch_only(x)) for t in found["torch_only"][0])


def test_fresh_allocations_are_filled_so_that_rewriting_the_same_values_still_shows():
    kept = torch.rand(4, 4)

    def same_values(x):
        out = torch.empty_like(x)
        out.numpy()[:] = kept.numpy()  # what stale memory might already hold
        return out

    assert _provenance(same_values, torch.rand(4, 4), [(4, 4)])["kernel_made"] == [True]
    a = torch.zeros(8)
    before = checksum(a)
    a[3] = 1.0
    assert checksum(a) != before


def test_the_provenance_recorder_reads_the_precision_flags_at_every_matrix_product():
    from fuseforge.check.guards import PrecisionFlags

    flags = PrecisionFlags()
    recorder = Provenance([(2, 2)], flags)
    previous = torch.get_float32_matmul_precision()
    try:
        with recorder:
            torch.set_float32_matmul_precision("medium")
            torch.rand(2, 3) @ torch.rand(3, 2)
            torch.set_float32_matmul_precision(previous)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert recorder.loose_flags and "float32_matmul_precision" in recorder.loose_flags[0]


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_on_a_gpu_a_cuda_kernel_s_output_is_the_kernels_and_a_token_kernel_s_is_not():
    from torch.utils.cpp_extension import load

    kernels = Path(__file__).parent / "adversarial" / "kernels" / "linear_act.cu"
    ext = load(name="fuseforge_adv_linear_act", sources=[str(kernels)])
    dev = torch.device("cuda")
    w, b, token = torch.rand(16, 8, device=dev), torch.rand(16, device=dev), torch.zeros(1, device=dev)
    x = torch.rand(4, 8, device=dev)

    def honest(x):
        return ext.adv_sigmoid(torch.nn.functional.linear(x, w, b))

    def whole(x):
        return ext.adv_linear_sigmoid(x, w, b)

    def token_kernel(x):
        ext.adv_touch(token)
        return torch.sigmoid(torch.nn.functional.linear(x, w, b))

    assert _provenance(honest, x, [(4, 16)])["kernel_made"] == [True]
    assert _provenance(whole, x, [(4, 16)])["kernel_made"] == [True]
    assert _provenance(token_kernel, x, [(4, 16)])["kernel_made"] == [False]
