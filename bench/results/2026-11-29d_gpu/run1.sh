#!/usr/bin/env bash
# The first command of the twenty-third session (one H200, ~560 s): next_s23_run1.sh's first two parts, then the GPU
# fuzz campaign restarted at the commit they test, if its GPU tests pass.
# 1. The channel and row kernels' GPU tests (the columns path's double sums of 5fa2986 had not run on a GPU).
# 2. The TF32 conv lab's two-block and persistent variants after the channel-by-channel epilogue.
# 3. The fuzz campaign with the package of $FROZEN (.shared/s22/ff_frozen.tgz), for the time that is left.
# carry [".shared/problems", ".shared/s22"]; `FROZEN=6011715 bash bench/results/2026-11-29d_gpu/run1.sh` (as run; the
# record of 2026-11-29d names it next_s23_run1b.sh from bench/results/2026-11-29c_gpu, where it was written)
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; KB=.shared/problems/kernelbench; DEV=.shared/problems/dev; T0=$(date +%s)
timeout 170 $PY -m pytest -v -n 4 -p no:cacheprovider -rfE -m gpu tests/test_channels.py tests/test_rows.py \
    > $OUT/gpu_tests.log 2>&1
TESTS=$?
echo "GPU tests exit $TESTS at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -8
CONVS="$KB/17_*.py $KB/52_*.py $DEV/conv2d_channelmin_tanh.py $KB/43_*.py"
timeout 150 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $CONVS --variants rule,cl-4x1,cl-3x2,cl-4x2,p,cl-p4x1 \
    --jobs 16 --reps 15 --out $OUT/tf32_blocks.json > $OUT/tf32_blocks.log 2>&1
echo "tf32 lab exit $? at $(( $(date +%s) - T0 )) s"; grep "^tf32_" $OUT/tf32_blocks.log | cut -c1-200 | tail -24
LEFT=$(( 540 - ($(date +%s) - T0) - 30 ))
if [ $TESTS -eq 0 ] && [ $LEFT -gt 60 ]; then
    FROZEN=$FROZEN SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
else echo "no fuzz: tests exit $TESTS, $LEFT s left"; fi
echo "total $(( $(date +%s) - T0 )) s"
