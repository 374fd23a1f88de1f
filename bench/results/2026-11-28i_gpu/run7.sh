#!/usr/bin/env bash
# Two accumulators a k-tile in the 3xTF32 kernel (5caf7c2) against one (1ec0612, .shared/s19_before.tgz): error and time
# on 78's and 43's convolutions; the 3xTF32 GPU tests. carry [".shared/problems", ".shared/s19_before.tgz", ".shared/s19_run7.sh"].
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R /tmp/before && tar xzf .shared/s19_before.tgz -C /tmp/before
timeout 120 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_split_kernels.py > $R/gpu_tests.log 2>&1
echo "gpu tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|Error|error [0-9]" $R/gpu_tests.log | tail -6
for v in before after; do
  d=$REPO; [ $v = before ] && d=/tmp/before
  (cd $d && timeout 150 $PY dev/kernels/conv_igemm/bench_split.py $KB/78_ConvTranspose3d_Max_Max_Sum.py \
     $KB/43_Conv3d_Max_LogSumExp_ReLU.py --variants rule --reps 10 --jobs 4 --out $R/split7_$v.json > $R/split7_$v.log 2>&1)
  echo "$v exit $? at $(( $(date +%s) - T0 )) s"; grep "^split_" $R/split7_$v.log | cut -c1-330
done
cp $R/split7_*.json $R/split7_*.log $R/gpu_tests.log "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
