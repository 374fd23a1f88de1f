#!/usr/bin/env bash
# Prepared at the end of the twentieth session (one H200, ~320 s): the TF32 conv lab on the six convolutions of
# 2026-11-29_gpu's run 1: 256-pixel tiles, then clusters of two (each step with its own timeout: a hang stops
# only its own). carry [".shared/problems", ".shared/s21_run2.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev
CONVS="$KB/17_*.py $KB/32_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py"
timeout 200 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants rule,cl-4x1,m256-4x1,m256-3x1,m256-p \
    --jobs 16 --reps 15 --out $OUT/tf32_m256.json > $OUT/tf32_m256.log 2>&1
echo "m256 variants exit $?"; grep "^tf32_" $OUT/tf32_m256.log | cut -c1-260 | tail -30
timeout 150 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants c2-4x1,c2-m256-4x1,c2-m256-3x1 \
    --jobs 16 --reps 15 --out $OUT/tf32_c2.json > $OUT/tf32_c2.log 2>&1
echo "cluster variants exit $?"; grep "^tf32_" $OUT/tf32_c2.log | cut -c1-260 | tail -18
