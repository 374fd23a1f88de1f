#!/usr/bin/env bash
# Run 3 of 2026-11-29d (one H200, ~520 s): 1. the lab of the few-channel direct convolution on tensor cores (3xTF32,
# wgmma with A from registers, dev/kernels/conv_wgmma_rs/) against the FFMA direct kernel and cuDNN, odd cases
# against float64 first; 2. the GPU fuzz campaign at 6011715 for the time left.
# carry [".shared/s22"]; `bash bench/results/2026-11-29d_gpu/run3.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; T0=$(date +%s)
timeout 200 $PY dev/kernels/conv_wgmma_rs/bench_conv_rs.py --reps 15 --out $OUT/conv_rs.json > $OUT/conv_rs.log 2>&1
echo "conv_rs lab exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^odd|^[0-9]|ptxas info.*Used|Error|error" $OUT/conv_rs.log \
    | cut -c1-220 | tail -20
LEFT=$(( 515 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
