#!/usr/bin/env bash
# Prepared at the end of the twentieth session for the next one's first command (one H200, ~330 s):
# the GPU tests written without a GPU (two builds of one GEMM unit in one process; the 256-pixel conv tiles against
# float64), then the 256-pixel TF32 tiles in the lab on the six convolutions of run 1 (2026-11-29_gpu).
# carry [".shared/problems", ".shared/s21_run1.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev
for w in 0 1; do (cd tests && timeout 110 ../$PY -c "import test_gemm_kernels as t; t.twin_gemm_extensions($w)") & done; wait
timeout 200 $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_gemm_kernels.py -k "two_builds or tensor_core" \
    tests/test_conv_igemm_kernels.py > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -8
timeout 300 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $KB/17_*.py $KB/32_*.py $KB/52_*.py \
    $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py --variants rule,cl-4x1,m256-4x1,m256-3x1,m256-p \
    --jobs 16 --reps 15 --out $OUT/tf32_m256.json > $OUT/tf32_m256.log 2>&1
echo "m256 variants exit $?"; grep -v "^\s*$" $OUT/tf32_m256.log | grep "^tf32_" | cut -c1-300 | tail -30
