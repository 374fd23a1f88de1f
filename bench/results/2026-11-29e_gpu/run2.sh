#!/usr/bin/env bash
# Second command of the twenty-fourth session (one H200, ~560 s): the shifted-descriptor few-channel tensor-core
# conv lab (dev/kernels/conv_wgmma_shift: odd cases against float64, then the 8-channel problem shapes at band
# heights 1, 2, 4, both variants, against the FFMA direct kernel and cuDNN), then the GPU fuzz campaign at 6011715
# for the time left (copy $OUT/fuzz.json back to .shared/s22/fuzz.json).
# carry [".shared/s22"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29e_gpu/run2.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; T0=$(date +%s)
timeout 200 $PY dev/kernels/conv_wgmma_shift/bench_conv_shift.py --reps 15 --out $OUT/conv_shift.json > /tmp/conv_shift.log 2>&1
echo "conv_shift lab exit $? at $(( $(date +%s) - T0 )) s"
grep -E "^odd|^  |^[0-9]|rror|Used [0-9]+ registers" /tmp/conv_shift.log | cut -c1-240 | tail -60
gzip -c /tmp/conv_shift.log > $OUT/conv_shift.log.gz
LEFT=$(( 540 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
cp /tmp/fuzz_run/fuzz/gpu_lease.jsonl $OUT/ 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
