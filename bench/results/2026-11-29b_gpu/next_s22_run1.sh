#!/usr/bin/env bash
# Prepared at the end of the twenty-first session (one H200, ~450 s). carry [".shared/problems", ".shared/s22",
# ".shared/s22_run1.sh"]. FUSEFORGE_COMMIT=<HEAD> in front.
# 1. 61 and 77 at HEAD (their tensor-core conv without the norm statistics again: expected b939728's 1.785 / 3.561 ms).
# 2. Per-kernel times of 72's and 52's ModelNew (f1237dc; plans unchanged since) against eager and compile: the
#    cost model predicted their plans 25 % and 18 % too fast (dev/cost_replay.py on 2026-11-29b's record).
# 3. Nsight Compute, per SASS instruction, on the TF32 tensor-core conv kernel (17's convolution, channels-last 4x1):
#    where its warps stall (it runs at ~30 % of the tensor rate; neither L2 traffic nor pipeline depth explained it).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/.shared/problems/kernelbench; T0=$(date +%s)
mkdir -p out/suite
FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown} timeout 230 $PY -m fuseforge suite .shared/s22/models \
    --db out/suite/results.sqlite > $OUT/suite.log 2>&1
echo "suite exit $? at $(( $(date +%s) - T0 )) s"; grep -E "correct|incorrect|failed" $OUT/suite.log | head -4 | cut -c1-200
cp out/suite/results.sqlite $OUT/results.sqlite 2>/dev/null
timeout 200 $PY dev/kernels/profile_kernels.py $KB/72_*.py $KB/52_*.py --new .shared/s22/new/72_model_new.py \
    .shared/s22/new/52_model_new.py --out $OUT/kernels_72_52.json > $OUT/kernels_72_52.log 2>&1
echo "profile exit $? at $(( $(date +%s) - T0 )) s"; tail -30 $OUT/kernels_72_52.log | cut -c1-200
R=/tmp/ncu; mkdir -p $R
timeout 120 $PY dev/kernels/conv_igemm/bench_split.py --tf32 $KB/17_*.py --variants cl-4x1 --once --jobs 2 > $R/build.log 2>&1
echo "build exit $? at $(( $(date +%s) - T0 )) s"
timeout 150 ncu --clock-control none -k regex:conv_igemm_kernel -c 1 --set full --import-source no -o $R/ncu17 \
    $PY dev/kernels/conv_igemm/bench_split.py --tf32 $KB/17_*.py --variants cl-4x1 --once --jobs 2 > $R/ncu.log 2>&1
echo "ncu exit $? at $(( $(date +%s) - T0 )) s"; tail -3 $R/ncu.log | cut -c1-200
ncu --import $R/ncu17.ncu-rep --page details --csv > $R/ncu17_details.csv 2>&1
ncu --import $R/ncu17.ncu-rep --page raw --csv > $R/ncu17_raw.csv 2>&1
ncu --import $R/ncu17.ncu-rep --page source --print-source sass --csv > $R/ncu17_sass.csv 2>&1
wc -l $R/*.csv
grep -E '"(Duration|Compute \(SM\) Throughput|L2 Cache Throughput|Warp Cycles Per Issued Instruction|Issue Slots Busy)"' \
    $R/ncu17_details.csv | cut -d, -f12-16 | head
(cd $R && tar czf $OUT/ncu17.tgz *.csv *.log ncu17.ncu-rep)
echo "total $(( $(date +%s) - T0 )) s"
