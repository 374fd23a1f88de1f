#!/usr/bin/env bash
# Prepared at the end of the twentieth session for the next one's first command (one H200, ~350-490 s):
# the GPU tests written without a GPU (two builds of one GEMM unit in one process; the tensor-core conv kernel's
# 256-pixel tiles, channel reductions, norm statistics and clusters of two against float64), s21_run2.sh then times
# the tiles and clusters in the lab.
# carry [".shared/problems", ".shared/s21_run1.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev
CONVS="$KB/17_*.py $KB/32_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py"
for w in 0 1; do (cd tests && timeout 110 ../$PY -c "import test_gemm_kernels as t; t.twin_gemm_extensions($w)") & done; wait
timeout 200 $PY -m pytest -v -n 6 -p no:cacheprovider -rfE -m gpu tests/test_gemm_kernels.py tests/test_conv_igemm_kernels.py \
    -k "two_builds or (tensor_core and not clusters)" > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -6
timeout 150 $PY -m pytest -v -n 2 -p no:cacheprovider -rfE -m gpu tests/test_conv_igemm_kernels.py -k clusters \
    > $OUT/gpu_tests_clusters.log 2>&1
echo "cluster GPU tests exit $? (124: timed out, a hang)"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu_tests_clusters.log | tail -4
