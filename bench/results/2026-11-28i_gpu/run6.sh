#!/usr/bin/env bash
# Nsight Compute on the 3xTF32 kernel (nvidia-h200): 87's 8-channel convolution (8-channel chunks, 4x1) against 52's
# 64-channel one (32-channel chunks, the rule): what limits the 8-channel form. carry [".shared/problems", ".shared/s19_run6.sh"].
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R
# build first (outside ncu), then profile the calls
timeout 200 $PY dev/kernels/conv_igemm/bench_split.py $KB/87_Conv2d_Subtract_Subtract_Mish.py $KB/52_Conv2d_Activation_BatchNorm.py \
  --variants rule --once --jobs 4 > $R/build.log 2>&1
echo "build exit $? at $(( $(date +%s) - T0 )) s"; tail -3 $R/build.log | cut -c1-200
timeout 300 ncu --clock-control none -k regex:conv_igemm_kernel -c 2 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section InstructionStats --section LaunchStats --csv --page details $PY dev/kernels/conv_igemm/bench_split.py \
  $KB/87_Conv2d_Subtract_Subtract_Mish.py $KB/52_Conv2d_Activation_BatchNorm.py --variants rule --once --jobs 4 \
  > $R/ncu_split.csv 2> $R/ncu_split.err
echo "ncu exit $? at $(( $(date +%s) - T0 )) s"; wc -l $R/ncu_split.csv; tail -3 $R/ncu_split.err | cut -c1-200
grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction)"' $R/ncu_split.csv | cut -d, -f1,5,12-16 | head -30
cp $R/ncu_split.csv $R/build.log "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
