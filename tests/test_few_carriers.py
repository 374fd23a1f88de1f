"""Few carriers: where one or two elements carry eager's whole error, one draw does not decide a failure of the bound;
the case is judged again over more draws, and most must pass (numerics.py, verify.py)."""

import textwrap

import pytest
import torch

from fuseforge.evaluate import harness
from fuseforge.evaluate.numerics import REDRAWS, TensorCheck, compare, few_carriers, majority_of_draws


def test_the_carriers_count_the_elements_that_hold_eagers_error():
    truth = torch.arange(1000, dtype=torch.float64)  # integers: float32 holds them exactly, eager's error is ours
    one = truth.float()
    one[7] += 0.5
    assert compare("o", one, one, truth).ref_carriers == pytest.approx(1.0)
    ten = truth.float()
    ten[:10] += 0.5
    assert compare("o", ten, ten, truth).ref_carriers == pytest.approx(10.0)
    assert compare("o", truth.float(), truth.float(), truth).ref_carriers is None  # no error, no carriers


def test_a_bound_failure_with_few_carriers_is_told_apart_from_one_with_many_and_from_a_nan():
    truth = torch.arange(1000, dtype=torch.float64)
    eager = truth.float()
    eager[3] += 0.5
    worse = eager.clone()
    worse[3] += 2.0
    assert few_carriers(compare("o", worse, eager, truth))
    spread_eager = truth.float() + 0.25 * (torch.arange(1000) % 2)
    assert not few_carriers(compare("o", spread_eager * 1.001, spread_eager, truth))  # 500 carriers
    nan = eager.clone()
    nan[0] = float("nan")
    assert not few_carriers(compare("o", nan, eager, truth))


def test_a_bound_failure_whose_own_error_sits_on_few_elements_is_one_too_where_eagers_is_spread():
    truth = torch.arange(1000, dtype=torch.float64)
    eager = truth.float() + 0.25 * (torch.arange(1000) % 2)  # eager's error on 500 elements
    one_off = truth.float()
    one_off[5] += 20.0  # the candidate's on one: 20 / sqrt(1000) > 2 x eager's 0.177
    check = compare("o", one_off, eager, truth)
    assert check.ref_carriers == pytest.approx(500.0) and check.cand_carriers == pytest.approx(1.0)
    assert few_carriers(check)
    spread = truth.float() + 0.5 * (torch.arange(1000) % 2)  # 2x eager's error, on the same 500 elements
    spread[0] += 3.0
    assert not few_carriers(compare("o", spread, eager, truth))
    exact = truth.float()  # eager exact: the bound is the floor, one draw decides whatever the candidate's carriers
    assert compare("o", one_off, exact, truth).cand_carriers == pytest.approx(1.0)
    assert not few_carriers(compare("o", one_off, exact, truth))


def _failing(ratio: float) -> TensorCheck:
    check = TensorCheck("output", [2], "float32", cand_err=ratio * 1e-6, bound=1e-6, ref_carriers=1.2)
    check.reason = f"output: error vs fp64 {ratio * 1e-6:.3e} > bound 1.000e-06 (...)"
    return check


def test_a_majority_of_draws_decides_and_a_draw_far_past_its_bound_fails_the_case():
    first = [_failing(3.0)]
    assert majority_of_draws([first] + [[]] * 5 + [[_failing(2.0)]] * 3)[0]  # 6 of 9 pass
    assert not majority_of_draws([first] + [[]] * 3 + [[_failing(2.0)]] * 5)[0]  # 4 of 9
    assert not majority_of_draws([[_failing(5000.0)]] + [[]] * 8)[0]  # a wrong value, not a rounding
    ok, account = majority_of_draws([first] + [[]] * 8)
    assert ok and account.startswith("8 of 9 draws within the bound")


MODEL = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return x.sum(dim=1)  # two values: eager's error is on one or two elements


    def get_inputs():
        return [torch.randn(2, 1000) + 1.0]


    def get_init_inputs():
        return []
''')


def _candidate(tmp_path, name: str, when: str, by: float):
    path = tmp_path / f"{name}.py"
    path.write_text(MODEL + textwrap.dedent(f'''
        class ModelNew(Model):
            def forward(self, x):
                y = super().forward(x)
                if {when}:
                    y = y + torch.tensor([{by}, 0.0], device=y.device)
                return y
    '''))
    return path


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_verifier_judges_a_few_carrier_failure_over_draws(tmp_path, device):
    from fuseforge.evaluate.verify import VerifySettings, verify_files

    model = tmp_path / "model.py"
    model.write_text(MODEL)
    settings = VerifySettings(device=torch.device(device), seeds=1, magnitudes=False)
    first = harness.draw_inputs(harness.load_reference(model), 0, "file", None, torch.device(device))[0][0, 0].item()
    once = f"x[0, 0].item() == {first!r}"  # off on the first case's draw alone
    record, _ = verify_files(model, _candidate(tmp_path, "once", once, 1e-3), settings)
    assert record["verdict"] == "correct", record.get("reason")
    judged = record["cases"][0]
    assert judged["outputs"][0]["passed"] is False and judged["outputs"][0]["ref_carriers"] < 2.01
    assert judged["redraws"].startswith(f"{REDRAWS} of {REDRAWS + 1} draws within the bound")
    record, _ = verify_files(model, _candidate(tmp_path, "always", "True", 1e-3), settings)
    assert record["verdict"] == "incorrect" and f"0 of {REDRAWS + 1} draws" in record["reason"]
    record, _ = verify_files(model, _candidate(tmp_path, "wrong", once, 10.0), settings)  # far past the bound
    assert record["verdict"] == "incorrect" and "failed otherwise" in record["reason"]


def _case(role: str, passed: bool | None, ratio: float | None = None, of: int | None = None) -> dict:
    """A judged case's record, failing on one output at `ratio` x its bound where `ratio` is given."""
    outputs = [] if ratio is None else [_failing(ratio).to_json() | {"passed": False}]
    return {"role": role, "of": of, "passed": passed, "reason": outputs[0]["reason"] if outputs else None,
            "outputs": outputs, "buffers": [], "redraws": None, "seed": 0, "distribution": "file", "batch": None}


def test_the_judge_decides_a_few_carrier_case_by_the_majority_of_its_redraws_and_leaves_the_rest_alone():
    from fuseforge.check.judge import judge_over_draws

    cases = [_case("main", False, 3.0), _case("main", False, 3.0), _case("magnitude", False, 3.0)]
    cases += [_case("redraw", True, of=0)] * 6 + [_case("redraw", False, 2.0, of=0)] * 2  # 6 of 9 pass
    cases += [_case("redraw", True, of=2)] * 3 + [_case("redraw", False, 2.0, of=2)] * 5  # 3 of 9 pass
    judge_over_draws(cases)
    assert cases[0]["passed"] and cases[0]["reason"] is None and cases[0]["redraws"].startswith("6 of 9")
    assert cases[1]["passed"] is False and cases[1]["redraws"] is None  # no redraws: one draw decides, as before
    assert cases[2]["passed"] is False and cases[2]["reason"].endswith("on the first)")
    derived = _case("magnitude", False, 3.0)  # two outputs: eager's error on few elements of the second, the
    spread_out = _failing(2.5)  # candidate's on few of the first
    spread_out.ref_carriers, spread_out.cand_carriers = 26.5, 1.5
    derived["outputs"].insert(0, spread_out.to_json() | {"passed": False})
    cases = [derived] + [_case("redraw", True, of=0)] * 7 + [_case("redraw", False, 2.0, of=0)]
    judge_over_draws(cases)
    assert cases[0]["passed"] and cases[0]["redraws"].startswith("7 of 9")
    many = _case("main", False, 3.0)
    many["outputs"][0]["ref_carriers"] = many["outputs"][0]["cand_carriers"] = 400.0
    cases = [many] + [_case("redraw", True, of=0)] * 8
    judge_over_draws(cases)
    assert cases[0]["passed"] is False and cases[0]["redraws"] is None  # many carriers on both sides: one draw
    crashed = [_case("main", False, 3.0)] + [_case("redraw", True, of=0)] * 7
    crashed += [_case("redraw", False, of=0) | {"reason": "ModelNew raised RuntimeError: boom"}]
    judge_over_draws(crashed)
    assert crashed[0]["passed"] is False and "ModelNew raised" in crashed[0]["reason"]


def test_the_calls_of_the_sequence_are_draws_of_one_another_for_a_few_carrier_failure():
    from fuseforge.check.judge import judge_calls_over_draws

    calls = [_case("sequence", True)] * 3 + [_case("sequence", False, 2.6)] + [_case("sequence", True)] * 3
    judge_calls_over_draws(calls)
    assert calls[3]["passed"] and calls[3]["redraws"].startswith("6 of 7")
    most = [_case("sequence", True)] * 3 + [_case("sequence", False, 2.6) for _ in range(4)]
    judge_calls_over_draws(most)
    assert all(c["passed"] is False and c["reason"].endswith("on the first)") for c in most[3:])
    far = [_case("sequence", True)] * 6 + [_case("sequence", False, 5000.0)]  # a stale weight, not a rounding
    judge_calls_over_draws(far)
    assert far[6]["passed"] is False and "failed otherwise" in far[6]["reason"]
    many = [_case("sequence", True)] * 6 + [_case("sequence", False, 2.6)]
    many[6]["outputs"][0]["ref_carriers"] = many[6]["outputs"][0]["cand_carriers"] = 400.0
    judge_calls_over_draws(many)
    assert many[6]["passed"] is False and many[6]["redraws"] is None


CHECK_SETTINGS = dict(seeds=1, trials=2, warmup=1, build_timeout_s=120, run_timeout_s=120)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_check_redraws_a_few_carrier_case_and_fails_a_candidate_off_on_every_draw(tmp_path, device):
    from fuseforge.check.orchestrate import CheckSettings, check_files

    model = tmp_path / "model.py"
    model.write_text(MODEL)
    cache: dict = {}
    settings = CheckSettings(device=device, **CHECK_SETTINGS)
    honest = check_files(model, _candidate(tmp_path, "same", "False", 0.0), settings, cache)
    assert honest["verdict"] == "correct", honest["reason"]
    redraws = [c for c in honest["cases"] if c["role"] == "redraw"]
    assert redraws and all(c["passed"] for c in redraws)  # every file-shaped case has two values: few carriers
    assert {c["of"] for c in redraws} >= {0, 1}
    off = check_files(model, _candidate(tmp_path, "always", "True", 1e-3), settings, cache)
    assert off["verdict"] == "incorrect" and f"0 of {REDRAWS + 1} draws" in off["reason"], off["reason"]


def test_check_adds_redraws_to_few_carrier_cases_within_its_budgets_of_time_and_input_bytes(tmp_path):
    from fuseforge.check.orchestrate import CheckSettings, run_reference
    from fuseforge.check.reference_role import redrawn

    model = tmp_path / "model.py"
    model.write_text(MODEL)
    plan = run_reference(model, CheckSettings(device="cpu", **CHECK_SETTINGS), tmp_path / "ref").meta["plan"]
    assert [c["role"] for c in plan["cases"]].count("redraw") == 5 * REDRAWS  # 8 KB and milliseconds a draw
    few = {0: (0.5, 10**6), 1: (0.1, 10**8), 2: (4.0, 10**3)}  # index -> (seconds, input bytes) of the call
    assert redrawn(few, seconds=30.0, nbytes=10**9) == [0, 1]  # 2: 32 s of redraws
    assert redrawn(few, seconds=40.0, nbytes=10**8) == [0, 2]  # 1: 800 MB of inputs
    assert redrawn(few, seconds=1.0, nbytes=10**9) == [1]  # the quickest first
    assert redrawn(few, seconds=0.5, nbytes=10**9) == []
