"""How far apart two honest fp32 computations' errors vs float64 fall, draw by draw.

The verifier bounds a candidate's RMS error vs float64 by 2 x eager's on the same inputs. Where an output's error is
carried by a few elements (a reciprocal of a convolution's output at inputs x 2^20: the error there is ~1/y^2, so the
few smallest |y| hold all of it), the ratio of two honest computations' RMS errors is a ratio of a few random
values. This lab draws many inputs of the verifier's kind, computes the output with eager, with a candidate ModelNew
and in float64, and records per draw both errors, their ratio, and the number of elements that carry eager's error
(the participation ratio (sum e^2)^2 / sum e^4).

    python dev/kernels/lab_error_spread.py MODEL.py MODEL_NEW.py --distribution large --draws 40 --out spread.json

The draws are the verifier's (harness.draw_inputs at seeds 1000 + k, in the distribution named: "large" is inputs x
2^20), the models its own (harness.build_pair, seed 0), the truth a float64 copy (harness.as_float64).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics

import torch

from fuseforge.evaluate import harness
from fuseforge.evaluate.numerics import carriers


def _forward(model, inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*inputs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("candidate")
    parser.add_argument("--distribution", default="large", help="harness.DISTRIBUTIONS or MAGNITUDES")
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--out", default="spread.json")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    dev = torch.device(args.device)
    progs = harness.load_programs(args.model, args.candidate)
    model, candidate = harness.build_pair(progs, 0, dev)
    model, candidate = model.to(dev).eval(), candidate.to(dev).eval()
    truth_model = harness.as_float64(copy.deepcopy(model))
    rows = []
    for draw in range(args.draws):
        inputs = harness.draw_inputs(progs, 1000 + draw, args.distribution, None, dev)
        truth = _forward(truth_model, [x.double() if x.is_floating_point() else x for x in inputs])
        eager, ours = _forward(model, inputs), _forward(candidate, inputs)
        for k, (t, e, o) in enumerate(zip(truth, eager, ours)):
            if not t.is_floating_point():
                continue
            rms_e, rms_o = ((x.double() - t).square().mean().sqrt().item() for x in (e, o))
            rows.append({"draw": draw, "output": k, "eager_err": rms_e, "ours_err": rms_o,
                         "ratio": rms_o / rms_e if rms_e > 0 else None, "eager_carriers": carriers(e, t),
                         "truth_rms": t.square().mean().sqrt().item()})
    summary = {}
    for k in sorted({r["output"] for r in rows}):
        rs = [r for r in rows if r["output"] == k and r["ratio"] is not None]
        ratios = sorted(r["ratio"] for r in rs)
        summary[k] = {"draws": len(rs), "ratio_median": statistics.median(ratios), "ratio_max": ratios[-1],
                      "ratio_min": ratios[0], "over_2": sum(x > 2 for x in ratios),
                      "carriers_median": statistics.median(r["eager_carriers"] for r in rs)}
        print(f"output {k}: {summary[k]}")
    json.dump({"distribution": args.distribution, "summary": summary, "rows": rows, "torch": torch.__version__,
               "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
