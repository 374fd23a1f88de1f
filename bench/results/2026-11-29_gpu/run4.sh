#!/usr/bin/env bash
# Session 20, A/B of b939728's ModelNew against 6849ded's on the models whose ModelNew changed and whose suite time
# rose (rmsnorm_residual +25 %, bmm_scale_softmax_bmm +7 %, gemm_softmax_rows +6 %): one process, one GPU, interleaved rounds.
# carry [".shared/problems", ".shared/s20/ab", ".shared/s20_run_ab.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; AB=.shared/s20/ab; DEV=.shared/problems/dev
# build the six extensions side by side first (load_inline caches them by name)
ls $AB/*.py | xargs -P 6 -I{} timeout 150 $PY -c "
import importlib.util, sys
spec = importlib.util.spec_from_file_location('m', sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m); m._kernels(); print('built', sys.argv[1])" {} 2>&1 | grep -E "built|Error" | tail -6
for m in rmsnorm_residual bmm_scale_softmax_bmm gemm_softmax_rows; do
  timeout 40 $PY dev/ab_bench.py $DEV/$m.py $AB/${m}_old.py $AB/${m}_new.py --trials 40 --out $OUT/ab_$m.json \
      > $OUT/ab_$m.log 2>&1
  echo "$m exit $?"; tail -5 $OUT/ab_$m.log
done
