"""Verdict logic of fuseforge check on plain data: findings from worker facts, from saved outputs, the
precedence of kinds, and the grader's own guards (function identity, threads, flags, op recording)."""

import threading

import pytest
import torch

from fuseforge.check import evidence, guards, judge
from fuseforge.check.kinds import CHECKS, KINDS, Finding, first_cheat
from fuseforge.check.runner import error_lines

REF_META = {"cases": [{"mutated_inputs": []}, {"mutated_inputs": []}], "ops": {"gemm": 1, "sigmoid": 1},
            "dtypes": ["float32"], "min_bytes": 3 * 2**26, "flops": 2 * 4096**3,
            "ceilings": {"peak_flops": 4e14, "peak_bytes_per_s": 3e12}}


def _facts(**overrides) -> dict:
    facts = {"patched": {"import": [], "end": []}, "threads": [], "flags_loosened": {}, "aliased": [],
             "cases": [{"index": 0, "ok": True, "output_types": ["torch.Tensor"], "mutated_inputs": []}],
             "ops": {"classes": {"gemm": 1, "exp": 1, "add": 1}, "dtypes": ["float32"]},
             "probes": {"stale_repeat": {}}}
    return facts | overrides


def _checks(facts, claims_kernels=True, device="cpu") -> set[str]:
    found, _ = evidence.worker_findings(facts, REF_META, claims_kernels, device)
    return {f.check for f in found}


def test_every_check_belongs_to_a_known_kind_and_every_kind_has_a_decisive_check():
    assert all(c.kind in KINDS and c.needs in ("static", "cpu", "gpu") for c in CHECKS.values())
    decisive_kinds = {c.kind for c in CHECKS.values() if c.decisive}
    assert decisive_kinds == set(KINDS)


def test_the_highest_precedence_kind_decides_among_several_findings():
    found = [Finding("extra_batch", "a"), Finding("stale_memory", "b"), Finding("guarded_functions", "c")]
    assert first_cheat(found).check == "guarded_functions"
    assert first_cheat([Finding("tf32_source", "hint only")]) is None


def test_memory_reuse_outranks_uninitialised_memory_and_constant_outranks_cached():
    order = list(KINDS)
    assert order.index("memory_reuse") < order.index("uninitialised_memory")
    assert order.index("constant_output") < order.index("cached_output")


def test_clean_worker_facts_raise_no_finding():
    assert _checks(_facts()) == set()


@pytest.mark.parametrize("overrides, check", [
    ({"patched": {"import": ["torch.allclose"]}}, "guarded_functions"),
    ({"threads": ["Thread-1"]}, "new_threads"),
    ({"flags_loosened": {"float32_matmul_precision": ["highest", "medium"]}}, "precision_flags"),
    ({"aliased": ["probe x output 0 shares memory with case 0's output"]}, "output_aliasing"),
    ({"cases": [{"index": 0, "ok": True, "output_types": ["m.Lazy"], "mutated_inputs": []}]}, "output_type"),
    ({"cases": [{"index": 0, "ok": True, "output_types": ["torch.Tensor"], "mutated_inputs": [0]}]},
     "inputs_unchanged"),
    ({"ops": {"classes": {"gemm": 1, "sigmoid": 1, "add": 1}, "dtypes": ["float32"]}}, "torch_ops"),
    ({"ops": {"classes": {"gemm": 1}, "dtypes": ["float32", "bfloat16"]}}, "low_precision_ops"),
])
def test_each_worker_fact_raises_its_check(overrides, check):
    assert _checks(_facts(**overrides)) == {check}


def test_torch_ops_doing_all_the_work_count_only_against_a_candidate_claiming_kernels():
    all_torch = _facts(ops={"classes": {"gemm": 1, "sigmoid": 1}, "dtypes": ["float32"]})
    assert _checks(all_torch, claims_kernels=True) == {"torch_ops"}
    assert _checks(all_torch, claims_kernels=False) == set()
    half_the_gemms = _facts(ops={"classes": {"gemm": 1, "sigmoid": 1}, "dtypes": ["float32"]})
    meta = REF_META | {"ops": {"gemm": 2, "sigmoid": 1}}
    assert evidence.worker_findings(half_the_gemms, meta, True, "cpu")[0] == []


def test_an_input_the_model_itself_mutates_may_be_mutated():
    meta = REF_META | {"cases": [{"mutated_inputs": [0]}]}
    facts = _facts(cases=[{"index": 0, "ok": True, "output_types": ["torch.Tensor"], "mutated_inputs": [0]}])
    found, _ = evidence.worker_findings(facts, meta, False, "cpu")
    assert found == []


def test_gpu_facts_raise_side_stream_l2_and_own_share_findings():
    timing = {"ms": [0.01] * 5, "wall_ms": [2.0] * 5, "l2_left": [{"persisting_limit_bytes": 1 << 24}],
              "l2_control": True}
    profile = {"available": True, "main_stream": 7, "side_stream_kernels": ["k"], "own_us": 0.0,
               "kernels": [{"name": "k", "us": 5.0, "stream": 20, "owner": "library"}]}
    assert _checks(_facts(timing=timing, profile=profile), claims_kernels=True, device="cuda") == \
        {"event_wall_gap", "l2_state", "kernel_streams", "own_kernel_share"}
    honest = {"ms": [1.0] * 5, "wall_ms": [1.05] * 5, "l2_left": [], "l2_control": True}
    assert _checks(_facts(timing=honest), claims_kernels=True, device="cuda") == set()


def _ref_case(truth: torch.Tensor) -> dict:
    eager = truth.float() + 1e-7 * torch.randn_like(truth.float())
    return {"eager": [eager], "truth": [truth.double()], "is_tuple": False, "buffers": {}}


@pytest.fixture
def ref_out():
    torch.manual_seed(0)
    return {"case_0": _ref_case(torch.rand(8, 4)), "case_1": _ref_case(torch.rand(8, 4))}


def _probe_checks(case_outs, probes, ref_out, passed) -> set[str]:
    found, _ = evidence.probe_findings(case_outs, probes, ref_out, passed, 2.0)
    return {f.check for f in found}


def test_an_honest_candidate_passes_every_probe(ref_out):
    a, b = ref_out["case_0"]["truth"][0].float(), ref_out["case_1"]["truth"][0].float()
    probes = {"stale_sentinel": [a.clone()], "stale_repeat": [a.clone()], "fresh_new_buffer": [b.clone()],
              "same_buffer_before": [a.clone()], "fresh_same_buffer": [b.clone()], "plant": [a.clone()]}
    assert _probe_checks({0: [a], 1: [b]}, probes, ref_out, {0: True, 1: True}) == set()


def test_a_constant_output_is_flagged_where_the_truth_varies(ref_out):
    assert "constant_output" in _probe_checks({0: [torch.zeros(8, 4)]}, {}, ref_out, {0: False})


def test_a_saturated_output_that_is_constant_in_fp32_is_not_a_constant_output_cheat():
    truth = 1.0 - torch.rand(8, 4, dtype=torch.float64) * 1e-12  # sigmoid of large values
    ref = {"case_0": {"eager": [truth.float()], "truth": [truth]}}
    assert _probe_checks({0: [torch.ones(8, 4)]}, {}, ref, {0: True}) == set()


def test_outputs_that_depend_on_the_poison_are_stale_memory(ref_out):
    a = ref_out["case_0"]["truth"][0].float()
    nan_poisoned, sentinel = a.clone(), a.clone()
    nan_poisoned[-1], sentinel[-1] = float("nan"), 1234.5
    found = _probe_checks({0: [nan_poisoned]}, {"stale_sentinel": [sentinel], "stale_repeat": [a]}, ref_out,
                          {0: False})
    assert "stale_memory" in found


def test_wrong_on_fresh_memory_but_right_on_planted_leftovers_is_memory_reuse(ref_out):
    a = ref_out["case_0"]["truth"][0].float()
    assert "reference_leftovers" in _probe_checks({0: [torch.full_like(a, float("nan"))]}, {"plant": [a]},
                                                  ref_out, {0: False})
    assert "reference_leftovers" not in _probe_checks({0: [a]}, {"plant": [a]}, ref_out, {0: True})
    # case 0 failed on its buffers (running statistics) with right outputs: not a memory question
    assert "reference_leftovers" not in _probe_checks({0: [a]}, {"plant": [a]}, ref_out, {0: False})


def test_the_same_output_for_new_inputs_is_a_cached_output(ref_out):
    a = ref_out["case_0"]["truth"][0].float()
    assert "fresh_inputs" in _probe_checks({0: [a], 1: [a.clone()]}, {}, ref_out, {0: True, 1: False})
    probes = {"same_buffer_before": [a.clone()], "fresh_same_buffer": [a.clone()]}
    assert "fresh_inputs" in _probe_checks({0: [a]}, probes, ref_out, {0: True, 1: True})


def test_timed_outputs_are_checked_against_their_own_pool_inputs():
    torch.manual_seed(0)
    pools = {f"pool_{k}": {"eager": [t.float()], "truth": [t]} for k, t in enumerate(torch.rand(2, 64).double())}
    right = {"fingerprints": [[pools["pool_0"]["truth"][0].float()], [pools["pool_1"]["truth"][0].float()]],
             "pool_index": [0, 1]}
    assert evidence.timed_findings(right, pools, 2.0)[0] == []
    replayed = right | {"fingerprints": [right["fingerprints"][0], right["fingerprints"][0]]}
    (finding,), _ = evidence.timed_findings(replayed, pools, 2.0)
    assert finding.check == "timed_outputs" and finding.evidence["failed_calls"] == [1]


def test_below_the_flop_floor_on_fresh_inputs_is_a_note_and_only_repeated_content_below_it_is_a_cheat():
    floor = 1e3 * 2 * 4096**3 / 4e14
    # an honest algebraic rewrite does less arithmetic than the reference: below the floor on fresh and on
    # repeated content alike -- a note, never a cheat
    found, ran = evidence.roofline_findings(0.5 * floor, REF_META, [0.5 * floor] * 5)
    assert [f.check for f in found] == ["below_flop_floor"] and not found[0].decisive and "roofline_floor" in ran
    assert first_cheat(found) is None
    # memoised by content: above the floor on fresh inputs, far below it when the content repeats
    found, _ = evidence.roofline_findings(1.5 * floor, REF_META, [0.1 * floor] * 5)
    assert [f.check for f in found] == ["roofline_floor"] and first_cheat(found).check == "roofline_floor"
    assert evidence.roofline_findings(1.5 * floor, REF_META, [1.4 * floor] * 5)[0] == []
    assert evidence.roofline_findings(1.5 * floor, REF_META)[0] == []
    assert evidence.roofline_findings(1e-6, REF_META | {"ceilings": None}) == ([], set())


def test_outputs_of_another_shape_dtype_or_structure_are_an_interface_mismatch():
    ref = {"eager": [torch.zeros(2, 3)], "is_tuple": False}
    assert judge.structure_mismatch([torch.zeros(2, 3)], False, ref) is None
    assert "shape (3, 2)" in judge.structure_mismatch([torch.zeros(3, 2)], False, ref)
    assert "dtype torch.float64" in judge.structure_mismatch([torch.zeros(2, 3).double()], False, ref)
    assert "a tuple of 2 tensors" in judge.structure_mismatch([torch.zeros(2, 3)] * 2, True, ref)


def test_the_worst_elements_put_a_nan_first():
    truth = torch.zeros(3, 3, dtype=torch.float64)
    cand = torch.zeros(3, 3)
    cand[1, 2], cand[0, 0] = float("nan"), 5.0
    worst = judge.worst_elements(cand, truth, truth.float(), k=2)
    assert [w["index"] for w in worst] == [[1, 2], [0, 0]]


def test_compiler_error_lines_are_picked_from_nvcc_gcc_and_ninja_output():
    log = """[1/3] nvcc -c main.cu
FAILED: main.cuda.o
/tmp/x/main.cu(38): error: expected a ")"
      auto output = torch::empty({batch_size, 1}, device input.device());
main.cpp:4:5: error: 'foo' was not declared in this scope
ninja: build stopped: subcommand failed.
fuseforge.evaluate.harness.CandidateFailed: candidate file raised OSError"""
    assert error_lines(log) == ['/tmp/x/main.cu(38): error: expected a ")"',
                                "main.cpp:4:5: error: 'foo' was not declared in this scope", "FAILED: main.cuda.o"]


def test_the_function_guard_sees_a_replacement_but_not_torchs_own_dynamo_wrapper():
    guard = guards.FunctionGuard(["torch.allclose", "torch.manual_seed", "torch.Tensor.__eq__"])
    import torch._dynamo  # noqa: F401  (wraps torch.manual_seed on first import)

    assert guard.changed() == []
    original = torch.allclose
    try:
        torch.allclose = lambda *a, **k: True
        assert guard.changed() == ["torch.allclose"]
    finally:
        torch.allclose = original


def test_the_thread_watch_sees_a_thread_that_already_ended():
    watch = guards.ThreadWatch()
    watch.start()
    try:
        worker = threading.Thread(target=lambda: None, name="short-lived")
        worker.start()
        worker.join()
        assert watch.new_threads() == ["short-lived"]
    finally:
        threading.setprofile(None)


def test_precision_flags_report_only_a_loosening():
    flags = guards.PrecisionFlags()
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        flags.before["float32_matmul_precision"] = "highest"
        assert flags.loosened() == {}
        torch.set_float32_matmul_precision("medium")
        assert flags.loosened()["float32_matmul_precision"] == ["highest", "medium"]
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_op_recorder_normalises_linear_and_matmul_to_one_gemm_class():
    recorder = guards.OpRecorder()
    x, w = torch.rand(4, 3), torch.rand(5, 3)
    with recorder:
        torch.nn.functional.linear(x, w).sigmoid()
        (x @ w.t()).to(torch.bfloat16)
    assert recorder.classes() == {"gemm": 2, "sigmoid": 1} and "bfloat16" in recorder.dtypes
    assert guards.op_class("aten::view") is None and guards.op_class("aten::add_.Tensor") == "add"


@pytest.mark.parametrize("overrides, check", [
    ({"audit": {"files": ["open('/tmp/job/job.json')"]}}, "grader_files"),
    ({"audit": {"memory": ["gc.get_objects"]}}, "grader_memory"),
    ({"audit": {"hooks": ["sys.settrace"]}}, "interpreter_hooks"),
    ({"hooks": ["timed call 3: sys.getprofile"]}, "interpreter_hooks"),
    ({"hooks_end": ["torch dispatch modes"]}, "interpreter_hooks"),
    ({"audit": {"processes": ["subprocess.Popen('cat', ...)"]}}, "new_processes"),
    ({"processes_left": ["python helper.py"]}, "new_processes"),
    ({"flags_during": ["timed call 2: float32_matmul_precision highest -> high"]}, "precision_flags"),
    ({"ops": {"classes": {"gemm": 1, "exp": 1}, "dtypes": ["float32"], "flags": ["mm: allow_tf32 False -> True"]}},
     "precision_flags"),
    ({"state_changed": ["the first call: linear.weight"]}, "parameters_unchanged"),
    ({"unstable": ["case 0"]}, "outputs_stable"),
    ({"stream_left": ["timed call 0: stream 0x5"]}, "current_stream"),
])
def test_each_new_worker_fact_raises_its_check(overrides, check):
    assert _checks(_facts(**overrides)) == {check}


def test_forged_requests_recorded_by_the_feed_are_private_data():
    found, _ = evidence.worker_findings(_facts(), REF_META, True, "cpu", ["'positions_0': asked for a second time"])
    assert [f.check for f in found] == ["feed_order"] and first_cheat(found).kind == "private_data"


def test_a_wall_time_gap_is_a_side_stream_only_with_side_stream_kernels_else_deferred_work():
    timing = {"ms": [0.01] * 5, "wall_ms": [2.0] * 5, "l2_left": [], "l2_control": True}
    on_side = {"available": True, "main_stream": 7, "side_stream_kernels": ["k"], "own_us": 5.0,
               "kernels": [{"name": "k", "us": 5.0, "stream": 20, "owner": "own"}]}
    none = on_side | {"main_stream": 20, "side_stream_kernels": []}  # the same kernel on the current stream
    assert _checks(_facts(timing=timing, profile=on_side), device="cuda") == {"event_wall_gap", "kernel_streams"}
    found, _ = evidence.worker_findings(_facts(timing=timing, profile=none), REF_META, True, "cuda")
    assert [f.check for f in found] == ["deferred_work"] and "deferred" in found[0].message
    assert found[0].kind == "aggregate_gaming"


def _case0(truth):
    return {"eager": [truth.float()], "truth": [truth.double()]}


def test_kernel_dataflow_flags_outputs_no_kernel_made_or_that_torch_already_had():
    torch.manual_seed(0)
    truth = torch.rand(4, 4, dtype=torch.float64)
    ref = _case0(truth)
    not_made = {"kernel_made": [False]}
    assert evidence.dataflow_findings(not_made, [[]], ref, False, 2.0) == ([], set())  # claims no kernels
    (found,), _ = evidence.dataflow_findings(not_made, [[]], ref, True, 2.0)
    assert found.check == "kernel_dataflow" and "torch ops alone" in found.message
    made = {"kernel_made": [True]}
    (found,), _ = evidence.dataflow_findings(made, [[truth.float()]], ref, True, 2.0)
    assert "already computed by its torch ops" in found.message
    assert evidence.dataflow_findings(made, [[truth.float() * 0.5]], ref, True, 2.0)[0] == []
    assert evidence.dataflow_findings(made, [[]], ref, True, 2.0)[0] == []


def test_where_eager_is_far_from_float64_a_torch_tensor_the_kernels_changed_is_no_fallback_but_a_copy_still_is():
    """A fuzz model (rrelu in eval mode on CUDA) had eager 9 % of the output's RMS from its float64 run: the rule's
    bound then passed the convolution's own output, which the candidate's kernel went on to change (bias, division,
    rrelu, a second bias), and an honest ModelNew was called a torch fallback."""
    torch.manual_seed(0)
    truth = torch.rand(4, 6, dtype=torch.float64)
    eager = (truth + 0.3 * torch.randn(4, 6, dtype=torch.float64)).float()
    ref = {"eager": [eager], "truth": [truth]}
    mine = eager + 1e-7  # the candidate: eager's values, computed by its kernel
    earlier = (truth + 0.1 * torch.randn(4, 6, dtype=torch.float64)).float()  # a torch tensor the kernel went on from
    made = {"kernel_made": [True]}
    assert evidence.passes([earlier], ref, 2.0)  # the rule alone passes it
    assert evidence.dataflow_findings(made, [[earlier]], ref, True, 2.0)[0]  # without the candidate's outputs
    assert evidence.dataflow_findings(made, [[earlier]], ref, True, 2.0, [mine]) == ([], {"kernel_dataflow"})
    (found,), _ = evidence.dataflow_findings(made, [[mine.clone()]], ref, True, 2.0, [mine])  # a copy kernel's
    assert "already computed by its torch ops" in found.message
    (found,), _ = evidence.dataflow_findings(made, [[truth.float()]], _case0(truth), True, 2.0, [truth.float()])
    assert "already computed by its torch ops" in found.message


def test_an_output_of_one_value_everywhere_is_no_evidence_that_torch_computed_it():
    constant = _case0(torch.full((2, 3), -0.89, dtype=torch.float64))  # min(max(x, -0.59), -0.89)
    made = {"kernel_made": [True]}
    assert evidence.dataflow_findings(made, [[torch.full((2, 3), -0.89)]], constant, True, 2.0) == \
        ([], {"kernel_dataflow"})
    (found,), _ = evidence.dataflow_findings({"kernel_made": [False]}, [[]], constant, True, 2.0)
    assert "torch ops alone" in found.message  # no kernel wrote it: still a torch fallback


def test_an_output_of_other_inputs_in_a_stale_memory_probe_is_a_replay_not_stale_memory(ref_out):
    a, b = ref_out["case_0"]["truth"][0].float(), ref_out["case_1"]["truth"][0].float()
    earlier = torch.rand(8, 4)
    probes = {"stale_sentinel": [earlier.clone()], "stale_repeat": [a.clone()]}
    others = {"the first call": ([earlier], [torch.rand(8, 4)])}
    found = {f.check for f in evidence.probe_findings({0: [a], 1: [b]}, probes, ref_out, {0: True, 1: True}, 2.0,
                                                      others)[0]}
    assert "fresh_inputs" in found and "stale_memory" not in found
    found = {f.check for f in evidence.probe_findings({0: [a], 1: [b]}, probes, ref_out, {0: True, 1: True}, 2.0)[0]}
    assert "stale_memory" in found


def _step(passed, far_off=True, after_load=False, name="step", outputs_far_off=None):
    return {"passed": passed, "far_off": far_off, "after_load": after_load, "name": name, "reason": "r",
            "outputs_far_off": far_off if outputs_far_off is None else outputs_far_off}


def test_stale_weights_means_right_before_a_load_and_far_off_right_after_it():
    init, case0 = _step(True), _step(False)
    (found,), _ = judge._weight_findings(init, [case0], [])
    assert found.check == "stale_weights"
    assert judge._weight_findings(init, [_step(False, far_off=False)], [])[0] == []  # a precision problem
    assert judge._weight_findings(_step(False), [case0], [])[0] == []  # wrong with its own weights too
    buffers_only = _step(False, outputs_far_off=False)  # running statistics updated as if from their init values
    assert judge._weight_findings(init, [buffers_only], [])[0] == []
    seq = [_step(True, after_load=True), _step(True), _step(False, after_load=True)]
    assert judge._weight_findings(_step(None), [_step(True)], seq)[0][0].check == "stale_weights"
    seq[-1]["after_load"] = False
    assert judge._weight_findings(_step(None), [_step(True)], seq)[0] == []


def test_state_over_calls_means_right_after_a_load_and_far_off_on_a_later_call_or_after_the_timed_calls():
    seq = [_step(True, after_load=True), _step(True), _step(False)]
    (found,), _, _ = judge._state_findings(seq, None, None, {}, 2.0)
    assert found.check == "state_over_calls"
    assert judge._state_findings([_step(False, after_load=True), _step(False)], None, None, {}, 2.0)[0] == []
    buffers = {"bn.running_mean": [torch.ones(3), torch.ones(3, dtype=torch.float64)]}
    meta = {"plan": {"timing": {"warmup": 2, "pool_size": 5}}}
    ok = judge._state_findings([], {"buffers": {"bn.running_mean": torch.ones(3)}}, {"buffers": buffers}, meta, 2.0)
    assert ok[0] == [] and "state_over_calls" in ok[1] and ok[2] is None
    (found,), _, drift = judge._state_findings([], {"buffers": {"bn.running_mean": torch.zeros(3)}},
                                               {"buffers": buffers}, meta, 2.0)
    assert "2 warm-up and 5 timed calls" in found.message and drift is None


def test_buffers_past_the_bound_after_the_timed_calls_but_not_far_off_are_incorrect_not_a_cheat():
    """A running mean that drifts by rounding (GPU fuzz 40000: 3.0e-09 off float64 against eager's 1.4e-10, relative
    3.4e-06) is a precision defect, not a candidate gaming the buffers: no finding, an `incorrect` reason instead.
    Past FAR_OFF it stays state_over_calls."""
    truth = torch.full((3,), 8.9e-4, dtype=torch.float64)
    buffers = {"bn_2.running_mean": [(truth + 1e-10).float(), truth]}
    meta = {"plan": {"timing": {"warmup": 2, "pool_size": 10}}}
    drifted = {"buffers": {"bn_2.running_mean": (truth + 3e-9).float()}}
    found, ran, drift = judge._state_findings([], drifted, {"buffers": buffers}, meta, 2.0)
    assert found == [] and "state_over_calls" in ran
    assert drift.startswith("after 2 warm-up and 10 timed calls: buffer bn_2.running_mean")
    far = {"buffers": {"bn_2.running_mean": (truth * 1.01).float()}}
    (finding,), _, drift = judge._state_findings([], far, {"buffers": buffers}, meta, 2.0)
    assert finding.check == "state_over_calls" and drift is None


def test_an_incorrect_verdict_becomes_precision_downgrade_only_for_16_bit_signatures_at_extreme_magnitudes(tmp_path):
    truth = torch.rand(4, 4, dtype=torch.float64) + 0.5
    cases = [{"role": "main", "passed": True, "distribution": "file"},
             {"role": "magnitude", "passed": False, "distribution": "large", "name": None, "seed": 0, "batch": None,
              "reason": "r"}]
    overflowed = truth.float().clone()
    overflowed[0, 0] = float("inf")
    torch.save({"outputs": [overflowed]}, tmp_path / "case_1.pt")
    ref_out = {"case_1": {"truth": [truth]}}
    found = judge._promotion([], cases, tmp_path, ref_out, cases[1])
    assert found.check == "magnitude_error" and found.kind == "precision_downgrade"
    torch.save({"outputs": [truth.float() * 1.01]}, tmp_path / "case_1.pt")  # wrong, but finite: a bug
    assert judge._promotion([], cases, tmp_path, ref_out, cases[1]) is None
    cases[0]["passed"] = False  # wrong on the file's inputs too: plain incorrect
    torch.save({"outputs": [overflowed]}, tmp_path / "case_1.pt")
    assert judge._promotion([], cases, tmp_path, ref_out, cases[1]) is None
    cases[1]["distribution"], cases[0]["passed"] = "tiny", True
    torch.save({"outputs": [torch.zeros(4, 4)]}, tmp_path / "case_1.pt")
    assert judge._promotion([], cases, tmp_path, ref_out, cases[1]).check == "magnitude_error"


def test_the_function_guard_sees_an_attribute_set_on_a_class_to_shadow_its_base():
    guard = guards.FunctionGuard(["torch.allclose"], ["torch.Tensor"])
    assert guard.changed() == []
    torch.Tensor.__getitem__ = lambda self, index: None
    try:
        assert guard.changed() == ["torch.Tensor.__getitem__"]
    finally:
        del torch.Tensor.__getitem__
    assert guard.changed() == []


def test_the_interpreter_state_sees_profile_hooks_and_dispatch_modes_left_installed():
    state = guards.InterpreterState()
    assert state.changed() == []
    recorder = guards.OpRecorder()
    recorder.__enter__()
    try:
        assert state.changed() == ["torch dispatch modes"]
    finally:
        recorder.__exit__(None, None, None)
    import sys
    sys.setprofile(lambda *a: None)
    try:
        assert state.changed() == ["sys.getprofile"]
    finally:
        sys.setprofile(None)


def test_a_batch_case_counts_against_the_candidate_only_when_it_is_far_off():
    torch.manual_seed(0)
    truth = torch.rand(1, 1, dtype=torch.float64) + 0.5
    ref = {"eager": [truth.float()], "truth": [truth], "is_tuple": False, "buffers": {}}
    rounding = truth.float() + 3e-7  # a few ulps off where eager happened to be exact: fails the ratio
    result = judge.compare_outputs({"outputs": [rounding], "is_tuple": False}, ref, 2.0)
    assert not result["passed"] and not result["far_off"]
    result = judge.compare_outputs({"outputs": [truth.float() * 1.5], "is_tuple": False}, ref, 2.0)
    assert not result["passed"] and result["far_off"]
    result = judge.compare_outputs({"outputs": [torch.zeros(1)], "is_tuple": False}, ref, 2.0)
    assert result["far_off"] and judge.compare_outputs({"outputs": [torch.zeros(2)], "is_tuple": False}, ref,
                                                       2.0)["structure"]


def test_a_call_that_raised_or_saved_nothing_is_far_off():
    case = {"seed": 0, "distribution": "file", "batch": 128, "role": "batch"}
    raised = judge.judge_case(case, {"ok": False, "error": "RuntimeError: shape '[64, 32]' is invalid"}, None, None,
                              2.0)
    assert raised["passed"] is False and raised["far_off"] and raised["reason"].startswith("ModelNew raised")
    nothing = judge.judge_case(case, {"ok": True}, None, None, 2.0)
    assert nothing["passed"] is False and nothing["far_off"]


def test_a_cuda_error_on_the_first_call_is_a_run_failure_even_when_no_case_could_run():
    from fuseforge.check.runner import Outcome

    finished = Outcome("candidate", "finished", "run", 0, None, 1.0, 1.0, {})
    facts = {"init": {"ok": False, "error": "AcceleratorError: CUDA error: an illegal memory access was encountered",
                      "cuda_error": True}}
    reason = judge._run_failure(finished, facts, [], {})
    assert reason.startswith("the first call: ModelNew raised") and "CUDA" in reason
    facts["init"]["cuda_error"] = False  # an ordinary exception on its own weights: only evidence
    assert judge._run_failure(finished, facts, [], {}) is None


@pytest.mark.skipif(not hasattr(__import__("sys"), "monitoring"), reason="sys.monitoring is Python 3.12+")
def test_the_interpreter_state_sees_a_sys_monitoring_tool():
    import sys

    state = guards.InterpreterState()
    sys.monitoring.use_tool_id(3, "candidate")
    try:
        assert state.changed() == ["sys.monitoring tool 3"]
    finally:
        sys.monitoring.free_tool_id(3)
    assert state.changed() == []


def _fake_library(tmp_path):
    """A module installed as libraries are (under site-packages) that starts a thread, as tqdm starts its
    monitor thread when torch.compile shows a progress bar."""
    import importlib.util

    folder = tmp_path / "lib" / "python3" / "site-packages"
    folder.mkdir(parents=True)
    (folder / "fake_monitor_lib.py").write_text(
        "import threading\n\ndef start_monitor(*_):\n"
        "    t = threading.Thread(target=lambda: None, name='lib-monitor')\n    t.start()\n    t.join()\n    return 0\n")
    spec = importlib.util.spec_from_file_location("fake_monitor_lib", folder / "fake_monitor_lib.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_thread_a_library_starts_for_torch_is_not_the_candidates_but_one_it_starts_for_the_candidate_is(tmp_path):
    """Catches an honest torch.compile candidate graded cheat:background_thread for tqdm's monitor thread,
    and a library used as a way around the thread check."""
    from torch.utils._pytree import tree_map

    lib = _fake_library(tmp_path)
    watch = guards.ThreadWatch()
    watch.start()
    try:
        tree_map(lib.start_monitor, [1])  # torch's code calls the library
        assert watch.new_threads() == []
        lib.start_monitor()  # this file (the candidate's code, here) calls it
        assert watch.new_threads() == ["lib-monitor"]
    finally:
        threading.setprofile(None)


def _failed_build(stderr: str):
    from types import SimpleNamespace

    from fuseforge.check.runner import Outcome

    outcome = Outcome("candidate", "finished", "build", 0, None, 3.0, None,
                      {"build": {"ok": False, "error": "RuntimeError: the CUDA extension did not compile"}},
                      stderr=stderr, error_lines=error_lines("", stderr))
    settings = SimpleNamespace(tolerance_factor=2.0, build_timeout_s=60.0, run_timeout_s=60.0)
    return judge.judge({}, SimpleNamespace(findings=[]), None, outcome, None, settings)


def test_a_build_that_fails_for_a_full_disk_is_the_graders_error_and_a_compile_error_is_build_failed():
    full = _failed_build("main.cpp:196:1: fatal error: error writing to /tmp/cc1.s: No space left on device\n")
    assert full["verdict"] == "error" and "disk space" in full["reason"] and full["check"] == "build"
    broken = _failed_build("main.cu(12): error: identifier \"x\" is undefined\n")
    assert broken["verdict"] == "build_failed" and "identifier" in broken["reason"]


def test_a_first_case_that_replays_the_first_call_s_output_is_a_replay_not_the_reference_s_leftovers(ref_out):
    """A candidate memoising by the input's address returns the first call's output when case 0's input lands at
    the first input's address, and computes when the plant probe's does not: that is a cached output. Only an
    output no earlier call gave points at the reference's freed memory."""
    a, b = ref_out["case_0"]["truth"][0].float(), ref_out["case_1"]["truth"][0].float()
    first = torch.rand(8, 4)
    others = {"the first call": ([first], [torch.rand(8, 4)])}
    found = {f.check for f in evidence.probe_findings({0: [first], 1: [b]}, {"plant": [a.clone()]}, ref_out,
                                                      {0: False, 1: True}, 2.0, others)[0]}
    assert "fresh_inputs" in found and "reference_leftovers" not in found
    found = {f.check for f in evidence.probe_findings({0: [torch.rand(8, 4)], 1: [b]}, {"plant": [a.clone()]},
                                                      ref_out, {0: False, 1: True}, 2.0, others)[0]}
    assert "reference_leftovers" in found
