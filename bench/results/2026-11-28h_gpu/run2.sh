#!/usr/bin/env bash
# Run 2 on nvidia-h200-x4: profile (per kernel: eager, compile, ours) the conv models below compile or outside the cost
# model's +-25 %, with the 69 ModelNew files of b939728 (kernels prebuilt in parallel first), on GPUs 0-1; the GPU
# fuzz campaign runs on GPUs 2-3 (M, seeds 83000..) and on 0-1 when the profiles end (N, seeds 84000..).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
END=${END:-560}
PY=.venv/bin/python
T0=$(date +%s); R=/tmp/r; mkdir -p $R/p out
nvidia-smi -L
left() { echo $(( END - ($(date +%s) - T0) )); }
fz() {  # lane seed count gpus jobs: the fuzz campaign until END, resuming out/fuzz_$lane (from .shared/s18/fuzz_$lane.json)
  local l; l=$(left); [ "$l" -gt 90 ] || { echo "fuzz $1: no time left"; return; }
  mkdir -p out/fuzz_$1
  [ -f out/fuzz_$1/fuzz.json ] || [ ! -f .shared/s18/fuzz_$1.json ] || cp .shared/s18/fuzz_$1.json out/fuzz_$1/fuzz.json
  CUDA_VISIBLE_DEVICES=$4 timeout -s TERM -k 10 $(( l - 15 )) $PY -m fuseforge fuzz --seed $2 --count $3 --jobs $5 \
    --out out/fuzz_$1 --timeout 600 --check --no-compile > $R/fuzz_$1.log 2>&1
  echo "fuzz $1 (seed $2) exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\[" $R/fuzz_$1.log | tail -6
}
MODELS="67_Conv2d_GELU_GlobalAvgPool 73_Conv2d_BatchNorm_Scaling 87_Conv2d_Subtract_Subtract_Mish
 93_ConvTranspose2d_Add_Min_GELU_Multiply 65_Conv2d_AvgPool_Sigmoid_Sum 72_ConvTranspose3d_BatchNorm_AvgPool_AvgPool
 convtranspose2d_bias_tanh_scale 49_ConvTranspose3d_Softmax_Sigmoid 52_Conv2d_Activation_BatchNorm
 20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd 100_ConvTranspose3d_Clamp_Min_Divide
 44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean 42_ConvTranspose2d_GlobalAvgPool_BiasAdd_LogSumExp_Sum_Multiply
 conv3d_maxpool_sigmoid_sum"
laneP() {  # profiles on GPUs 0 and 1, every other model each
  rm -rf /tmp/mn && mkdir -p /tmp/mn && tar xzf bench/results/2026-11-28g_gpu/suite69_model_new_b939728.tgz -C /tmp/mn
  for m in $MODELS; do f=$(ls /tmp/mn/results_out/*/$m-*/model_new.py | head -1); cp $f $R/p/$m.new.py; done
  ls $R/p/*.new.py | CUDA_VISIBLE_DEVICES=0 xargs -P 14 -I{} timeout 300 $PY -c "import importlib.util, sys
spec = importlib.util.spec_from_file_location('mn', sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m); m._kernels()" {} > $R/p/prebuild.log 2>&1
  echo "P: prebuilt (exit $?) at $(( $(date +%s) - T0 )) s"
  local k=0 a=() b=() an=() bn=()
  for m in $MODELS; do p=$(ls ../shared/problems/*/$m.py); if [ $((k % 2)) = 0 ]; then a+=($p); an+=($R/p/$m.new.py); else b+=($p); bn+=($R/p/$m.new.py); fi; k=$((k+1)); done
  CUDA_VISIBLE_DEVICES=0 timeout $(( $(left) - 100 )) $PY dev/kernels/profile_kernels.py "${a[@]}" --new "${an[@]}" --out $R/p/prof0.json > $R/p/prof0.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout $(( $(left) - 100 )) $PY dev/kernels/profile_kernels.py "${b[@]}" --new "${bn[@]}" --out $R/p/prof1.json > $R/p/prof1.log 2>&1
  wait; echo "P: profiles done at $(( $(date +%s) - T0 )) s"; grep -c '"model"' $R/p/prof0.log $R/p/prof1.log
  m=079004; mkdir -p $R/p/f$m
  CUDA_VISIBLE_DEVICES=0 timeout 150 $PY -m fuseforge optimize bench/results/2026-11-28g_gpu/fuzz_models/fuzz_$m.py -o $R/p/f$m > $R/p/f$m.log 2>&1
  echo "P: optimize $m exit $? at $(( $(date +%s) - T0 )) s"
  CUDA_VISIBLE_DEVICES=0 timeout 200 $PY -m fuseforge check bench/results/2026-11-28g_gpu/fuzz_models/fuzz_$m.py $R/p/f$m/model_new.py \
    --json $R/p/f$m/check.json --no-compile --trials 10 --warmup 2 > $R/p/f$m/check.log 2>&1
  echo "P: check $m exit $? at $(( $(date +%s) - T0 )) s: $($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['verdict'], d['reason'], [c.get('redraws') for c in d['cases'] if c.get('redraws')])" $R/p/f$m/check.json 2>&1 | cut -c1-500)"
  rm -rf $R/p/f$m/30_kernels
  fz N ${N_SEED:-84000} 300 0,1 16
}
laneP > $R/laneP.log 2>&1 &
fz M ${M_SEED:-83000} 600 2,3 20 > $R/laneM.log 2>&1 &
wait
for l in P M; do echo "=== lane $l"; cut -c1-600 $R/lane$l.log | tail -30; done
for l in M N; do
  [ -d out/fuzz_$l ] || continue
  (cd out && find fuzz_$l -maxdepth 3 -type f \( -name fuzz.json -o -name '*.log' -o -name '*.py' -o -name report.md \
     -o -name check.json -o -name 50_verify.json \) -not -path '*torch_extensions*' | tar czf "$OUT/fuzz_$l.tgz" -T -)
done
cp $R/p/prof0.json $R/p/prof1.json "$OUT/" 2>/dev/null
(cd /tmp && tar czf "$OUT/lanes.tgz" --exclude='*torch_extensions*' --exclude='*.so' --exclude='*.o' --exclude='*.new.py' r)
ls -la "$OUT"; echo "total $(( $(date +%s) - T0 )) s"
