"""The measured parts of the report: the status table at its top and the section "Measured on the GPU".

Reads the records written by `fuseforge.evaluate` (50_verify.json, 60_bench.json; schemas in
`fuseforge/evaluate/verify.py` and `bench.py`) and puts the prediction of the cost model next to them. The
per-case details stay in those files; the report gives the verdict, the cases passed, the worst error, the
times and the peak memory.
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


def _predicted(run: Run) -> float | None:
    return run.cost.speedup if run.cost else None


def summary_rows(run: Run) -> list[str]:
    """The status table: the checks' verdicts and the speedup, predicted and (on a GPU) measured."""
    rows = ["| | |", "|---|---|"]
    if run.verify is None:
        gpu = f"not run ({run.config.gpu_skip_reason})" if not run.config.gpu else "did not complete"
        cpu = run.cpu_check
        cpu_text = (cpu.skipped if cpu and cpu.skipped else
                    f"passed (plan and emitted forward vs the model in float64, max relative error {cpu.max_rel_error:.1e})"
                    if cpu and cpu.passed else "failed" if cpu else "not reached")
        return rows + [f"| CPU-side check | {cpu_text} |", f"| GPU verification and benchmark | {gpu} |",
                       f"| expected speedup vs eager (cost model) | {_x(_predicted(run))} |"]
    result = "`model_new.py` (verified)" if run.verified else "none: `40_model_new.py` failed verification"
    reason = f": {run.verify.get('reason')}" if run.verify.get("reason") else ""
    rows += [f"| verdict | **{run.verify.get('verdict')}**{reason} |", f"| result | {result} |"]
    speedup = (run.bench or {}).get("speedup", {})
    return rows + [f"| speedup vs eager (measured / predicted) | {_x(speedup.get('vs_eager'))} / "
                   f"{_x(_predicted(run))} |"]


def _cases(verify: dict) -> str:
    """How many verification cases passed, and over what."""
    cases = verify.get("cases", [])
    magnitudes = set((verify.get("settings") or {}).get("magnitudes") or ())
    ran = [c for c in cases if c.get("passed") is not None]
    main = [c for c in cases if c.get("distribution") not in magnitudes and not c.get("batch")]
    seeds = sorted({c.get("seed") for c in main})
    inputs = "/".join(dict.fromkeys(str(c.get("distribution")) for c in main))
    moved = "/".join(dict.fromkeys(str(c.get("distribution")) for c in cases if c.get("distribution") in magnitudes))
    batches = sorted({c.get("batch") for c in cases if c.get("batch")})
    skipped = [c for c in cases if c.get("skipped")]
    failed = next((c for c in ran if not c.get("passed")), None)
    over_draws = [c for c in ran if c.get("passed") and c.get("redraws")]  # passed by the majority of its draws
    return (f"{sum(bool(c.get('passed')) for c in ran)} of {len(ran)} cases passed (seeds "
            f"{', '.join(map(str, seeds))} × inputs {inputs}" + (f", seed 0 at {moved} magnitudes" if moved else "")
            + "".join(f", batch {b}" for b in batches) + ")"
            + "".join(f"; {c.get('distribution')}{' / batch ' + str(c['batch']) if c.get('batch') else ''} "
                      f"skipped: {c.get('reason')}" for c in skipped)
            + "".join(f"; seed {c.get('seed')} / {c.get('distribution')} passed over its draws, its error on few "
                      f"elements: {c.get('redraws')}" for c in over_draws)
            + (f"; first failure: seed {failed.get('seed')} / {failed.get('distribution')}: {failed.get('reason')}"
               if failed else ""))


def _timing(run: Run) -> list[str]:
    variants = run.bench.get("variants", {})
    lines = ["| variant | median time | peak memory of the forward |", "|---|---|---|"]
    for name, v in variants.items():
        if v.get("status") == "ok":
            lines.append(f"| {name} | {_ms(v.get('median_ms'))} | {_mib(v.get('peak_bytes'))} |")
        elif v.get("status") != "skipped":
            lines.append(f"| {name} | {v.get('status')}: {v.get('reason')} | |")
    s, st = run.bench.get("speedup", {}), run.bench.get("settings", {})
    versus = [f"{_x(s.get(k))} vs {label}" for k, label in (("vs_eager", "eager"), ("vs_compile", "torch.compile"),
                                                           ("vs_compile_max_autotune", "max-autotune"))
              if isinstance(s.get(k), (int, float))]
    eager_error = (run.verify.get("worst") or {}).get("ref_rel_err")
    return lines + ["", f"Medians of {st.get('trials')} calls, L2 flushed. Speedup {', '.join(versus) or '—'}.",
                    *compile_precision(variants, eager_error)]


def compile_precision(variants: dict, eager_error) -> list[str]:
    """A line for each torch.compile variant whose outputs are farther from eager's than 10x eager's own
    error vs float64 (bench.py's deviation; not where eager itself differs between two calls)."""
    lines = []
    for name in ("compile", "compile_max_autotune"):
        v = variants.get(name) or {}
        dev, repeat = v.get("deviation_from_eager"), v.get("eager_repeat_deviation") or 0.0
        if isinstance(dev, float) and isinstance(eager_error, float) and dev > 10 * eager_error and repeat < dev / 10:
            lines.append(f"{name} is less precise than eager here: its outputs differ from eager's by {dev:.1e} of "
                         f"their RMS, where eager's own error vs float64 is {eager_error:.1e} (a lower precision "
                         "class, e.g. a convolution it made channels-last running TF32); its time is not for "
                         "eager's accuracy.")
    return lines


def measured_section(run: Run) -> list[str]:
    lines = ["## Measured on the GPU", ""]
    if run.verify is None:
        return lines + ["Not measured: " + (f"GPU stages not run ({run.config.gpu_skip_reason})." if not run.config.gpu
                                            else "the GPU evaluation did not complete (see 50_evaluate.log)."), ""]
    env = run.verify.get("environment", {})
    factor = run.verify.get("settings", {}).get("tolerance_factor", 2)
    lines += [f"{env.get('gpu', '?')}, torch {env.get('torch', '?')}: **{run.verify.get('verdict')}**, "
              f"{_cases(run.verify)}, each output within {factor}× eager fp32's error vs float64 + a tiny floor. "
              f"Worst: {_worst(run.verify)}; allclose(atol=rtol=1e-4) vs eager: {run.verify.get('allclose')}.", ""]
    if run.bench:
        lines += [*_timing(run), ""]
    return lines
