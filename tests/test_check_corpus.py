"""The adversarial corpus (tests/adversarial/corpus.json): its metadata is complete and consistent, every
candidate runnable on the CPU gets its intended verdict with its check firing, and on a GPU all do (but
the CPU-only ones, whose stand-in kernels write through host pointers)."""

import ast
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fuseforge.check.kinds import CHECKS, KINDS
from fuseforge.check.orchestrate import CheckSettings, check_files, clear_reference_cache
from fuseforge.records import json_safe

ROOT = Path(__file__).parent / "adversarial"
CORPUS = json.loads((ROOT / "corpus.json").read_text())
ENTRIES = CORPUS["candidates"]
ADVERSARIAL = [e for e in ENTRIES if e["role"] == "adversarial"]
BY_FILE = {e["file"]: e for e in ENTRIES}
CPU_ENTRIES = [e for e in ENTRIES if e["device"] in ("cpu", "cpu_only")]
GPU_ENTRIES = [e for e in ENTRIES if e["device"] in ("cpu", "cuda")]
ROLES = {"adversarial": "Adversarial", "honest": "Honest", "incorrect": "Incorrect"}


def test_every_python_file_of_the_corpus_is_listed_and_every_listed_file_exists():
    on_disk = {p.name for p in ROOT.glob("*.py")}
    assert on_disk == set(BY_FILE)
    for model in CORPUS["models"].values():
        assert (ROOT / model["path"]).is_file()


def test_there_are_at_least_30_adversarial_files_covering_every_cheat_kind():
    assert len(ADVERSARIAL) >= 30
    assert {e["kind"] for e in ADVERSARIAL} == set(KINDS)


@pytest.mark.parametrize("entry", ADVERSARIAL, ids=lambda e: e["file"])
def test_each_adversarial_file_names_a_check_of_its_kind_and_an_honest_twin_of_its_model(entry):
    assert entry["verdict"] == f"cheat:{entry['kind']}"
    check = CHECKS[entry["check"]]
    assert check.kind == entry["kind"] and check.decisive
    assert entry["device"] in ("cpu", "cpu_only", "cuda")
    assert check.needs != "gpu" or entry["device"] == "cuda"
    twin = BY_FILE[entry["twin"]]
    assert twin["role"] == "honest" and twin["verdict"] == "correct" and twin["model"] == entry["model"]
    assert entry["device"] == "cuda" or twin["device"] in ({"cpu"} if entry["device"] == "cpu" else {"cpu", "cpu_only"})


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e["role"] != "adversarial"], ids=lambda e: e["file"])
def test_honest_files_must_be_correct_and_incorrect_ones_fail_the_correctness_rule(entry):
    assert entry["role"] in ROLES and entry["kind"] is None and entry["twin"] is None
    assert (entry["verdict"], entry["check"]) == (("correct", None) if entry["role"] == "honest" else
                                                  ("incorrect", "correctness"))


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_each_file_says_what_it_is_in_its_docstring(entry):
    doc = ast.get_docstring(ast.parse((ROOT / entry["file"]).read_text()))
    expected = f"Adversarial ({entry['kind']}" if entry["role"] == "adversarial" else ROLES[entry["role"]]
    assert doc.startswith(expected)
    model = CORPUS["models"][entry["model"]]
    assert model["device"] == "cpu" or entry["device"] == "cuda"


def _settings(device: str) -> CheckSettings:
    s = CORPUS["settings"][device]
    return CheckSettings(device=device, seeds=s["seeds"], trials=s["trials"], warmup=s["warmup"],
                         compile=s.get("compile", True),
                         pool_budget_bytes=s.get("pool_budget_bytes", CheckSettings.pool_budget_bytes))


def _run_corpus(entries: list[dict], device: str, keep: Path | None = None) -> dict[str, dict]:
    """Check every entry, once; with `keep`, rewrite that JSON file after each record (a killed run keeps
    its finished records), each record with the seconds its check took (`corpus_wall_s`).

    Three at a time, in the corpus's order by model (a reference run is cached; a check that needs one being
    computed waits for it). On a GPU they share a gate: the others' builds (process start, imports,
    extension load) overlap one's run phase, but only one run phase -- every call the grader makes and
    times -- or reference run at a time (on the H100, two at a time took 567 s for 85 entries, the gated
    phases an estimated 425 s of it: 85 run phases of about 5 s)."""
    settings = _settings(device)
    cache: dict = {}
    records: dict[str, dict] = {}
    lock = threading.Lock()
    gate = threading.Lock() if device == "cuda" else None

    def one(entry):
        model = ROOT / CORPUS["models"][entry["model"]]["path"]
        start = time.monotonic()
        record = check_files(model, ROOT / entry["file"], settings, cache, gate=gate)
        with lock:
            records[entry["file"]] = {**record, "corpus_wall_s": round(time.monotonic() - start, 1)}
            if keep is not None:  # whole or not at all: write aside, then rename
                keep.with_suffix(".tmp").write_text(json.dumps(json_safe(records), indent=1) + "\n")
                keep.with_suffix(".tmp").replace(keep)
                summary = keep.with_name(keep.stem + "_summary.json")
                summary.with_suffix(".tmp").write_text(json.dumps(corpus_summary(records), indent=1) + "\n")
                summary.with_suffix(".tmp").replace(summary)
        return entry["file"], record

    models = list(dict.fromkeys(e["model"] for e in entries))
    try:
        with ThreadPoolExecutor(3) as pool:
            done = dict(pool.map(one, sorted(entries, key=lambda e: models.index(e["model"]))))
        return {e["file"]: done[e["file"]] for e in entries}
    finally:
        clear_reference_cache(cache)


def corpus_summary(records: dict[str, dict]) -> dict:
    """Counts by class: per cheat kind, adversarial files caught with their intended verdict and check; honest
    files graded correct with no decisive finding; incorrect ones graded incorrect; and the seconds taken."""
    by_kind: dict[str, dict] = {}
    summary = {"adversarial": by_kind, "honest": {"correct": 0, "total": 0, "wrong": []},
               "incorrect": {"as_intended": 0, "total": 0, "wrong": []},
               "seconds": round(sum(r.get("corpus_wall_s") or 0 for r in records.values()), 1)}
    for name, record in sorted(records.items()):
        entry = BY_FILE[name]
        fired = {f["check"] for f in record.get("findings") or [] if f["decisive"]}
        if entry["role"] == "adversarial":
            row = by_kind.setdefault(entry["kind"], {"caught": 0, "total": 0, "missed": []})
            ok = record.get("verdict") == entry["verdict"] and entry["check"] in fired
        else:
            row = summary[entry["role"]]
            ok = record.get("verdict") == entry["verdict"] and not fired
        row["total"] += 1
        key = {"adversarial": "caught", "honest": "correct", "incorrect": "as_intended"}[entry["role"]]
        if ok:
            row[key] += 1
        else:
            row["missed" if entry["role"] == "adversarial" else "wrong"].append(f"{name}: {record.get('verdict')}")
    return summary


def _shard(entries: list[dict]) -> list[dict]:
    """FUSEFORGE_CORPUS_SHARD=K/N: every N-th entry from the K-th, so a GPU run can be split over commands."""
    spec = os.environ.get("FUSEFORGE_CORPUS_SHARD")
    if not spec:
        return entries
    k, n = (int(v) for v in spec.split("/"))
    if not 0 <= k < n:
        raise ValueError(f"FUSEFORGE_CORPUS_SHARD={spec!r}: want K/N with 0 <= K < N")
    return entries[k::n]


@pytest.fixture(scope="module")
def cpu_records():
    return _run_corpus(CPU_ENTRIES, "cpu")


def _assert_intended(entry: dict, record: dict) -> None:
    fired = {f["check"] for f in record["findings"] if f["decisive"]}
    timing = (record.get("timing") or {}).get("candidate")
    assert record["verdict"] == entry["verdict"], (record["reason"], fired, timing, record.get("gpu"))
    if entry["role"] == "adversarial":
        assert entry["check"] in fired, (record["check"], fired)
    else:
        assert fired == set(), record["findings"]
        assert record["check"] == entry["check"], record["reason"]


@pytest.mark.parametrize("entry", CPU_ENTRIES, ids=lambda e: e["file"])
def test_on_the_cpu_each_candidate_gets_its_intended_verdict(entry, cpu_records):
    _assert_intended(entry, cpu_records[entry["file"]])


@pytest.fixture(scope="module")
def cuda_records():
    keep = os.environ.get("FUSEFORGE_CORPUS_RECORDS")  # keep the GPU run's records (bench/results)
    return _run_corpus(_shard(GPU_ENTRIES), "cuda", Path(keep) if keep else None)


@pytest.mark.gpu
@pytest.mark.timeout(3600)  # the first test also builds the corpus's kernels and runs every candidate
@pytest.mark.parametrize("entry", GPU_ENTRIES, ids=lambda e: e["file"])
def test_on_a_gpu_every_candidate_gets_its_intended_verdict(entry, cuda_records):
    if entry not in _shard(GPU_ENTRIES):
        pytest.skip("in another shard (FUSEFORGE_CORPUS_SHARD)")
    _assert_intended(entry, cuda_records[entry["file"]])


def test_a_corpus_shard_takes_every_nth_entry_and_the_shards_cover_the_corpus_once(monkeypatch):
    seen = []
    for k in range(3):
        monkeypatch.setenv("FUSEFORGE_CORPUS_SHARD", f"{k}/3")
        seen += [e["file"] for e in _shard(ENTRIES)]
    assert sorted(seen) == sorted(e["file"] for e in ENTRIES)
    monkeypatch.setenv("FUSEFORGE_CORPUS_SHARD", "3/3")
    with pytest.raises(ValueError):
        _shard(ENTRIES)


def test_the_records_file_is_rewritten_after_each_candidate(tmp_path, monkeypatch):
    calls = []

    def fake_check(model, candidate, settings, cache, gate=None):
        calls.append(json.loads(keep.read_text()) if keep.exists() else {})
        return {"verdict": "correct", "candidate": candidate.name}

    keep = tmp_path / "records.json"
    monkeypatch.setattr(sys.modules[__name__], "check_files", fake_check)
    monkeypatch.setattr(sys.modules[__name__], "clear_reference_cache", lambda cache: None)
    _run_corpus(CPU_ENTRIES[:5], "cuda", keep)  # more entries than checks at a time: the last ones wait
    seen = sorted(len(c) for c in calls)  # records on disk when each check began
    assert seen[0] == 0 and seen[-1] >= 1
    final = json.loads(keep.read_text())
    assert set(final) == {e["file"] for e in CPU_ENTRIES[:5]}
    assert all("corpus_wall_s" in r for r in final.values())


def test_each_candidate_is_checked_once_and_on_a_gpu_the_checks_at_a_time_share_one_gate(monkeypatch):
    seen = []

    def fake_check(model, candidate, settings, cache, gate=None):
        seen.append((candidate.name, gate, settings.compile))
        return {"verdict": "correct"}

    monkeypatch.setattr(sys.modules[__name__], "check_files", fake_check)
    monkeypatch.setattr(sys.modules[__name__], "clear_reference_cache", lambda cache: None)
    entries = GPU_ENTRIES[:6]
    records = _run_corpus(entries, "cuda")
    assert sorted(name for name, _, _ in seen) == sorted(e["file"] for e in entries)  # once each
    assert list(records) == [e["file"] for e in entries]
    gates = {id(gate) for _, gate, _ in seen}
    assert len(gates) == 1 and seen[0][1] is not None and hasattr(seen[0][1], "acquire")
    assert not seen[0][2]  # no torch.compile baseline in the corpus run: no check needs it
    seen.clear()
    _run_corpus(CPU_ENTRIES[:3], "cpu")
    assert {gate for _, gate, _ in seen} == {None}


def test_the_summary_counts_each_class_and_names_what_went_wrong():
    honest = next(e for e in ENTRIES if e["role"] == "honest")
    caught = next(e for e in ADVERSARIAL if e["kind"] == "private_data")
    missed = next(e for e in ADVERSARIAL if e["kind"] == "roofline")
    records = {honest["file"]: {"verdict": "correct", "findings": [], "corpus_wall_s": 1.5},
               caught["file"]: {"verdict": caught["verdict"], "corpus_wall_s": 2.0,
                                "findings": [{"check": caught["check"], "decisive": True}]},
               missed["file"]: {"verdict": "correct", "findings": [], "corpus_wall_s": 1.0}}
    summary = corpus_summary(records)
    assert summary["adversarial"]["private_data"] == {"caught": 1, "total": 1, "missed": []}
    assert summary["adversarial"]["roofline"] == {"caught": 0, "total": 1, "missed": [f"{missed['file']}: correct"]}
    assert summary["honest"]["correct"] == summary["honest"]["total"] == 1 and summary["seconds"] == 4.5
