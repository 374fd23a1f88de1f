"""The reference's outputs kept one file per call, whole within a budget and at secret positions beyond it
(stored_outputs.py): a model with gigabyte outputs is checked without holding every call's outputs in memory."""

import shutil
from pathlib import Path

import pytest
import torch

from fuseforge.check.orchestrate import CheckSettings, check_files
from fuseforge.check.stored_outputs import OutputWriter, StoredOutputs, draw_positions, on_positions

MODEL = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 640)

    def forward(self, x):
        return torch.sigmoid(self.linear(x))

def get_inputs():
    return [torch.rand(2048, 64)]

def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 640)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = torch.sigmoid(self.linear(x))
        if self.calls > WRONG_AFTER:
            y[:64] = 0.5
        return y
"""


def _entry(n: int) -> dict:
    x = torch.rand(n)
    return {"eager": [x], "truth": [x.double()], "is_tuple": False, "buffers": {}, "changed": []}


def test_case_0_stays_whole_and_calls_beyond_the_budget_are_kept_at_distinct_secret_positions(tmp_path):
    """Catches a budget that spends case 0's share before case 0 comes (the probes need it whole), a sampled entry
    without the positions the candidate is handed, and repeated positions."""
    size = 1000 * 12  # float32 eager + float64 truth per element
    writer = OutputWriter(tmp_path / "out", int(2.5 * size), torch.Generator().manual_seed(1), count=100)
    assert writer.put("init", _entry(1000)) is None  # 1 kept + case 0's 1 held back <= 2.5
    assert writer.put("case_1", _entry(1000)) is not None  # 1 + 1 + 1 held > 2.5
    assert writer.put("case_0", _entry(1000)) is None  # always whole
    (positions,) = writer.put("case_2", _entry(1000))
    assert writer.sampled == ["case_1", "case_2"]
    assert positions.numel() == 100 == positions.unique().numel() and int(positions.max()) < 1000
    stored = StoredOutputs(tmp_path / "out")
    assert set(stored) == {"init", "case_0", "case_1", "case_2"}
    assert stored["case_0"]["eager"][0].shape == (1000,) and "positions" not in stored["case_0"]
    entry = stored["case_2"]
    assert entry["shapes"] == [[1000]] and torch.equal(entry["positions"][0], positions)
    whole = torch.arange(1000.0)
    assert torch.equal(on_positions([whole], entry)[0], whole[positions])
    assert on_positions([whole], stored["case_0"])[0] is whole


def test_stored_outputs_stay_readable_after_their_folder_is_deleted_and_case_0_is_read_once(tmp_path):
    """Catches a lookup that reopens the files by name (the grader deletes the folder before judging) and case 0's
    gigabytes read again from the disk each time another entry was looked up in between."""
    writer = OutputWriter(tmp_path / "out", 10**9, torch.Generator().manual_seed(1))
    entries = {name: _entry(1000) for name in ("case_0", "case_1", "init")}
    for name, entry in entries.items():
        writer.put(name, entry)
    stored = StoredOutputs(tmp_path / "out")
    shutil.rmtree(tmp_path / "out")
    first = stored["case_0"]
    assert torch.equal(stored["case_1"]["eager"][0], entries["case_1"]["eager"][0])
    assert stored["init"]["truth"][0].dtype == torch.float64
    assert stored["case_0"] is first and stored["case_1"] is not stored["init"]


def test_positions_of_a_huge_output_are_drawn_without_a_permutation_of_all_of_it():
    gen = torch.Generator().manual_seed(0)
    positions = draw_positions(3 * 10**9, 1 << 20, gen)  # a permutation would take 24 GB
    assert positions.numel() == 1 << 20 == positions.unique().numel() and int(positions.max()) < 3 * 10**9
    assert draw_positions(10, 100, gen) is None


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sampled") / "wide_sigmoid.py"
    path.write_text(MODEL)
    return path


def _candidate(tmp_path: Path, wrong_after: int) -> Path:
    path = tmp_path / f"wrong_after_{wrong_after}.py"
    path.write_text(CANDIDATE.replace("WRONG_AFTER", str(wrong_after)))
    return path


SETTINGS = CheckSettings(device="cpu", seeds=1, trials=2, warmup=1, whole_budget_bytes=1)


def test_calls_beyond_the_budget_are_compared_at_their_positions_and_an_honest_candidate_passes(model_file, tmp_path):
    record = check_files(model_file, _candidate(tmp_path, 10**6), SETTINGS)
    assert record["verdict"] == "correct", record["reason"]
    compared = {c["compared"] for c in record["cases"] if not c["skipped"]}
    assert "whole" in compared and f"at {1 << 20} sampled positions per output" in compared


def test_a_block_of_wrong_rows_on_a_sampled_call_is_found(model_file, tmp_path):
    """Right on the first call and case 0, 64 of 2048 rows wrong on every later call (3 % of the output): the
    later calls are compared at a million of the 1.3 million positions only. (The verdict is the stale-memory
    probe's, which calls case 0's inputs again; the cases' records show the sampled comparisons failing.)"""
    record = check_files(model_file, _candidate(tmp_path, 2), SETTINGS)
    assert record["verdict"] != "correct"
    wrong = [c for c in record["cases"] if c["passed"] is False]
    assert len(wrong) == len([c for c in record["cases"] if not c["skipped"]]) - 1
    at_file_batch = [c for c in wrong if c["batch"] is None]  # (a batch of 1 is small: compared whole)
    assert at_file_batch and all(c["compared"] == f"at {1 << 20} sampled positions per output" for c in at_file_batch)
    assert all(e["index"][0] < 64 for e in at_file_batch[0]["worst_elements"])  # where it is wrong, in the output's shape


def test_the_candidate_s_earlier_outputs_are_kept_alive_within_a_budget_and_the_latest_two_always(monkeypatch):
    """Catches a worker that keeps every call's outputs on the device (17 calls of 3 GB outputs filled most of an 80 GB
    GPU) and a bound that drops the previous call's outputs, which the aliasing check compares the next ones with."""
    import contextlib
    import types

    from fuseforge.check import candidate_role

    monkeypatch.setattr(candidate_role, "KEPT_BUDGET", 3 * 4096)
    run = object.__new__(candidate_role.CandidateRun)
    run.dev, run.kept = torch.device("cpu"), []
    run.result = {"hooks": [], "flags_during": [], "aliased": []}
    run.audit = types.SimpleNamespace(candidate=contextlib.nullcontext)
    shared = torch.zeros(1024)  # 4096 bytes, returned by the last call again
    outputs = [torch.zeros(1024) for _ in range(5)] + [shared, shared]
    model = torch.nn.Module()
    model.forward = lambda x: outputs.pop(0)
    for k in range(7):
        run.call(model, [torch.zeros(1)], f"call {k}")
    assert [label for label, _ in run.kept] == ["call 4", "call 5", "call 6"]
    assert run.result["aliased"] == ["call 6 output 0 shares memory with call 5's output"]


def test_each_probe_s_outputs_leave_the_disk_once_the_worker_has_moved_on(tmp_path):
    """Catches a collector that reads a probe's file before the worker's next event (it may still be being written),
    one that reads a path named by a forged event, and one that loses a probe the judge needs."""
    from fuseforge.check.orchestrate import ProbeCollector

    collector = ProbeCollector(tmp_path)
    collector.on_event({"event": "probe", "name": "stale_sentinel"})
    torch.save({"outputs": [torch.ones(3)]}, tmp_path / "probe_stale_sentinel.pt")
    collector.on_event({"event": "probe", "name": "stale_sentinel"})  # the same event again: not moved on
    assert collector.taken == {} and (tmp_path / "probe_stale_sentinel.pt").exists()
    collector.on_event({"event": "probe", "name": "../escape"})  # moved on: the first is taken; this name is not one
    assert not (tmp_path / "probe_stale_sentinel.pt").exists()
    assert torch.equal(collector.taken["probe_stale_sentinel.pt"]["outputs"][0], torch.ones(3))
    assert collector.pending is None
    collector.on_event({"event": "probe", "name": "plant"})
    collector.on_event({"event": "done"})  # the worker never wrote it: left for the judge to find missing
    assert set(collector.taken) == {"probe_stale_sentinel.pt"}
