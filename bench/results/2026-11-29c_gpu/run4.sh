#!/usr/bin/env bash
# Run 4 of 2026-11-29c (one H200, ~590 s): 1. the suite at f3ced80 on the conv models whose kernels changed (100 and
# 72: the tiles' channel quads; 78 and 43: the 3xTF32 epilogue; 61 and 77: the TF32 transposed kernel's epilogue);
# 2. the GPU fuzz campaign from the package of f3ced80 (.shared/s22/ff_frozen.tgz) until the command's end.
# carry [".shared/problems", ".shared/s22"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/.shared/problems/kernelbench; T0=$(date +%s)
mkdir -p out/suite .shared/s22c/models
for n in 100 72 78 43 61 77; do cp $KB/${n}_*.py .shared/s22c/models/; done
FUSEFORGE_COMMIT=f3ced80 timeout 290 $PY -m fuseforge suite .shared/s22c/models --db out/suite/results.sqlite \
    > $OUT/suite.log 2>&1
echo "suite exit $? at $(( $(date +%s) - T0 )) s"; grep -E ": (correct|incorrect|failed)" $OUT/suite.log | cut -c1-160
$PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
    out/suite/results.sqlite $OUT/results.sqlite
(cd out/suite && find results_out -path '*torch_extensions*' -prune -o -type f -size -2M \( -name '*.json' -o \
    -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name 'model_new.py' \) -print | tar czf $OUT/jobs.tgz -T -)
LEFT=$(( 575 - ($(date +%s) - T0) ))
echo "fuzz for $LEFT s"
FROZEN=f3ced80 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
echo "total $(( $(date +%s) - T0 )) s"
