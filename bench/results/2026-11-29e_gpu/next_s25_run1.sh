#!/usr/bin/env bash
# Prepared at the end of the twenty-fourth session (one H200, ~540 s): the shifted-descriptor lab with the changes
# made after run 3 (every tap's small products first; stores through a per-warp shared-memory stage: the `_stage`
# variants), then the GPU fuzz campaign at 6011715 for the time left (copy $OUT/fuzz.json back to
# .shared/s22/fuzz.json). First, on this machine:
#   mkdir -p .shared/s22
#   [ -f .shared/s22/fuzz.json ] || cp bench/results/2026-11-29e_gpu/fuzz_6011715.json .shared/s22/fuzz.json
#   [ -f .shared/s22/ff_frozen.tgz ] || git archive 6011715 fuseforge | gzip > .shared/s22/ff_frozen.tgz
# carry [".shared/s22"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29e_gpu/next_s25_run1.sh`
# What to read: the odd cases' worst error of `shift`/`pipe*` (tap order changed: ~1.3e-6 expected, was 3e-6), and
# whether `pipe_stage`/`pipe_ahead_stage` beat the FFMA kernel on the three shapes (0.697 / 2.624 / 5.782 ms).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; T0=$(date +%s); D=/tmp/diag; mkdir -p $D
LAB=dev/kernels/conv_wgmma_shift/bench_conv_shift.py
timeout 240 $PY $LAB --reps 15 --out $OUT/conv_shift.json > $D/conv_shift.log 2>&1
echo "conv_shift lab exit $? at $(( $(date +%s) - T0 )) s"
grep -E "^odd|^  |^[0-9]|rror" $D/conv_shift.log | cut -c1-240 | tail -80
timeout 90 ncu --clock-control none -k regex:conv_shift_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
    $PY $LAB --once pipe_stage:2:1 > $D/ncu_pipe_stage_2_1.txt 2>&1
echo "ncu exit $? at $(( $(date +%s) - T0 )) s"
grep -E "Duration|Compute \(SM\) Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|No Eligible" $D/ncu_pipe_stage_2_1.txt
tar czf $OUT/diag.tgz -C /tmp diag
LEFT=$(( 540 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
