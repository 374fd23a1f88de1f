#!/usr/bin/env bash
# Session 20: the GPU test of two builds of one GEMM unit in one process (hidden host visibility), the builds first
# in parallel (load_inline caches them by name). carry [".shared/s20_run_twin.sh"]
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python
for w in 0 1; do (cd tests && timeout 110 ../$PY -c "import test_gemm_kernels as t; t.twin_gemm_extensions($w); print('built $w')") & done; wait
timeout 60 $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_gemm_kernels.py -k two_builds > $OUT/twin.log 2>&1
echo "twin test exit $?"; grep -E "PASSED|FAILED|Error|passed|failed" $OUT/twin.log | tail -6
