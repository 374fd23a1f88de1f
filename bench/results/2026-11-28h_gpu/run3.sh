#!/usr/bin/env bash
# Run 3 on nvidia-h200-x2 (x4 not lent): lane C then fuzz on GPU 0; D then A on GPU 1 (B, the re-checks, not run), then each lane's GPU joins the fuzz campaign (run from a copy of
# the package at 07212f3: its optimize is b820a52's, its check the one with the judge's fixes).
#  A (GPU 0): check on 56's ModelNew of b939728 (issue 25's last own-check)
#  B (GPU 1): check again, with this commit's judge, the five ModelNew files fuzz graded not correct in run 2
#  C (GPU 2): GPU tests of the rows change (channels-last channel kernel) and the few-carrier rules; optimize on 49
#             and its kernels profiled against b939728's ModelNew
#  D (GPU 3): CUTLASS 3xTF32 conv lab on the fp32-class conv shapes
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
END=${END:-460}
REPO=$PWD; PY=$REPO/.venv/bin/python
T0=$(date +%s); R=/tmp/r; mkdir -p $R/a $R/b $R/c $R/d out
nvidia-smi -L
rm -rf /tmp/ff07 && mkdir -p /tmp/ff07 && tar xzf .shared/s18/ff_07212f3.tar.gz -C /tmp/ff07
(cd /tmp/ff07 && $PY -c "import fuseforge, sys; print('fuzz package:', fuseforge.__file__)")
left() { echo $(( END - ($(date +%s) - T0) )); }
fz() {  # lane seed count gpus jobs: the fuzz campaign (package 07212f3) until END, resuming .shared/s18/fuzz_$lane.json
  local l; l=$(left); [ "$l" -gt 90 ] || { echo "fuzz $1: no time left"; return; }
  mkdir -p $REPO/out/fuzz_$1
  [ -f $REPO/out/fuzz_$1/fuzz.json ] || [ ! -f .shared/s18/fuzz_$1.json ] || cp .shared/s18/fuzz_$1.json $REPO/out/fuzz_$1/fuzz.json
  (cd /tmp/ff07 && CUDA_VISIBLE_DEVICES=$4 timeout -s TERM -k 10 $(( l - 15 )) $PY -m fuseforge fuzz --seed $2 --count $3 \
    --jobs $5 --out $REPO/out/fuzz_$1 --timeout 600 --check --no-compile > $R/fuzz_$1.log 2>&1)
  echo "fuzz $1 (seed $2) exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\[" $R/fuzz_$1.log | tail -4
}
verdict() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['verdict'], d['reason'], [(c.get('name') or c.get('role'), c.get('redraws')) for c in d['cases'] + (d.get('sequence') or []) if c.get('redraws')])" $1 2>&1 | cut -c1-400; }
laneA() {
  export CUDA_VISIBLE_DEVICES=1
  OWN_TGZ=bench/results/2026-11-28g_gpu/suite69_model_new_b939728.tgz OWN_ONLY="56_" OUT=$R/a \
    bash scripts/gpu_session.sh own-checks $(( $(left) - 10 )) | tail -4
  echo "A: own-check done at $(( $(date +%s) - T0 )) s"
}
laneB() {
  export CUDA_VISIBLE_DEVICES=1
  for f in .shared/s18/recheck/fuzz_*.new.py; do
    m=$(basename $f .new.py)
    timeout 150 $PY -m fuseforge check .shared/s18/recheck/$m.py $f --json $R/b/$m.check.json --no-compile --trials 10 \
      --warmup 2 > $R/b/$m.check.log 2>&1
    echo "B: check $m exit $? at $(( $(date +%s) - T0 )) s: $(verdict $R/b/$m.check.json)"
  done
}
laneC() {
  export CUDA_VISIBLE_DEVICES=0
  timeout 200 $PY -m pytest -v -m gpu -p no:cacheprovider -rfE tests/test_row_channels.py tests/test_few_carriers.py \
    > $R/c/gpu_tests.log 2>&1
  echo "C: GPU tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "FAILED|ERROR|passed|failed" $R/c/gpu_tests.log | tail -6
  m=49_ConvTranspose3d_Softmax_Sigmoid
  timeout 150 $PY -m fuseforge optimize ../shared/problems/kernelbench/$m.py -o $R/c/o49 > $R/c/o49.log 2>&1
  echo "C: optimize 49 exit $? at $(( $(date +%s) - T0 )) s: $(grep -h -m1 'bench:' $R/c/o49/50_evaluate.log 2>/dev/null | cut -c1-200)"
  rm -rf /tmp/mn49 && mkdir -p /tmp/mn49 && tar xzf bench/results/2026-11-28g_gpu/suite69_model_new_b939728.tgz -C /tmp/mn49 --wildcards "*$m*/model_new.py"
  old=$(ls /tmp/mn49/results_out/*/$m-*/model_new.py)
  timeout 150 $PY dev/kernels/profile_kernels.py ../shared/problems/kernelbench/$m.py ../shared/problems/kernelbench/$m.py \
    --new $old $R/c/o49/model_new.py --out $R/c/prof49.json > $R/c/prof49.log 2>&1
  echo "C: profile exit $? at $(( $(date +%s) - T0 )) s"; grep -E "ours|nhwc" $R/c/prof49.log | head -8
  rm -rf $R/c/o49/30_kernels
  fz M 83000 600 0 10
}
laneD() {
  export CUDA_VISIBLE_DEVICES=1
  rm -rf /tmp/cutlass && mkdir -p /tmp/cutlass/include && tar xJf .shared/s18/cutlass_inc.tar.xz -C /tmp/cutlass/include
  timeout 240 $PY dev/kernels/conv_cutlass/bench_conv_cutlass.py --cutlass /tmp/cutlass/include \
    --jobs 8 --out $R/d/conv_cutlass.json > $R/d/conv_cutlass.log 2>&1
  echo "D: cutlass lab exit $? at $(( $(date +%s) - T0 )) s"; cut -c1-700 $R/d/conv_cutlass.log | tail -10
}
laneC > $R/laneC.log 2>&1 &
(laneD > $R/laneD.log 2>&1; laneA > $R/laneA.log 2>&1) &
wait
for l in C D A; do echo "=== lane $l"; cut -c1-900 $R/lane$l.log | tail -24; done
for l in M N; do
  [ -d out/fuzz_$l ] || continue
  (cd out && find fuzz_$l -maxdepth 3 -type f \( -name fuzz.json -o -name '*.log' -o -name '*.py' -o -name report.md \
     -o -name check.json -o -name 50_verify.json \) -not -path '*torch_extensions*' | tar czf "$OUT/fuzz_$l.tgz" -T -)
done
(cd /tmp && tar czf "$OUT/lanes.tgz" --exclude='*torch_extensions*' --exclude='*.so' --exclude='*.o' --exclude='30_kernels' r)
ls -la "$OUT"; echo "total $(( $(date +%s) - T0 )) s"
