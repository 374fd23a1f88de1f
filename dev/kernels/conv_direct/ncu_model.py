"""Run one emitted ModelNew's forward and its model's eager forward once each after a warm-up, for Nsight Compute
to compare the direct conv kernel with cuDNN's on the model's own shape.

    ncu --clock-control none -k regex:"conv_direct|conv|fprop" --section SpeedOfLight --section WarpStateStats \\
        --section Occupancy --section ComputeWorkloadAnalysis --section SchedulerStats --section InstructionStats \\
        --csv --page details .venv/bin/python dev/kernels/conv_direct/ncu_model.py MODEL.py MODEL_NEW.py > ncu.csv
"""
import argparse
import importlib.util
import sys

import torch


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("model_new")
args = p.parse_args()
model = _load(args.model, "ncu_model_original")
new = _load(args.model_new, "ncu_model_new")
torch.manual_seed(0)
inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in model.get_inputs()]
ref = model.Model(*model.get_init_inputs()).cuda()
ours = new.ModelNew(*model.get_init_inputs()).cuda()
ours.load_state_dict(ref.state_dict())
with torch.no_grad():
    for _ in range(2):
        ours(*inputs)
        ref(*inputs)
    torch.cuda.synchronize()
print("ran ModelNew and the eager model", file=sys.stderr)
