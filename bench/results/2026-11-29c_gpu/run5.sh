#!/usr/bin/env bash
# Run 5 of 2026-11-29c (one H200, ~150 s): the channel kernels' statistics of a mean near zero (the GPU fuzz campaign's
# fuzz_040000: a batch norm of a batch norm's output, its running mean 20x eager's error after 12 calls). Three lanes:
# A. the channel kernels' GPU tests at this commit (spread, far from zero, near zero);
# B. the near-zero test with the channel kernels of f3ced80 (.shared/s22/channel_f3ced80.cu): it must fail there;
# C. optimize + check (as the fuzz campaign runs them) on fuzz_040000 (.shared/s22/fuzz_040000.py).
# carry [".shared/s22"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; T0=$(date +%s)
rm -rf /tmp/old /tmp/lane_c && mkdir -p /tmp/old /tmp/lane_c/pkg
cp -r fuseforge tests pyproject.toml /tmp/old/ && cp .shared/s22/channel_f3ced80.cu /tmp/old/fuseforge/families/channel_norms/channel.cu
cp -r fuseforge /tmp/lane_c/pkg/
( cd /tmp/lane_c && export PYTHONPATH=/tmp/lane_c/pkg TORCH_EXTENSIONS_DIR=/tmp/ext_c
  timeout 150 $PY -m fuseforge optimize $REPO/.shared/s22/fuzz_040000.py -o out --no-compile > $OUT/c_optimize.log 2>&1
  echo "optimize exit $?" >> $OUT/c_optimize.log
  timeout 50 $PY -m fuseforge check $REPO/.shared/s22/fuzz_040000.py out/model_new.py --json $OUT/c_check.json \
      --no-compile --trials 10 --warmup 2 > $OUT/c_check.log 2>&1
  echo "check exit $?" >> $OUT/c_check.log; cp out/report.md $OUT/c_report.md 2>/dev/null ) &
( cd /tmp/old && TORCH_EXTENSIONS_DIR=/tmp/ext_b timeout 170 $PY -m pytest -v -p no:cacheprovider -rfE -m gpu \
      tests/test_channels.py -k near-zero > $OUT/b_old_near_zero.log 2>&1; echo "old exit $?" >> $OUT/b_old_near_zero.log ) &
TORCH_EXTENSIONS_DIR=/tmp/ext_a timeout 170 $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_channels.py \
    > $OUT/a_gpu_tests.log 2>&1
echo "A exit $? at $(( $(date +%s) - T0 )) s"; grep -E "PASSED|FAILED|passed|failed" $OUT/a_gpu_tests.log | tail -5
wait
echo "B:"; grep -E "PASSED|FAILED|passed|failed|old exit" $OUT/b_old_near_zero.log | tail -4
grep -E "^E .*error|near-zero.*error" $OUT/b_old_near_zero.log | head -5 | cut -c1-220
echo "C:"; tail -3 $OUT/c_optimize.log | cut -c1-200; tail -3 $OUT/c_check.log | cut -c1-300
echo "total $(( $(date +%s) - T0 )) s"
