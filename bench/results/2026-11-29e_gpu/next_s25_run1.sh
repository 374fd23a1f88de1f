#!/usr/bin/env bash
# Prepared at the end of the twenty-fourth session (one H200, ~560 s):
# 1. the GPU test of the generated conv kernels' spatial-sums form, which since a822b97 holds two shifted-tap kernels
#    (families/conv/shift.cuh, --every-kernel plans only until this passes), then `optimize --every-kernel` on 67
#    (its convolution + GELU + global mean as one shifted-tap kernel: the end-to-end time against 3.275 ms at f1237dc);
# 2. the shifted-descriptor lab with the changes made after run 3 (every tap's small products first; stores through a
#    per-warp shared-memory stage: the `_stage` variants; two warpgroups a block: `*2*`), ncu on `pipe_stage`;
# 3. the GPU fuzz campaign at 6011715 for the time left (copy $OUT/fuzz.json back to .shared/s22/fuzz.json).
# First, on this machine (and `mkdir -p .shared && cp -r ../shared/problems .shared/` if .shared/problems is missing):
#   mkdir -p .shared/s22
#   [ -f .shared/s22/fuzz.json ] || cp bench/results/2026-11-29e_gpu/fuzz_6011715.json .shared/s22/fuzz.json
#   [ -f .shared/s22/ff_frozen.tgz ] || git archive 6011715 fuseforge | gzip > .shared/s22/ff_frozen.tgz
# carry [".shared/s22", ".shared/problems"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29e_gpu/next_s25_run1.sh`
# What to read: the odd cases' worst error of `shift`/`pipe*` (tap order changed: ~1.3e-6 expected, was 3e-6), and
# whether `pipe_stage`/`pipe_ahead_stage` beat the FFMA kernel on the three shapes (0.697 / 2.624 / 5.782 ms).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; T0=$(date +%s); D=/tmp/diag; mkdir -p $D
timeout 130 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_conv_kernels.py -k spatial_sums > $D/gpu_tests.log 2>&1
echo "spatial-sums GPU test exit $? at $(( $(date +%s) - T0 )) s"; tail -3 $D/gpu_tests.log
timeout 140 $PY -m fuseforge optimize .shared/problems/kernelbench/67_Conv2d_GELU_GlobalAvgPool.py --every-kernel \
    -o /tmp/o67 > $D/optimize67.log 2>&1
echo "optimize 67 --every-kernel exit $? at $(( $(date +%s) - T0 )) s"; cp /tmp/o67/report.md $D/report67.md 2>/dev/null
grep -E "^\| (eager|compile|candidate) |correct|incorrect|Speedup" /tmp/o67/report.md 2>/dev/null | head -8
LAB=dev/kernels/conv_wgmma_shift/bench_conv_shift.py
timeout 230 $PY $LAB --reps 15 --out $OUT/conv_shift.json > $D/conv_shift.log 2>&1
echo "conv_shift lab exit $? at $(( $(date +%s) - T0 )) s"
grep -E "^odd|^  |^[0-9]|rror" $D/conv_shift.log | cut -c1-240 | tail -80
timeout 60 ncu --clock-control none -k regex:conv_shift_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
    $PY $LAB --once pipe_stage:2:1 > $D/ncu_pipe_stage_2_1.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - T0 )) s"
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|No Eligible" $D/ncu_pipe_stage_2_1.txt
tar czf $OUT/diag.tgz -C /tmp diag
LEFT=$(( 550 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
