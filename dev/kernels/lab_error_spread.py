"""How far apart two honest fp32 computations' errors vs float64 fall, draw by draw.

The verifier bounds a candidate's RMS error vs float64 by 2 x eager's on the same inputs. Where an output's error is
carried by a few elements (a reciprocal of a convolution's output at inputs x 2^20: the error there is ~1/y^2, so the
few smallest |y| hold all of it), the ratio of two honest computations' RMS errors is a ratio of a few random
values. This lab draws many inputs of the verifier's kind, computes the output with eager, with a candidate ModelNew
and in float64, and records per draw both errors, their ratio, and the number of elements that carry eager's error
(the participation ratio (sum e^2)^2 / sum e^4).

    python dev/kernels/lab_error_spread.py MODEL.py MODEL_NEW.py --scale 1048576 --draws 40 --out spread.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys

import torch


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _outputs(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("candidate")
    parser.add_argument("--scale", type=float, default=2.0 ** 20)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--out", default="spread.json")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ref_module, cand_module = _load(args.model, "spread_model"), _load(args.candidate, "spread_candidate")
    init = ref_module.get_init_inputs()
    torch.manual_seed(0)
    model = ref_module.Model(*init).cuda().eval()
    candidate = cand_module.ModelNew(*init).cuda().eval()
    candidate.load_state_dict(model.state_dict())
    truth_model = ref_module.Model(*init).cuda().eval()
    truth_model.load_state_dict(model.state_dict())
    truth_model.double()
    rows = []
    for draw in range(args.draws):
        torch.manual_seed(1000 + draw)
        inputs = [x.cuda() * args.scale if x.is_floating_point() else x.cuda() for x in ref_module.get_inputs()]
        with torch.no_grad():
            truth = _outputs(truth_model(*[x.double() if x.is_floating_point() else x for x in inputs]))
            eager = _outputs(model(*inputs))
            ours = _outputs(candidate(*inputs))
        for k, (t, e, o) in enumerate(zip(truth, eager, ours)):
            if not t.is_floating_point():
                continue
            err_e, err_o = (e.double() - t).flatten(), (o.double() - t).flatten()
            rms_e, rms_o = err_e.square().mean().sqrt().item(), err_o.square().mean().sqrt().item()
            sq = err_e.square()
            carriers = (sq.sum() ** 2 / sq.square().sum().clamp_min(1e-300)).item()
            rows.append({"draw": draw, "output": k, "eager_err": rms_e, "ours_err": rms_o,
                         "ratio": rms_o / rms_e if rms_e > 0 else None, "eager_carriers": carriers,
                         "truth_rms": t.square().mean().sqrt().item()})
    by_output: dict[int, list] = {}
    for r in rows:
        if r["ratio"] is not None:
            by_output.setdefault(r["output"], []).append(r)
    summary = {}
    for k, rs in by_output.items():
        ratios = sorted(r["ratio"] for r in rs)
        summary[k] = {"draws": len(rs), "ratio_median": statistics.median(ratios), "ratio_max": ratios[-1],
                      "ratio_min": ratios[0], "over_2": sum(x > 2 for x in ratios),
                      "carriers_median": statistics.median(r["eager_carriers"] for r in rs)}
        print(f"output {k}: {summary[k]}")
    json.dump({"scale": args.scale, "summary": summary, "rows": rows, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name()}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
