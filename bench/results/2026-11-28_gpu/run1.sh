#!/usr/bin/env bash
# eleventh session, run 1: conv kernels' GPU tests, then optimize on the 7 models whose code b4d68ed changed
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
nvidia-smi --query-gpu=name --format=csv,noheader; .venv/bin/python -c "import torch; print(torch.__version__)"
timeout 230 .venv/bin/python -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_kernels.py > "$OUT/conv_gpu_tests.log" 2>&1
echo "conv kernels' GPU tests exit $?"; tail -3 "$OUT/conv_gpu_tests.log"
bash scripts/gpu_session.sh problems ${1:-330} ../shared/sets/changed7
cd "$OUT" && tar czf run1_all.tgz --exclude=run1_all.tgz . 2>/dev/null; ls "$OUT"
