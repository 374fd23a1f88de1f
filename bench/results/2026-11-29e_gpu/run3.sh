#!/usr/bin/env bash
# Third command of the twenty-fourth session (one H200, ~520 s): the shifted-descriptor lab again after its rework
# (bands of a compile-time number of 128-position chunks, unrolled; two accumulator sets overlapping a chunk's
# epilogue with the next chunk's wgmmas; the next band's copy in flight; float2 stores; a spatial-sum form), then
# Nsight Compute on two of its kernels on the 67/87 shape, then the GPU fuzz campaign at 6011715 for the time left
# (copy $OUT/fuzz.json back to .shared/s22/fuzz.json).
# carry [".shared/s22"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29e_gpu/run3.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; T0=$(date +%s); D=/tmp/diag; mkdir -p $D
LAB=dev/kernels/conv_wgmma_shift/bench_conv_shift.py
timeout 260 $PY $LAB --reps 15 --out $OUT/conv_shift.json > $D/conv_shift.log 2>&1
echo "conv_shift lab exit $? at $(( $(date +%s) - T0 )) s"
grep -E "^odd|^  |^[0-9]|rror" $D/conv_shift.log | cut -c1-240 | tail -70
for v in pipe_ahead:4:1 shiftp:4:1; do
  timeout 90 ncu --clock-control none -k regex:conv_shift_kernel -c 1 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      $PY $LAB --once $v > $D/ncu_${v//:/_}.txt 2>&1
  echo "ncu $v exit $? at $(( $(date +%s) - T0 )) s"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Stall|One or More" $D/ncu_${v//:/_}.txt | head -14
done
tar czf $OUT/diag.tgz -C /tmp diag
LEFT=$(( 520 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
