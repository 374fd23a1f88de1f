#!/usr/bin/env bash
# Four lanes on nvidia-h200-x4, all ending by END seconds; results packed into a few tgz files in $OUT at the end.
#  A (GPU 0): GPU tests of the rows' pivoted Welford and the few-carrier rule; optimize + check on fuzz 79037, 79004;
#             then GPU fuzz from seed 79500
#  B (GPU 1, 2): the grader's adversarial corpus, two shards; then GPU fuzz from 79700
#  C (GPU 3): own-checks of bmm_scale_softmax_bmm, 56, 95 (ModelNew files of b939728); then GPU fuzz from 79044
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
END=${END:-560}
PY=.venv/bin/python
T0=$(date +%s); R=/tmp/r; mkdir -p $R/a $R/b $R/c out
nvidia-smi -L
left() { echo $(( END - ($(date +%s) - T0) )); }
fz() {  # lane seed: the fuzz campaign on this lane's GPUs until END
  local l; l=$(left); [ "$l" -gt 90 ] || { echo "fuzz $1: no time left"; return; }
  mkdir -p out/fuzz_$1
  timeout -s TERM -k 10 $(( l - 15 )) $PY -m fuseforge fuzz --seed $2 --count 300 --jobs ${3:-10} --out out/fuzz_$1 \
    --timeout 600 --check --no-compile > $R/fuzz_$1.log 2>&1
  echo "fuzz $1 (seed $2) exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\[" $R/fuzz_$1.log | tail -6
}
laneA() {
  export CUDA_VISIBLE_DEVICES=0
  timeout 240 $PY -m pytest -v -m gpu -p no:cacheprovider -rfE tests/test_rows.py tests/test_row_trailing_axes.py \
    tests/test_row_channels.py tests/test_few_carriers.py > $R/a/gpu_tests.log 2>&1
  echo "A: GPU tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $R/a/gpu_tests.log | tail -12
  for m in 079037 079004; do
    timeout 150 $PY -m fuseforge optimize bench/results/2026-11-28g_gpu/fuzz_models/fuzz_$m.py -o $R/a/f$m > $R/a/f$m.log 2>&1
    echo "A: optimize $m exit $? at $(( $(date +%s) - T0 )) s"
    timeout 200 $PY -m fuseforge check bench/results/2026-11-28g_gpu/fuzz_models/fuzz_$m.py $R/a/f$m/model_new.py \
      --json $R/a/f$m/check.json --no-compile --trials 10 --warmup 2 > $R/a/f$m/check.log 2>&1
    echo "A: check $m exit $? at $(( $(date +%s) - T0 )) s: $($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['verdict'], d['reason'], [(c.get('name'), c.get('redraws')) for c in d['cases'] if c.get('redraws')])" $R/a/f$m/check.json 2>&1 | cut -c1-500)"
  done
  rm -rf $R/a/*/torch_extensions* 2>/dev/null
  fz A 79500
}
laneB() {
  ls tests/adversarial/*.py | CUDA_VISIBLE_DEVICES=1 xargs -P 24 -I{} timeout 300 $PY -c "import sys, pathlib; \
from fuseforge.suite.build import build_extension; build_extension(pathlib.Path(sys.argv[1]))" {} > $R/b/corpus_prebuild.log 2>&1
  touch out/corpus_prebuilt; echo "B: prebuilt at $(( $(date +%s) - T0 )) s"
  local l; l=$(( $(left) - 20 ))
  CUDA_VISIBLE_DEVICES=1 OUT=$R/b bash scripts/gpu_session.sh corpus 0/2 $l &
  CUDA_VISIBLE_DEVICES=2 OUT=$R/b bash scripts/gpu_session.sh corpus 1/2 $l
  wait; echo "B: corpus done at $(( $(date +%s) - T0 )) s"
  CUDA_VISIBLE_DEVICES=1,2 fz B 79700 16
}
laneC() {
  export CUDA_VISIBLE_DEVICES=3
  OWN_TGZ=bench/results/2026-11-28g_gpu/suite69_model_new_b939728.tgz OWN_ONLY="bmm_scale 56_ 95_" OUT=$R/c \
    bash scripts/gpu_session.sh own-checks 240
  echo "C: own-checks done at $(( $(date +%s) - T0 )) s"
  fz C 79044
}
laneA > $R/laneA.log 2>&1 &
laneB > $R/laneB.log 2>&1 &
laneC > $R/laneC.log 2>&1 &
wait
for l in A B C; do echo "=== lane $l"; cat $R/lane$l.log | cut -c1-600 | tail -40; done
# pack: fuzz records + models/logs; lane folders
for l in A B C; do
  [ -d out/fuzz_$l ] || continue
  (cd out && find fuzz_$l -maxdepth 3 -type f \( -name fuzz.json -o -name '*.log' -o -name '*.py' -o -name report.md \
     -o -name check.json -o -name 50_verify.json \) -not -path '*torch_extensions*' | tar czf "$OUT/fuzz_$l.tgz" -T -)
done
(cd /tmp && tar czf "$OUT/lanes.tgz" --exclude='*torch_extensions*' --exclude='*.so' --exclude='*.o' r)
ls -la "$OUT"; echo "total $(( $(date +%s) - T0 )) s"
