#!/usr/bin/env bash
# eleventh session, run 3: the conv kernels' GPU tests (spatial sums included), optimize on the 8 models whose
# generated code changed (direct.cuh; 67's spatial mean), SASS of 67's kernel, then the 3xTF32 conv lab bench
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
nvidia-smi --query-gpu=name --format=csv,noheader; .venv/bin/python -c "import torch; print(torch.__version__)"
timeout 150 .venv/bin/python -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_kernels.py > "$OUT/conv_gpu_tests.log" 2>&1
echo "conv kernels' GPU tests exit $?"; tail -3 "$OUT/conv_gpu_tests.log"
bash scripts/gpu_session.sh problems ${1:-270} ../shared/sets/changed8 | tail -14
so=$(find out/suite -name '*.so' -path '*67_Conv2d*' 2>/dev/null | head -1)
if command -v cuobjdump >/dev/null && [ -n "$so" ]; then cuobjdump -sass "$so" > "$OUT/sass67.txt" 2>&1; echo "sass67: $(wc -l < "$OUT/sass67.txt") lines"; fi
timeout ${2:-150} .venv/bin/python dev/kernels/conv_3xtf32/bench_conv_3xtf32.py --reps 10 --out "$OUT/conv3x.json" > "$OUT/conv3x.log" 2>&1
echo "conv_3xtf32 bench exit $?"; tail -14 "$OUT/conv3x.log"
cd "$OUT" && tar czf run3_all.tgz --exclude=run3_all.tgz . 2>/dev/null; ls "$OUT"
