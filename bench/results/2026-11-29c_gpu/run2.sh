#!/usr/bin/env bash
# Prepared at the end of the twenty-first session (one H200, ~200 s). carry [".shared/problems"];
# `bash bench/results/2026-11-29b_gpu/next_s22_run2.sh`.
# Nsight Compute --set full on the TF32 tensor-core conv kernel (17's convolution, channels-last, 4 stages x 1 block),
# exported per SASS instruction: where the warps of a kernel at ~30 % of the tensor rate stall (cuDNN's kernel with the
# same 128 x 128 x 32 tile runs at ~76 %; our 3xTF32 GEMM reaches ~67 %). Neither L2 traffic nor pipeline depth
# explained it (2026-11-29b_gpu).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/.shared/problems/kernelbench; T0=$(date +%s); R=/tmp/ncu; mkdir -p $R
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
