"""The measured parts of the report: summary lines and the verification and benchmark tables.

Reads the records written by `fuseforge.evaluate` (50_verify.json, 60_bench.json; schemas in
`fuseforge/evaluate/verify.py` and `bench.py`) and puts the prediction of the cost model next to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .run import Run


def _ms(v) -> str:
    return f"{v:.3f} ms" if isinstance(v, (int, float)) else "—"


def _x(v) -> str:
    return f"{v:.2f}x" if isinstance(v, (int, float)) else "—"


def _mib(v) -> str:
    return f"{v / 2**20:.1f} MiB" if isinstance(v, (int, float)) else "—"


def _worst(verify: dict) -> str:
    w = verify.get("worst") or {}
    if not w:
        return "—"
    return (f"{_e(w.get('cand_rel_err'))} (eager fp32: {_e(w.get('ref_rel_err'))}; "
            f"{_pct(w.get('ratio'))} of the allowed error)")


def _e(v) -> str:
    """A relative error; '—' where there is none (the truth is all zeros, so no relative error exists)."""
    return f"{v:.2e}" if isinstance(v, (int, float)) else "—"


def _pct(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) else "—"


def summary_rows(run: Run) -> list[str]:
    if run.verify is None:
        gpu = f"not run ({run.config.gpu_skip_reason})" if not run.config.gpu else "did not complete"
        cpu = run.cpu_check
        cpu_text = (cpu.skipped if cpu and cpu.skipped else
                    f"passed (plan and emitted forward vs the model in float64, max relative error {cpu.max_rel_error:.1e})"
                    if cpu and cpu.passed else "failed" if cpu else "not reached")
        return ["| | |", "|---|---|", f"| CPU-side check | {cpu_text} |", f"| GPU verification and benchmark | {gpu} |",
                f"| expected speedup vs eager (cost model) | {_x(run.cost.speedup if run.cost else None)} |"]
    result = "`model_new.py` (verified)" if run.verified else "none: `40_model_new.py` failed verification"
    rows = ["| | |", "|---|---|", f"| verdict | **{run.verify.get('verdict')}**"
            + (f": {run.verify.get('reason')}" if run.verify.get("reason") else "") + " |",
            f"| result | {result} |",
            f"| worst relative error vs fp64 | {_worst(run.verify)} |",
            f"| allclose(atol=rtol=1e-4) vs eager (compatibility) | {run.verify.get('allclose')} |"]
    if run.bench:
        v = run.bench.get("variants", {})
        s = run.bench.get("speedup", {})
        rows += [f"| eager / torch.compile / fuseforge | {_ms(v.get('eager', {}).get('median_ms'))} / "
                 f"{_ms(v.get('compile', {}).get('median_ms'))} / {_ms(v.get('candidate', {}).get('median_ms'))} |",
                 f"| speedup vs eager (measured / predicted) | {_x(s.get('vs_eager'))} / "
                 f"{_x(run.cost.speedup if run.cost else None)} |",
                 f"| speedup vs torch.compile | {_x(s.get('vs_compile'))} |"]
        autotuned = v.get("compile_max_autotune") or {}
        if autotuned.get("status") == "ok":
            rows += [f"| torch.compile max-autotune / speedup vs it | {_ms(autotuned.get('median_ms'))} / "
                     f"{_x(s.get('vs_compile_max_autotune'))} |"]
    return rows


def _verify_table(verify: dict) -> list[str]:
    lines = ["| seed | inputs | batch | passed | worst output: rel. error (eager fp32) | allclose 1e-4 |",
             "|---|---|---|---|---|---|"]
    for case in verify.get("cases", []):
        checks = case.get("outputs", []) + case.get("buffers", [])
        worst = max(checks, key=lambda c: (c.get("cand_err") or 0) / max(c.get("bound") or 1e-300, 1e-300),
                    default={})
        err = (f"{worst.get('name')}: {_e(worst.get('cand_rel_err'))} ({_e(worst.get('ref_rel_err'))})"
               if worst else "—")
        lines.append(f"| {case.get('seed')} | {case.get('distribution')} | {case.get('batch') or 'file'} | "
                     f"{case.get('passed')} | {err} | {case.get('allclose')} |")
    return lines


def measured_section(run: Run) -> list[str]:
    lines = ["## Measured on the GPU", ""]
    if run.verify is None:
        return lines + ["Not measured: " + (f"GPU stages not run ({run.config.gpu_skip_reason})." if not run.config.gpu
                                            else "the GPU evaluation did not complete (see 50_evaluate.log)."), ""]
    env = run.verify.get("environment", {})
    lines += [f"Device: {env.get('gpu', '?')}, torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}.", "",
              "Verification (rule: error vs the float64 model ≤ "
              f"{run.verify.get('settings', {}).get('tolerance_factor', 2)}× eager fp32's error + a tiny floor; "
              "NaN never passes; outputs poisoned before each run; train-mode buffers compared too):", ""]
    lines += _verify_table(run.verify)
    lines.append("")
    if run.bench:
        st = run.bench.get("settings", {})
        lines += [f"Timing: median of {st.get('trials')} calls per variant, CUDA events, L2 flushed before each call, "
                  f"variants interleaved, {st.get('warmup')} warm-up calls.", "",
                  "| variant | median | p10–p90 | peak memory of the forward |", "|---|---|---|---|"]
        for name, v in run.bench.get("variants", {}).items():
            if v.get("status") != "ok":
                lines.append(f"| {name} | {v.get('status')}: {v.get('reason')} | | |")
                continue
            lines.append(f"| {name} | {_ms(v.get('median_ms'))} | {_ms(v.get('p10_ms'))} – {_ms(v.get('p90_ms'))} | "
                         f"{_mib(v.get('peak_bytes'))} |")
        c = run.cost
        lines += ["", f"Predicted: eager {c.eager_s * 1e3:.3f} ms, fuseforge {c.plan_s * 1e3:.3f} ms "
                  f"({c.speedup:.2f}x); measured {_x(run.bench.get('speedup', {}).get('vs_eager'))}.", ""]
    return lines
