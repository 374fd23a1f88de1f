#!/usr/bin/env bash
# The 3xTF32 conv kernel, persistent, on one GPU (nvidia-h200). carry [".shared/problems", ".shared/s19_run3.sh"].
#  1. the conv families' GPU tests (3xTF32 forms against float64; TF32 and transposed forms after the change)
#  2. the lab: bench_split.py on 87's and 78's convolutions, variants rule / 3x1 / 4x1
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R
nvidia-smi -L
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_split_kernels.py tests/test_conv_igemm_kernels.py \
  tests/test_conv_transposed_kernels.py > $R/gpu_tests.log 2>&1
echo "gpu tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|Error|error [0-9]" $R/gpu_tests.log | tail -12
timeout 360 $PY dev/kernels/conv_igemm/bench_split.py $KB/87_Conv2d_Subtract_Subtract_Mish.py \
  $KB/78_ConvTranspose3d_Max_Max_Sum.py --variants rule,3x1,4x1 --jobs 12 --out $R/split.json > $R/split.log 2>&1
echo "bench_split exit $? at $(( $(date +%s) - T0 )) s"; cut -c1-400 $R/split.log | tail -12
(cd /tmp && tar czf "$OUT/run3.tgz" --exclude='*torch_extensions*' --exclude='*.so' --exclude='*.o' r)
cp $R/split.json "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
