"""`fuseforge fuzz`: the generator writes only valid, deterministic model files; the campaign records an
outcome for every model, whatever its run does (passes, fails, crashes, hangs)."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from compile_check import NVCC, compiles_for_hopper

from fuseforge.fuzz.campaign import OUTCOMES, CampaignConfig, run_campaign, summary_lines
from fuseforge.fuzz.generator import MAX_CHAIN, MIN_CHAIN, generate
from fuseforge.fuzz.reasons import failure_reason, reason_key
from fuseforge.fuzz.vocabulary import ANCHORS, OPS

CI_SEED, CI_COUNT = 7000, 5  # the CPU campaign of CI


def _run_file(path: Path) -> list[torch.Tensor]:
    """Import a model file as optimize's load stage does and run Model(*get_init_inputs())(*get_inputs())."""
    spec = importlib.util.spec_from_file_location(f"fuzz_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        out = model(*module.get_inputs())
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _assert_runs_as_tracked(model, tmp_path: Path) -> None:
    path = tmp_path / f"{model.name}.py"
    path.write_text(model.source)
    try:
        outputs = _run_file(path)
    except Exception as exc:  # the file in the message: it is the reproduction
        raise AssertionError(f"{model.ops} raised {type(exc).__name__}: {exc}\n{model.source}") from exc
    assert tuple(tuple(o.shape) for o in outputs) == model.output_shapes, model.source
    assert all(torch.isfinite(o).all() for o in outputs), f"non-finite output\n{model.source}"


# --- the generator --------------------------------------------------------------------------------------

def test_the_same_seed_writes_the_same_model_file():
    for seed in range(20):
        assert generate(seed).source == generate(seed).source
    assert len({generate(seed).source for seed in range(20)}) == 20


def test_the_same_seed_writes_the_same_model_file_in_another_process():
    """Catches randomness from outside the seed: hash() of strings, set order (PYTHONHASHSEED), time."""
    code = "import sys; from fuseforge.fuzz.generator import generate; sys.stdout.write(generate(int(sys.argv[1])).source)"
    for seed in (3, 11):
        env = {**os.environ, "PYTHONHASHSEED": str(seed + 1)}
        other = subprocess.run([sys.executable, "-c", code, str(seed)], capture_output=True, text=True, env=env,
                               check=True).stdout
        assert other == generate(seed).source


def test_a_model_has_one_anchor_then_two_to_six_chain_ops():
    for seed in range(200):
        ops = [o for o in generate(seed).ops if o not in ("tuple_output", "unused_parameter")]
        assert ops[0] in ANCHORS and all(o in OPS for o in ops[1:]), ops
        assert MIN_CHAIN <= len(ops) - 1 <= MAX_CHAIN, ops


def test_every_op_of_the_vocabulary_is_drawn_in_a_thousand_models():
    """Catches an op that is never valid (a wrong `applies`) or never drawn (a zero weight)."""
    drawn = Counter(op for seed in range(1000) for op in generate(seed).ops)
    missing = sorted((set(OPS) | set(ANCHORS)) - set(drawn))
    assert not missing, missing
    assert drawn["tuple_output"] > 0 and drawn["unused_parameter"] > 0


@pytest.mark.parametrize("name", sorted(OPS) + sorted(ANCHORS))
def test_each_op_on_its_own_makes_models_that_run_in_eager_with_the_tracked_shapes(name, tmp_path):
    """Each anchor and chain op, forced into three models: the file runs in eager PyTorch and its outputs
    have the shapes the generator tracked (a wrong shape rule would make later ops invalid)."""
    for seed in range(3):
        model = generate(seed, include=name)
        assert name in model.ops
        _assert_runs_as_tracked(model, tmp_path)


def test_three_hundred_random_models_run_in_eager_with_the_tracked_shapes(tmp_path):
    for seed in range(300):
        _assert_runs_as_tracked(generate(seed), tmp_path)


def test_the_pool_shape_rule_and_the_empty_window_rule_agree_with_torch():
    """Every window the generator may draw (ceil_mode's last window that would start in the padding
    included): its output length is torch's, and a window of padding only is refused (-inf in a max pool)."""
    from fuseforge.fuzz.ops_norm_pool import _every_window_reads_the_input, _pooled

    checked = 0
    for size in range(1, 10):
        for kernel in range(1, 5):
            for stride in range(1, 6):
                for padding in range(0, kernel // 2 + 1):
                    for dilation in (1, 2):
                        if size + 2 * padding < dilation * (kernel - 1) + 1:
                            continue
                        for ceil_mode in (False, True):
                            x = torch.zeros(1, 1, size)
                            y = torch.nn.functional.max_pool1d(x, kernel, stride, padding, dilation, ceil_mode)
                            window = (kernel, stride, padding, dilation, ceil_mode)
                            assert _pooled(size, *window) == y.shape[-1], (size, window)
                            assert _every_window_reads_the_input(size, *window) == bool(torch.isfinite(y).all())
                            checked += 1
    assert checked > 500


def test_a_model_file_is_standalone_with_the_kernelbench_layout():
    source = generate(1).source
    for part in ("import torch\n", "class Model(nn.Module):", "def get_inputs():", "def get_init_inputs():",
                 "\nbatch_size = "):
        assert part in source, part
    assert "fuseforge" not in source.split('"""')[2], "the model file must not import fuseforge"


# --- reasons --------------------------------------------------------------------------------------------

def test_the_failure_reason_is_the_cli_line_without_the_model_name():
    log = ("[12:00:00] load …\n           capture …\n"
           "fuseforge: fuzz_000003.py: capture: unsupported graph input c_lifted_tensor_0 of kind CONSTANT_TENSOR\n")
    assert failure_reason(log, "fuzz_000003.py") == \
        "capture: unsupported graph input c_lifted_tensor_0 of kind CONSTANT_TENSOR"


def test_a_failure_message_wrapped_over_lines_is_joined_into_one():
    log = ("fuseforge: m.py: verify: CPU check failed: plan output 0: relative error 1.8e+00; emitted buffer\n"
           "bn.running_mean: relative error 1.0e+00\nreport (of the failed run): out/report.md\n")
    assert failure_reason(log, "m.py") == ("verify: CPU check failed: plan output 0: relative error 1.8e+00; "
                                           "emitted buffer bn.running_mean: relative error 1.0e+00")


def test_the_failure_reason_of_a_traceback_is_its_exception_line():
    log = "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: view size is not compatible\n"
    assert failure_reason(log, "m.py") == "RuntimeError: view size is not compatible"


def test_reasons_that_differ_only_in_numbers_count_as_one():
    a = "capture: unsupported graph input c_lifted_tensor_0: error 3.1e-04 > bound 2e-06 at [2, 7]"
    b = "capture: unsupported graph input c_lifted_tensor_12: error 0.5 > bound 1e-07 at [5, 3]"
    assert reason_key(a) == reason_key(b)
    assert reason_key("output 0: shape [2, 6016], error 6e-09") == reason_key("output 0: shape [2, 11, 25], error 4e-09")
    assert reason_key("conv2d failed in float64") != reason_key("conv3d failed in float32")


# --- the campaign ---------------------------------------------------------------------------------------

def _fake_run(script: str) -> list[str]:
    """A campaign command that runs `script` with the model file as sys.argv[1] instead of optimize."""
    return ["{python}", "-c", script, "{model}", "{out}"]


def test_a_hanging_run_is_killed_at_its_timeout_and_the_campaign_goes_on(tmp_path):
    script = "import sys, time\nif sys.argv[1].endswith('fuzz_000001.py'):\n    time.sleep(120)\n"
    config = CampaignConfig(out=tmp_path, count=3, seed=0, timeout_s=3, command=_fake_run(script))
    campaign = run_campaign(config, progress=lambda line: None)
    assert [o.outcome for o in campaign.outcomes] == ["passed", "timeout", "passed"]
    hung = campaign.outcomes[1]
    assert hung.exit_code is None and hung.reason.startswith("timed out after 3 s") and hung.seconds < 60


def test_failures_and_crashes_are_recorded_with_their_one_line_reason(tmp_path):
    script = ("import sys, pathlib\nname = pathlib.Path(sys.argv[1]).name\n"
              "if name.endswith('0.py'):\n    print(f'fuseforge: {name}: capture: unsupported thing 7'); sys.exit(1)\n"
              "if name.endswith('1.py'):\n    raise RuntimeError('boom 3')\n"
              "if name.endswith('2.py'):\n    import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    config = CampaignConfig(out=tmp_path, count=4, seed=10, timeout_s=60, command=_fake_run(script))
    campaign = run_campaign(config, progress=lambda line: None)
    got = [(o.outcome, o.exit_code, o.reason) for o in campaign.outcomes]
    assert got == [("failed", 1, "capture: unsupported thing 7"), ("crashed", 1, "RuntimeError: boom 3"),
                   ("crashed", -9, "killed by SIGKILL"), ("passed", 0, "")]
    summary = json.loads((tmp_path / "fuzz.json").read_text())["summary"]
    assert summary["counts"] == {"passed": 1, "failed": 1, "crashed": 2, "timeout": 0}
    assert {r["example"]: r["count"] for r in summary["reasons"]} == {
        "capture: unsupported thing 7": 1, "RuntimeError: boom 3": 1, "killed by SIGKILL": 1}


def test_fuzz_json_is_rewritten_after_every_model(tmp_path):
    """Catches a record written only at the end (a crash of the campaign would lose everything)."""
    seen = []

    def progress(line):
        seen.append(len(json.loads((tmp_path / "fuzz.json").read_text())["models"]))

    run_campaign(CampaignConfig(out=tmp_path, count=3, seed=0, command=_fake_run("pass")), progress)
    assert seen == [1, 2, 3]


def test_the_cpu_campaign_records_an_outcome_for_every_model_and_every_model_runs_in_eager(tmp_path):
    """The CI campaign: `fuseforge fuzz --no-gpu` over fixed seeds, through the CLI. Whether optimize passes
    on each is not asserted yet; that each model is valid and has a recorded outcome is."""
    out = tmp_path / "campaign"
    result = subprocess.run([sys.executable, "-m", "fuseforge", "fuzz", "--count", str(CI_COUNT), "--seed",
                             str(CI_SEED), "--out", str(out), "--no-gpu", "--timeout", "300"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode in (0, 1), result.stderr
    record = json.loads((out / "fuzz.json").read_text())
    models = record["models"]
    assert [m["seed"] for m in models] == list(range(CI_SEED, CI_SEED + CI_COUNT))
    for m in models:
        assert m["outcome"] in OUTCOMES and m["seconds"] > 0, m
        assert (m["outcome"] == "passed") == (m["exit_code"] == 0) and bool(m["reason"]) != (m["exit_code"] == 0), m
        assert "\n" not in m["reason"]
        path = Path(m["model"])
        assert path.read_text() == generate(m["seed"]).source
        _assert_runs_as_tracked(generate(m["seed"]), tmp_path)
    assert sum(record["summary"]["counts"].values()) == CI_COUNT
    assert f"fuzz: {CI_COUNT} models: " in result.stdout
    assert result.returncode == (0 if all(m["outcome"] == "passed" for m in models) else 1)
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == CI_COUNT, result.stdout


def test_a_fallback_to_a_simpler_plan_is_recorded_with_the_reasons_the_plans_were_left(tmp_path):
    """Catches a campaign that counts a run as plainly passed when optimize only passed on a simpler plan."""
    script = ("import sys, pathlib\nif sys.argv[1].endswith('0.py'):\n"
              "    print('[12:00:01] verify …   cli.py:81')\n"
              "    print('           next rung: torch calls of the captured graph …   cli.py:81')\n"
              "    out = pathlib.Path(sys.argv[2]); out.mkdir(parents=True)\n"
              "    (out / 'report.md').write_text('## Plan kept\\n\\nThe plan with torch calls of the captured graph. '\n"
              "        'Other plans tried:\\n\\n- The plan with every kernel family failed at verify: CPU check '\n"
              "        'failed: relative error 7.2e-09. Its artefacts: attempts/1_every-kernel-family/.\\n')\n")
    campaign = run_campaign(CampaignConfig(out=tmp_path, count=2, seed=0, command=_fake_run(script)),
                            progress=lambda line: None)
    first, second = campaign.outcomes
    assert first.detours == ["next rung: torch calls of the captured graph"] and second.detours == []
    assert first.plan_kept == "torch calls of the captured graph"
    assert first.plans_left == ["every kernel family failed at verify: CPU check failed: relative error 7.2e-09"]
    summary = campaign.summary()
    assert summary["counts"]["passed"] == 2 and summary["passed_on_a_simpler_plan"] == 1
    assert [(g["example"], g["models"]) for g in summary["first_plan_left"]] == [
        ("every kernel family failed at verify: CPU check failed: relative error 7.2e-09", ["fuzz_000000"])]


def test_generate_only_writes_the_seeds_model_files_and_runs_nothing(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fuseforge", "fuzz", "--generate-only", "--count", "2", "--seed",
                             "41", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for seed in (41, 42):
        assert (tmp_path / "models" / f"fuzz_{seed:06d}.py").read_text() == generate(seed).source
    assert not (tmp_path / "fuzz.json").exists() and not (tmp_path / "runs").exists()


def test_several_models_run_at_once_and_the_record_stays_in_seed_order(tmp_path):
    """Each fake run waits until two runs have started: with one job at a time the first would give up and
    fail, so all four passing shows that two ran at once."""
    script = ("import sys, time, pathlib\nout = pathlib.Path(sys.argv[2]).parent\n"
              "(out / ('started_' + pathlib.Path(sys.argv[1]).stem)).touch()\n"
              "deadline = time.time() + 20\n"
              "while len(list(out.glob('started_*'))) < 2 and time.time() < deadline:\n    time.sleep(0.05)\n"
              "sys.exit(0 if len(list(out.glob('started_*'))) >= 2 else 3)\n")
    config = CampaignConfig(out=tmp_path, count=4, seed=20, jobs=2, timeout_s=60, command=_fake_run(script))
    campaign = run_campaign(config, progress=lambda line: None)
    assert sorted(o.outcome for o in campaign.outcomes) == ["passed"] * 4
    record = json.loads((tmp_path / "fuzz.json").read_text())
    assert [m["seed"] for m in record["models"]] == [20, 21, 22, 23] and record["jobs"] == 2


def test_a_campaign_started_again_keeps_its_recorded_outcomes_and_runs_only_the_rest(tmp_path):
    """Catches a second command that runs every model again (or loses the first command's outcomes)."""
    run_campaign(CampaignConfig(out=tmp_path, count=2, seed=0, command=_fake_run("pass")), lambda line: None)
    # the second command fails any model it runs: the first two must keep their recorded 'passed'
    again = CampaignConfig(out=tmp_path, count=4, seed=0, command=_fake_run("import sys; sys.exit(5)"))
    lines = []
    campaign = run_campaign(again, lines.append)
    assert [(o.seed, o.outcome) for o in sorted(campaign.outcomes, key=lambda o: o.seed)] == [
        (0, "passed"), (1, "passed"), (2, "crashed"), (3, "crashed")]
    assert lines[0].startswith("2 model(s) already recorded") and len(lines) == 3


def test_a_campaign_resumed_at_another_commit_counts_each_model_at_the_commit_it_ran_at(tmp_path, monkeypatch):
    """Catches a record that cannot say how many of its models ran at one commit (a campaign resumed after a code
    change mixes two)."""
    import fuseforge.fuzz.campaign as campaign_module

    monkeypatch.setattr(campaign_module, "commit", lambda: "aaa111")
    run_campaign(CampaignConfig(out=tmp_path, count=2, seed=0, command=_fake_run("pass")), lambda line: None)
    monkeypatch.setattr(campaign_module, "commit", lambda: "bbb222")
    campaign = run_campaign(CampaignConfig(out=tmp_path, count=3, seed=0, command=_fake_run("pass")),
                            lambda line: None)
    assert [o.commit for o in sorted(campaign.outcomes, key=lambda o: o.seed)] == ["aaa111", "aaa111", "bbb222"]
    summary = json.loads((tmp_path / "fuzz.json").read_text())["summary"]
    assert summary["commits"] == {"aaa111": 2, "bbb222": 1}
    assert "at commits aaa111 (2), bbb222 (1)" in summary_lines(summary)[0]


def test_with_check_each_verified_model_new_is_graded_again_and_its_verdict_counted(tmp_path):
    """A run that verifies writes model_new.py; the check command's verdict (from its JSON record) is kept
    per model and counted; a run that exits 0 without model_new.py is 'missing', never 'correct'."""
    optimize = ("import sys, pathlib\nname = pathlib.Path(sys.argv[1]).stem\nout = pathlib.Path(sys.argv[2])\n"
                "out.mkdir(parents=True)\n"
                "if not name.endswith('2'):\n    (out / 'model_new.py').write_text('# ' + name)\n")
    check = ["{python}", "-c", "import sys, json, pathlib\ncand = pathlib.Path(sys.argv[2]).read_text()\n"
             "verdict = 'incorrect' if cand.endswith('1') else 'correct'\n"
             "pathlib.Path(sys.argv[3]).write_text(json.dumps({'verdict': verdict, 'reason': 'r ' + verdict}))\n",
             "{model}", "{candidate}", "{json}"]
    config = CampaignConfig(out=tmp_path, count=3, seed=0, gpu=True, check=True, jobs=2, timeout_s=60,
                            command=_fake_run(optimize), check_command=check)
    campaign = run_campaign(config, progress=lambda line: None)
    verdicts = {o.seed: (o.check_verdict, o.check_reason) for o in campaign.outcomes}
    assert verdicts == {0: ("correct", "r correct"), 1: ("incorrect", "r incorrect"),
                        2: ("missing", "optimize exited 0 without a verified model_new.py")}
    assert campaign.summary()["check_verdicts"] == {"correct": 1, "incorrect": 1, "missing": 1}


def test_a_terminated_campaign_kills_its_runs_in_flight_and_keeps_what_it_recorded(tmp_path):
    """Catches runs left behind (their own sessions) when a `timeout` ends the campaign: they would go on
    writing into OUT while the next command runs the same models again."""
    script = ("import sys, time, os, pathlib\nname = pathlib.Path(sys.argv[1]).stem\n"
              "pathlib.Path(sys.argv[2]).with_suffix('.started').touch()\n"
              "if not name.endswith('0'):\n"
              "    pathlib.Path(sys.argv[2]).with_suffix('.pid').write_text(str(os.getpid())); time.sleep(120)\n")
    code = ("import sys; from pathlib import Path; from fuseforge.fuzz.campaign import CampaignConfig, run_campaign\n"
            f"run_campaign(CampaignConfig(out=Path(sys.argv[1]), count=6, seed=0, jobs=2, command={_fake_run(script)!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    pid_file, third = tmp_path / "runs" / "fuzz_000001.pid", tmp_path / "runs" / "fuzz_000002.pid"
    deadline = time.time() + 60
    while not (pid_file.is_file() and pid_file.read_text() and third.is_file() and third.read_text()
               and (tmp_path / "fuzz.json").is_file()):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + 15
    run_pid = int(pid_file.read_text())
    time.sleep(0.5)
    assert not Path(f"/proc/{run_pid}").exists() or "Z" in Path(f"/proc/{run_pid}/stat").read_text().split()[2]
    # model 0 passed at once, 1 and 2 hung (2 started when 0 ended): 3, 4, 5 never start
    assert [m["seed"] for m in json.loads((tmp_path / "fuzz.json").read_text())["models"]] == [0]
    started = sorted(p.stem for p in (tmp_path / "runs").glob("*.started"))
    assert started == ["fuzz_000000", "fuzz_000001", "fuzz_000002"], started


def test_on_several_gpus_the_models_take_them_in_turn_each_gpu_with_its_own_lease(tmp_path):
    """Catches runs all pinned to one GPU (or sharing one lease across GPUs: they would wait for each other),
    and jobs that each start as many threads as the machine has CPUs."""
    script = ("import sys, os, json, pathlib\nout = pathlib.Path(sys.argv[2]); out.mkdir(parents=True)\n"
              "(out / 'env.json').write_text(json.dumps({k: os.environ.get(k) for k in "
              "('CUDA_VISIBLE_DEVICES', 'FUSEFORGE_GPU_LEASE', 'OMP_NUM_THREADS')}))\n")
    config = CampaignConfig(out=tmp_path, count=4, seed=0, gpu=True, jobs=2, gpu_ids=["3", "5"], timeout_s=60,
                            command=_fake_run(script))
    run_campaign(config, progress=lambda line: None)
    seen = {seed: json.loads((tmp_path / "runs" / f"fuzz_{seed:06d}" / "env.json").read_text()) for seed in range(4)}
    assert [seen[s]["CUDA_VISIBLE_DEVICES"] for s in range(4)] == ["3", "5", "3", "5"]
    assert [Path(seen[s]["FUSEFORGE_GPU_LEASE"]).name for s in range(4)] == ["gpu3.lock", "gpu5.lock"] * 2
    assert int(seen[0]["OMP_NUM_THREADS"]) == max(1, (os.cpu_count() or 1) // 2)


def _calls(source: str, names: tuple[str, ...]) -> list[str]:
    """The text of each call `name(...)` in `source`, up to its matching parenthesis."""
    found = []
    for name in names:
        start = source.find(name + "(")
        while start >= 0:
            depth, end = 0, start + len(name)
            for end in range(start + len(name), len(source)):
                depth += {"(": 1, ")": -1}.get(source[end], 0)
                if depth == 0:
                    break
            found.append(source[start:end + 1])
            start = source.find(name + "(", end)
    return found


def test_every_tensor_factory_of_more_than_one_value_is_made_on_the_inputs_device():
    """A CPU tensor of any shape but 0-d cannot meet a CUDA tensor: such a model cannot run on a GPU (a campaign
    model added `torch.full((1, 1, 1, 11), 0.09)` to a CUDA tensor and its own forward raised)."""
    seen = 0
    for op in ("tensor_ones", "tensor_full"):
        for seed in range(60):
            for call in _calls(generate(seed, include=op).source, ("torch.ones", "torch.zeros", "torch.full")):
                if not call.split("(", 1)[1].startswith("()"):
                    seen += 1
                    assert "device=x.device" in call, call
    assert seen > 20


def test_aten_aliases_change_a_models_spelling_only(monkeypatch):
    """Half the torch.mul/sub/div/clamp/abs spellings come out as their aliases (torch.multiply, ...), drawn from a
    side stream: with the aliases mapped back, every model is the one the generator writes without them."""
    from fuseforge.fuzz import op as fuzz_op
    from fuseforge.fuzz.generator import generate

    seeds, aliases = range(20000, 20120), dict(fuzz_op.ALIASES)
    with_aliases = [generate(seed).source for seed in seeds]
    monkeypatch.setattr(fuzz_op, "ALIASES", {})
    without = [generate(seed).source for seed in seeds]
    used = {alias for alias in aliases.values() if any(alias in src for src in with_aliases)}
    assert len(used) >= 3, used
    for src, plain in zip(with_aliases, without):
        for name, alias in aliases.items():
            src = src.replace(alias, name)
        assert src == plain


def test_every_kernel_is_passed_to_each_models_optimize_run(tmp_path):
    """`fuzz --every-kernel`: each model's optimize run plans every anchor a kernel can take as that kernel, so a
    GPU campaign runs the kernels on the fuzzer's odd shapes (the cost model keeps cuDNN or cuBLAS at most of them)."""
    model, out = tmp_path / "m.py", tmp_path / "o"
    assert "--every-kernel" in CampaignConfig(out=tmp_path, every_kernel=True).argv(model, out)
    assert "--every-kernel" not in CampaignConfig(out=tmp_path).argv(model, out)


EVERY_KERNEL_SEED, EVERY_KERNEL_COUNT = 67000, 10  # conv, row and channel kernels among their plans


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_with_every_kernel_the_cpu_campaigns_kernel_units_all_compile_for_hopper(tmp_path):
    """`fuzz --no-gpu --every-kernel` over fixed seeds, then each plan's CUDA unit through nvcc (sm_90a): the CPU
    campaign builds nothing, so a kernel unit that does not compile (seed 66182's Row struct held a bool as a float)
    would only show on a GPU, as a family dropped by the ladder. With --every-kernel the conv and GEMM kernels are in
    the plans too, whatever they cost at the fuzzer's sizes."""
    out = tmp_path / "campaign"
    result = subprocess.run([sys.executable, "-m", "fuseforge", "fuzz", "--count", str(EVERY_KERNEL_COUNT), "--seed",
                             str(EVERY_KERNEL_SEED), "--out", str(out), "--no-gpu", "--every-kernel", "--timeout", "300"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:]
    units = sorted(out.glob("runs/*/30_kernels/kernels.cu"))
    assert len(units) == EVERY_KERNEL_COUNT
    plans = "".join(p.read_text() for p in out.glob("runs/*/20_partition.txt"))
    assert "conv kernel:" in plans and "row kernel" in plans and "channel kernels:" in plans
    for unit in units:
        compiled = compiles_for_hopper(unit.read_text(), tmp_path)
        assert compiled.returncode == 0, f"{unit}: {compiled.stderr[-2000:]}"
