"""The adversarial corpus (tests/adversarial/corpus.json): its metadata is complete and consistent, every
candidate runnable on the CPU gets its intended verdict with its check firing, and on a GPU all do."""

import ast
import json
import os
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
CPU_ENTRIES = [e for e in ENTRIES if e["device"] == "cpu"]


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
    assert entry["device"] in ("cpu", "cuda")
    assert check.needs != "gpu" or entry["device"] == "cuda"
    twin = BY_FILE[entry["twin"]]
    assert twin["role"] == "honest" and twin["verdict"] == "correct" and twin["model"] == entry["model"]
    assert entry["device"] == "cuda" or twin["device"] == "cpu"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_each_file_says_what_it_is_in_its_docstring(entry):
    doc = ast.get_docstring(ast.parse((ROOT / entry["file"]).read_text()))
    expected = f"Adversarial ({entry['kind']}" if entry["role"] == "adversarial" else "Honest"
    assert doc.startswith(expected)
    model = CORPUS["models"][entry["model"]]
    assert model["device"] == "cpu" or entry["device"] == "cuda"


def _run_corpus(entries: list[dict], device: str) -> dict[str, dict]:
    s = CORPUS["settings"][device]
    settings = CheckSettings(device=device, seeds=s["seeds"], trials=s["trials"], warmup=s["warmup"])
    cache: dict = {}

    def one(entry):
        model = ROOT / CORPUS["models"][entry["model"]]["path"]
        return entry["file"], check_files(model, ROOT / entry["file"], settings, cache)

    try:
        for entry in {e["model"]: e for e in entries}.values():  # one reference run per model, first
            one(entry)
        with ThreadPoolExecutor(2 if device == "cpu" else 1) as pool:
            return dict(pool.map(one, entries))
    finally:
        clear_reference_cache(cache)


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


@pytest.mark.parametrize("entry", CPU_ENTRIES, ids=lambda e: e["file"])
def test_on_the_cpu_each_candidate_gets_its_intended_verdict(entry, cpu_records):
    _assert_intended(entry, cpu_records[entry["file"]])


@pytest.fixture(scope="module")
def cuda_records():
    records = _run_corpus(ENTRIES, "cuda")
    if os.environ.get("FUSEFORGE_CORPUS_RECORDS"):  # keep the GPU run's records (bench/results)
        Path(os.environ["FUSEFORGE_CORPUS_RECORDS"]).write_text(json.dumps(json_safe(records), indent=1) + "\n")
    return records


@pytest.mark.gpu
@pytest.mark.timeout(3600)  # the first test also builds the corpus's kernels and runs every candidate
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["file"])
def test_on_a_gpu_every_candidate_gets_its_intended_verdict(entry, cuda_records):
    _assert_intended(entry, cuda_records[entry["file"]])
