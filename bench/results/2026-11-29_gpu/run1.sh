#!/usr/bin/env bash
# Session 20, command 1 (one H200): the conv kernels' GPU tests on the current igemm.cuh (the restructure and the
# kPersistent template parameter), 78's 3xTF32 conv in the lab, then the TF32 form's persistent / two-block variants
# against cuDNN channels-last on TF32-class convolutions. carry [".shared/problems", ".shared/s20_run1.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$PY -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
timeout 240 $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_conv_split_kernels.py \
    tests/test_conv_igemm_kernels.py tests/test_conv_transposed_kernels.py > $OUT/gpu_tests.log 2>&1
echo "conv GPU tests exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -12
timeout 90 $PY dev/kernels/conv_igemm/bench_split.py $KB/78_*.py --variants rule --reps 10 --out $OUT/split78.json \
    > $OUT/split78.log 2>&1
echo "split 78 exit $?"; grep -v "^\s*$" $OUT/split78.log | tail -3 | cut -c1-400
timeout 300 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $KB/17_*.py $KB/32_*.py $KB/52_*.py \
    $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py --variants rule,p,p3x2,cl-p3x2,cl-p4x1,cl-4x2 --jobs 16 \
    --reps 15 --out $OUT/tf32_variants.json > $OUT/tf32_variants.log 2>&1
echo "tf32 variants exit $?"; grep -v "^\s*$" $OUT/tf32_variants.log | cut -c1-330 | tail -45
