#!/usr/bin/env bash
# Prepared at the end of the twenty-first session (one H200, ~520 s). carry [".shared/problems"];
# `FUSEFORGE_COMMIT=<HEAD> bash bench/results/2026-11-29b_gpu/next_s22_run1.sh`.
# 1. The suite at HEAD on 61 and 77 (their tensor-core conv without the norm statistics again: expect b939728's
#    1.785 / 3.561 ms) and on 20, 42 and 100 (conv models the cost model mispredicts by 33-133 %).
# 2. Per-kernel times of ModelNew against eager and compile (profile_kernels.py --new) for the five conv models
#    outside +-25 % in dev/cost_replay.py: 72 and 52 (ModelNew of f1237dc, plans unchanged since), 20, 42, 100 (the
#    suite's ModelNew of step 1).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/.shared/problems/kernelbench; T0=$(date +%s)
R=bench/results/2026-11-29b_gpu; mkdir -p out/suite .shared/s22/models
for n in 20 42 61 77 100; do cp $KB/${n}_*.py .shared/s22/models/; done
NEW0=/tmp/new0; mkdir -p $NEW0; tar xzf $R/model_new_52_72_f1237dc.tgz -C $NEW0  # 72's and 52's ModelNew of f1237dc
FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown} timeout 300 $PY -m fuseforge suite .shared/s22/models \
    --db out/suite/results.sqlite > $OUT/suite.log 2>&1
echo "suite exit $? at $(( $(date +%s) - T0 )) s"; grep -E ": (correct|incorrect|failed)" $OUT/suite.log | cut -c1-160
$PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" \
    out/suite/results.sqlite $OUT/results.sqlite
NEW=(); MODELS=()
for n in 20 42 100; do
    f=$(ls out/suite/results_out/*/${n}_*/model_new.py 2>/dev/null | head -1)
    [ -n "$f" ] && { MODELS+=($KB/${n}_*.py); NEW+=("$f"); }
done
timeout 230 $PY dev/kernels/profile_kernels.py $KB/72_*.py $KB/52_*.py "${MODELS[@]}" --new $NEW0/model_new_72_f1237dc.py \
    $NEW0/model_new_52_f1237dc.py "${NEW[@]}" --out $OUT/kernels.json > $OUT/kernels.log 2>&1
echo "profile exit $? at $(( $(date +%s) - T0 )) s"; tail -40 $OUT/kernels.log | cut -c1-200
(cd out/suite && find results_out -path '*torch_extensions*' -prune -o -type f -size -2M \( -name '*.json' -o \
    -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name 'model_new.py' \) -print | tar czf $OUT/jobs.tgz -T -)
echo "total $(( $(date +%s) - T0 )) s"
