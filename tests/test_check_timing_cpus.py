"""In a suite, `check` times the candidate and eager on the CPU the suite keeps for timed calls
(FUSEFORGE_TIMING_CPUS), as the optimize benchmark does: a host-bound forward must not be slowed by a neighbour's
compile on its CPU. The grading process hands the CPUs to its workers in their job (their environment has no
fuseforge variables); elsewhere nothing is pinned."""

import os

import pytest
import torch
from test_check_isolation import HEADER, MODEL, SETTINGS, _honest

from fuseforge.check.orchestrate import check_files
from fuseforge.check.reference_role import _time_variant
from fuseforge.check.timing import Timer

CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to tell a pinned call apart")

# the candidate says on stderr which CPUs it may run on, whenever that changes
PRINTS_AFFINITY = "import os, sys\nSEEN = []\n" + _honest(
    prologue="now = sorted(os.sched_getaffinity(0))\n"
             "        if not SEEN or SEEN[-1] != now:\n"
             "            SEEN.append(now)\n"
             "            print('affinity', now, file=sys.stderr, flush=True)")


def _affinities(stderr: str) -> list[list[int]]:
    return [eval(line.split(" ", 1)[1]) for line in stderr.splitlines() if line.startswith("affinity ")]


@needs_two_cpus
def test_the_candidates_timed_calls_run_on_the_suites_timing_cpu_and_its_other_calls_do_not(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEFORGE_TIMING_CPUS", str(CPUS[-1]))
    path = tmp_path / "candidate.py"
    path.write_text(HEADER + PRINTS_AFFINITY)
    record = check_files(MODEL, path, SETTINGS)
    assert record["verdict"] == "correct", record["reason"]
    seen = _affinities(record["run"]["stderr_tail"])
    assert seen[0] == CPUS  # its first calls: anywhere
    assert [CPUS[-1]] in seen  # the timed ones: on the kept CPU
    assert seen[-1] == CPUS  # and after them anywhere again


def test_without_a_suite_the_candidate_is_not_pinned(tmp_path, monkeypatch):
    monkeypatch.delenv("FUSEFORGE_TIMING_CPUS", raising=False)
    path = tmp_path / "candidate.py"
    path.write_text(HEADER + PRINTS_AFFINITY)
    record = check_files(MODEL, path, SETTINGS)
    assert record["verdict"] == "correct", record["reason"]
    assert _affinities(record["run"]["stderr_tail"]) == [CPUS]


@needs_two_cpus
def test_eager_is_timed_on_the_timing_cpu_after_its_warm_up_calls():
    seen = []

    def model(x):
        seen.append(sorted(os.sched_getaffinity(0)))
        return x + 1

    feed = {"inputs_0": [torch.ones(3)], "pool_0": [torch.ones(3)], "pool_1": [torch.ones(3)]}
    job = {"warmup": 2, "pool_size": 2, "timing_cpus": [CPUS[-1]]}
    timing = _time_variant(model, feed, job, Timer.create(torch.device("cpu")), torch.device("cpu"))
    assert timing["status"] == "ok" and timing["trials"] == 2
    assert seen == [CPUS, CPUS, [CPUS[-1]], [CPUS[-1]]]
    assert sorted(os.sched_getaffinity(0)) == CPUS  # given back
