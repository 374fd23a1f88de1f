#!/usr/bin/env bash
# The 256-pixel and cluster GPU tests again after the shared-memory fix (the rule's 6 stages did not fit 256-pixel
# tiles of 64 channels: "invalid argument"), then the TF32 conv lab: 256-pixel tiles, then clusters of two.
# carry [".shared/problems", ".shared/s21_run2.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev
CONVS="$KB/17_*.py $KB/32_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py"
timeout 150 $PY -m pytest -v -n 3 -p no:cacheprovider -rfE -m gpu tests/test_conv_igemm_kernels.py \
    -k "256_pixels or clusters" > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $? (124: timed out, a hang)"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -5
timeout 200 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants rule,cl-4x1,m256-4x1,m256-3x1,m256-p \
    --jobs 16 --reps 15 --out $OUT/tf32_m256.json > $OUT/tf32_m256.log 2>&1
echo "m256 variants exit $?"; grep "^tf32_" $OUT/tf32_m256.log | cut -c1-260 | tail -30
timeout 150 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants c2-4x1,c2-m256-4x1,c2-m256-3x1 \
    --jobs 16 --reps 15 --out $OUT/tf32_c2.json > $OUT/tf32_c2.log 2>&1
echo "cluster variants exit $?"; grep "^tf32_" $OUT/tf32_c2.log | cut -c1-260 | tail -18
