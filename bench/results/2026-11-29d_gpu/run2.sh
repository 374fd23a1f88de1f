#!/usr/bin/env bash
# Run 2 of 2026-11-29d (one H200, ~560 s): the TF32 tensor-core conv kernel's refitted rule (persistent at 128
# channels a tile, channels-last 3 stages x 2 blocks at 64), then the GPU fuzz campaign at 6011715 for the time left.
# 1. The tensor-core conv kernels' GPU tests (every form against float64 on odd shapes, the NCHW and channels-last
#    paths, transposed, reductions, statistics) at this commit.
# 2. The TF32 lab on the convolutions of 61 and 77 (the transposed 3-D convolutions the product plans on the kernel)
#    and 17: the rule against bt-4x1 (a block a tile: the former rule at 128 channels).
# 3. The suite on 61 and 77 at this commit, eager and compile from the H200 baselines' cache.
# 4. The fuzz campaign with the package of 6011715 (.shared/s22/ff_frozen.tgz, resuming .shared/s22/fuzz.json).
# carry [".shared/problems", ".shared/s22"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29d_gpu/run2.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/.shared/problems/kernelbench; T0=$(date +%s)
timeout 170 $PY -m pytest -v -n 6 -p no:cacheprovider -rfE -m gpu tests/test_conv_igemm_kernels.py \
    tests/test_conv_transposed_kernels.py > $OUT/gpu_tests.log 2>&1
echo "GPU tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $OUT/gpu_tests.log | tail -8
timeout 110 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $KB/61_*.py $KB/77_*.py $KB/17_*.py \
    --variants rule,bt-4x1 --jobs 16 --reps 15 --out $OUT/tf32_rule.json > $OUT/tf32_rule.log 2>&1
echo "tf32 lab exit $? at $(( $(date +%s) - T0 )) s"; grep "^tf32_" $OUT/tf32_rule.log | cut -c1-150
mkdir -p out/suite .shared/s23/models
for n in 61 77; do cp $KB/${n}_*.py .shared/s23/models/; done
cp bench/results/2026-11-29c_gpu/baselines69_h200_torch211.sqlite out/suite/results.sqlite
timeout 150 $PY -m fuseforge suite .shared/s23/models --db out/suite/results.sqlite > $OUT/suite.log 2>&1
echo "suite exit $? at $(( $(date +%s) - T0 )) s"; grep -E ": (correct|incorrect|failed)" $OUT/suite.log | cut -c1-160
$PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
    out/suite/results.sqlite $OUT/results.sqlite
(cd out/suite && find results_out -path '*torch_extensions*' -prune -o -type f -size -2M \( -name '*.json' -o \
    -name '*.md' -o -name '*.txt' -o -name '*.log' \) -print | tar czf $OUT/jobs.tgz -T -)
LEFT=$(( 540 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
