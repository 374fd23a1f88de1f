#!/usr/bin/env bash
# The 3xTF32 conv kernel's instance variants (nvidia-h200). carry [".shared/problems", ".shared/s19_run4.sh"].
# bench_split.py on 87 (2-D, 8 channels), 78 (3-D transposed stride 2, 32), 52 (2-D, 64), 43 (3-D, 32), 100 (3-D
# transposed stride 2, 64): variants rule, 4x1, rule staged, 2x2 staged; the kernels' times from the profiler.
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R
nvidia-smi -L
timeout 540 $PY dev/kernels/conv_igemm/bench_split.py $KB/87_Conv2d_Subtract_Subtract_Mish.py \
  $KB/78_ConvTranspose3d_Max_Max_Sum.py $KB/52_Conv2d_Activation_BatchNorm.py $KB/43_Conv3d_Max_LogSumExp_ReLU.py \
  $KB/100_ConvTranspose3d_Clamp_Min_Divide.py --variants rule,4x1,rules,2x2s --jobs 14 --out $R/split4.json > $R/split4.log 2>&1
echo "bench_split exit $? at $(( $(date +%s) - T0 )) s"; cut -c1-330 $R/split4.log | grep -v "^[0-9]*_" | tail -24
cp $R/split4.json $R/split4.log "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
