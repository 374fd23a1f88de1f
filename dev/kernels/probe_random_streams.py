"""Do random ops draw the same values for float32 and float64 tensors, and for eager's module call vs the
ATen op the captured graph holds? (A seeded ModelNew reproduces eager only if they do; the float64 truth
of a model with random ops is meaningful only if its draws match the float32 run's.)

    python dev/kernels/probe_random_streams.py --out results.json
"""

import argparse
import json

import torch
import torch.nn.functional as F


def draws(device: str) -> dict:
    shape, p, found = (64, 33, 17), 0.3, {}
    x32 = torch.randn(shape, device=device)
    x64 = x32.double()

    def same(fa, fb, label):
        torch.manual_seed(123)
        a = fa()
        torch.manual_seed(123)
        b = fb()
        a, b = (a[0] if isinstance(a, tuple) else a), (b[0] if isinstance(b, tuple) else b)
        found[label] = {"equal_masks": bool(((a != 0) == (b != 0)).all()),
                        "max_abs_diff": float((a.double() - b.double()).abs().max())}

    same(lambda: F.dropout(x32, p, True), lambda: torch.ops.aten.native_dropout.default(x32, p, True),
         "dropout: F.dropout vs aten.native_dropout, float32")
    same(lambda: F.dropout(x32, p, True), lambda: F.dropout(x64, p, True), "dropout: float32 vs float64")
    same(lambda: torch.rand_like(x32), lambda: torch.rand_like(x64), "rand_like: float32 vs float64")
    same(lambda: torch.randn_like(x32), lambda: torch.randn_like(x64), "randn_like: float32 vs float64")
    same(lambda: torch.bernoulli(torch.sigmoid(x32)), lambda: torch.bernoulli(torch.sigmoid(x64)),
         "bernoulli: float32 vs float64")
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    result = {"torch": torch.__version__, "cpu": draws("cpu")}
    if torch.cuda.is_available():
        result["gpu"] = torch.cuda.get_device_name()
        result["cuda"] = draws("cuda")
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        open(args.out, "w").write(text)


if __name__ == "__main__":
    main()
