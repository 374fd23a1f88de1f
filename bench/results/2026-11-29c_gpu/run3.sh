#!/usr/bin/env bash
# Run 3 of 2026-11-29c (one H200): the tensor-core conv kernel's epilogue channel by channel (store_tile: one 64-bit
# product a channel, a channel's operand loaded once for the thread's rows) and the transposing tiles' channel quads
# (16-byte accesses on the channels-last side where only C is a multiple of 4).
# 1. GPU tests of both against float64 / torch on odd shapes; 2. the TF32 lab on 2026-11-29b run 2's six convolutions
# (rule, cl-4x1: compare with run2_tf32_m256_f1237dc.json); 3. the 3xTF32 lab on 78, 87, 43; 4. the tiles lab on
# odd spatial sizes, with and without channel quads.   carry [".shared/problems"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev; T0=$(date +%s)
timeout 190 $PY -m pytest -v -n 6 -p no:cacheprovider -rfE -m gpu tests/test_conv_igemm_kernels.py \
    tests/test_conv_split_kernels.py tests/test_conv_transposed_kernels.py tests/test_pointwise_tiles.py \
    tests/test_layout.py tests/test_channels.py > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -8
CONVS="$KB/17_*.py $KB/32_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py $KB/61_*.py"
timeout 150 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants rule,cl-4x1 --jobs 16 --reps 15 \
    --out $OUT/tf32.json > $OUT/tf32.log 2>&1
echo "tf32 lab exit $? at $(( $(date +%s) - T0 )) s"; grep "^tf32_" $OUT/tf32.log | cut -c1-240 | tail -14
timeout 120 $PY dev/kernels/conv_igemm/bench_split.py $KB/78_*.py $KB/87_*.py $KB/43_*.py --variants rule --jobs 16 \
    --reps 15 --out $OUT/split.json > $OUT/split.log 2>&1
echo "3xtf32 lab exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\s*$" $OUT/split.log | cut -c1-240 | tail -6
timeout 110 $PY dev/kernels/bench_tiles.py --shapes "16,128,47,95,95;128,64,127,127;64,64,128,128" \
    --variants nochannelquads --reps 20 --out $OUT/tiles.json > $OUT/tiles.log 2>&1
echo "tiles lab exit $? at $(( $(date +%s) - T0 )) s"; tail -5 $OUT/tiles.log | cut -c1-200
echo "total $(( $(date +%s) - T0 )) s"
