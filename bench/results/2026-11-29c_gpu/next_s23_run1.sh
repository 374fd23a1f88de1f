#!/usr/bin/env bash
# Prepared at the end of the twenty-second session (one H200, ~430 s). carry [".shared/problems"];
# `bash bench/results/2026-11-29c_gpu/next_s23_run1.sh`.
# 1. The channel kernels' GPU tests at HEAD: the columns path's double sums (5fa2986) have not run on a GPU; the
#    near-zero mode must pass on [2, 3], [3, 1], [147, 5], [2, 3, 1, 1], [2, 3, 1, 1, 1] too. With the row kernels'.
# 2. The TF32 conv lab after the channel-by-channel epilogue: two blocks an SM and persistent launches, which did not
#    pay while the epilogue took half the time (2026-11-29 and 29b); one block's epilogue may now hide under the other's
#    products. Compare with run3_tf32_6ce0d21.json (rule, cl-4x1).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev; T0=$(date +%s)
timeout 200 $PY -m pytest -v -n 2 -p no:cacheprovider -rfE -m gpu tests/test_channels.py tests/test_rows.py \
    > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -8
CONVS="$KB/17_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py"
timeout 150 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants rule,cl-4x1,cl-3x2,cl-4x2,p,cl-p4x1 \
    --jobs 16 --reps 15 --out $OUT/tf32_blocks.json > $OUT/tf32_blocks.log 2>&1
echo "tf32 lab exit $? at $(( $(date +%s) - T0 )) s"; grep "^tf32_" $OUT/tf32_blocks.log | cut -c1-200 | tail -24
# 3. The tiles over odd spatial sizes: the single-element paths compiled for more blocks an SM (they run at 8, the quads
#    path at 16), against the tiles before the channel quads. Compare with run3_tiles_6ce0d21.json.
timeout 100 $PY dev/kernels/bench_tiles.py --shapes "16,128,47,95,95;128,64,127,127" \
    --variants nochannelquads,minblocks12,minblocks16 --reps 20 --out $OUT/tiles_blocks.json > $OUT/tiles_blocks.log 2>&1
echo "tiles lab exit $? at $(( $(date +%s) - T0 )) s"; tail -4 $OUT/tiles_blocks.log | cut -c1-200
echo "total $(( $(date +%s) - T0 )) s"
