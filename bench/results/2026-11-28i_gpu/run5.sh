#!/usr/bin/env bash
# The 3xTF32 conv kernel in the product (nvidia-h200). carry [".shared/problems", ".shared/s19_set", ".shared/s19_run5.sh"].
#  1. the conv families' GPU tests; 2. the suite on 78 (its transposed conv fp32-class: the 3xTF32 kernel), 61 and 77
#  (their TF32 transposed convs: the kernel's loop restructured), 65 (fp32-class 8-channel conv: cuDNN should stay);
#  3. `check` on 78's ModelNew with the time left.
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
REPO=$PWD; PY=$REPO/.venv/bin/python; KB=$REPO/../shared/problems/kernelbench
T0=$(date +%s); R=/tmp/r; mkdir -p $R out/suite
nvidia-smi -L
timeout 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_split_kernels.py tests/test_conv_igemm_kernels.py \
  tests/test_conv_transposed_kernels.py > $R/gpu_tests.log 2>&1
echo "gpu tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|Error|error [0-9]" $R/gpu_tests.log | tail -12
timeout -s TERM 330 $PY -m fuseforge suite .shared/s19_set --db out/suite/s19.sqlite --out out/suite/s19_out > $R/suite.log 2>&1
echo "suite exit $? at $(( $(date +%s) - T0 )) s"; tail -4 $R/suite.log
$PY -m fuseforge report out/suite/s19.sqlite > $R/report.txt 2>&1; tail -12 $R/report.txt | cut -c1-250
f=$(ls out/suite/s19_out/*/78_*/model_new.py 2>/dev/null | head -1)
left=$(( 570 - ($(date +%s) - T0) ))
if [ -n "$f" ] && [ "$left" -gt 60 ]; then
  timeout $(( left - 10 )) $PY -m fuseforge check $KB/78_ConvTranspose3d_Max_Max_Sum.py $f > $R/check78.log 2>&1
  echo "check 78 exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^\s*$" $R/check78.log | tail -6 | cut -c1-300
fi
(cd out/suite && find s19_out -path '*torch_extensions*' -prune -o -type f -size -2M \( -name '*.json' -o -name '*.md' \
  -o -name '*.txt' -o -name '*.log' -o -name '*.py' \) -print | tar czf "$OUT/jobs.tgz" -T -)
cp out/suite/s19.sqlite "$OUT/" 2>/dev/null; (cd /tmp && tar czf "$OUT/run5.tgz" r)
echo "total $(( $(date +%s) - T0 )) s"
