#!/usr/bin/env bash
# The 3xTF32 conv kernel on the GPU (nvidia-h200-x2). carry [".shared/problems", ".shared/s19_run2.sh"].
#  lane 0: the conv families' GPU tests (the 3xTF32 forms against float64; the TF32 forms and transposed ones after
#          the kernel's template change), then optimize 87 (its 8-channel conv: the 3xTF32 kernel where eager is fp32)
#  lane 1: optimize 78 (its transposed 3-D conv, fp32-class in eager: 40 ms in cuDNN), then profile 87's kernels
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R
nvidia-smi -L
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  timeout 330 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_split_kernels.py tests/test_conv_igemm_kernels.py \
    tests/test_conv_transposed_kernels.py > $R/gpu_tests.log 2>&1
  echo "0: gpu tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|Error|error [0-9]" $R/gpu_tests.log | tail -12
  m=87_Conv2d_Subtract_Subtract_Mish
  timeout 200 $PY -m fuseforge optimize $KB/$m.py -o $R/o87 > $R/o87.log 2>&1
  echo "0: optimize 87 exit $? at $(( $(date +%s) - T0 )) s"; grep -h -m3 -E "bench:|verdict|correct" $R/o87/50_evaluate.log 2>/dev/null | cut -c1-300
}
lane1() {
  export CUDA_VISIBLE_DEVICES=1
  m=78_ConvTranspose3d_Max_Max_Sum
  timeout 300 $PY -m fuseforge optimize $KB/$m.py -o $R/o78 > $R/o78.log 2>&1
  echo "1: optimize 78 exit $? at $(( $(date +%s) - T0 )) s"; grep -h -m3 -E "bench:|verdict|correct" $R/o78/50_evaluate.log 2>/dev/null | cut -c1-300
  for i in $(seq 1 60); do [ -f $R/o87/model_new.py ] && break; sleep 5; done
  [ -f $R/o87/model_new.py ] && timeout 120 $PY dev/kernels/profile_kernels.py $KB/87_Conv2d_Subtract_Subtract_Mish.py \
     --new $R/o87/model_new.py > $R/profile87.log 2>&1; echo "1: profile 87 exit $? at $(( $(date +%s) - T0 )) s"
  tail -25 $R/profile87.log
}
lane0 > $R/lane0.log 2>&1 &
lane1 > $R/lane1.log 2>&1 &
wait
for l in 0 1; do echo "=== lane $l"; cut -c1-400 $R/lane$l.log | tail -40; done
for o in o87 o78; do grep -h -A12 "## Measured on the GPU" $R/$o/report.md 2>/dev/null | head -14; done
(cd /tmp && tar czf "$OUT/run2.tgz" --exclude='*torch_extensions*' --exclude='*.so' --exclude='*.o' --exclude='30_kernels' r)
ls -la "$OUT"; echo "total $(( $(date +%s) - T0 )) s"
