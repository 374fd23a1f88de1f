"""The bench's deviation of torch.compile from eager: what it measures, and when it cannot say anything."""

import torch

from fuseforge.evaluate.bench import _deviations


def _eager():
    torch.manual_seed(0)
    x = torch.randn(64, 32)
    return lambda: (torch.tanh(x), x.sum(1))


def test_a_compiled_variant_off_by_one_part_in_a_thousand_deviates_by_that_and_eager_repeats_exactly():
    eager = _eager()
    calls = {"compile": lambda: tuple(t * (1 + 1e-3) for t in eager()), "candidate": eager}
    records = {"compile": {"status": "ok"}, "candidate": {"status": "ok"}}
    _deviations(calls, records, eager)
    assert abs(records["compile"]["deviation_from_eager"] - 1e-3) < 1e-6
    assert records["compile"]["eager_repeat_deviation"] == 0.0
    assert "deviation_from_eager" not in records["candidate"]  # only torch.compile's variants


def test_a_model_drawing_random_numbers_in_forward_is_compared_from_the_same_seed_and_a_random_eager_shows():
    x = torch.ones(1000)

    def seeded():  # the same mask from the same seed
        return torch.nn.functional.dropout(x, 0.5)

    calls, records = {"compile": seeded}, {"compile": {}}
    _deviations(calls, records, seeded)
    assert records["compile"]["deviation_from_eager"] == 0.0

    state = {"n": 0}

    def drifting():  # another value on every call, whatever the seed: a random eager
        state["n"] += 1
        return x * state["n"]

    _deviations(calls, records, drifting)
    assert records["compile"]["eager_repeat_deviation"] > 0.1


def test_outputs_that_do_not_pair_up_or_are_all_zero_give_no_deviation():
    calls = {"compile": lambda: torch.zeros(3, 2), "compile_max_autotune": lambda: torch.ones(4)}
    records = {"compile": {}, "compile_max_autotune": {}}
    _deviations(calls, records, lambda: torch.zeros(3, 2))
    assert records["compile"]["deviation_from_eager"] is None
    _deviations(calls, records, lambda: torch.ones(3))
    assert records["compile_max_autotune"]["deviation_from_eager"] is None


def test_the_report_says_when_torch_compile_runs_in_a_lower_precision_class_than_eager():
    from fuseforge.report_measured import compile_precision

    tf32 = {"compile": {"deviation_from_eager": 1.2e-3, "eager_repeat_deviation": 0.0}}
    [line] = compile_precision(tf32, 2e-7)
    assert "compile is less precise than eager" in line and "1.2e-03" in line and "2.0e-07" in line
    assert compile_precision(tf32, 3e-4) == []  # eager is TF32-class too: the same class
    random = {"compile": {"deviation_from_eager": 0.5, "eager_repeat_deviation": 0.4}}
    assert compile_precision(random, 2e-7) == []  # eager differs from itself: the deviation says nothing
    assert compile_precision({"compile": {"status": "skipped"}}, 2e-7) == []
