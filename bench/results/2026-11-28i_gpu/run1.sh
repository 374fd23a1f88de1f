#!/usr/bin/env bash
# The grader's corpus on two GPUs (nvidia-h200-x2), both shards side by side after one parallel prebuild: issue 25's
# last step (the judge changed after the GPU corpus of c8be2a8). carry [".shared/problems", ".shared/s19_corpus.sh"].
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
PY=.venv/bin/python; T0=$(date +%s); mkdir -p out /tmp/c; FINAL=$OUT; export OUT=/tmp/c
ls tests/adversarial/*.py | CUDA_VISIBLE_DEVICES=0 xargs -P 24 -I{} timeout 300 $PY -c "import sys, pathlib; \
from fuseforge.suite.build import build_extension; build_extension(pathlib.Path(sys.argv[1]))" {} > "$OUT/corpus_prebuild.log" 2>&1
touch out/corpus_prebuilt; echo "prebuilt at $(( $(date +%s) - T0 )) s"
CUDA_VISIBLE_DEVICES=0 bash scripts/gpu_session.sh corpus 0/2 480 &
CUDA_VISIBLE_DEVICES=1 bash scripts/gpu_session.sh corpus 1/2 480
wait; echo "corpus done at $(( $(date +%s) - T0 )) s"
(cd /tmp && tar czf "$FINAL/corpus.tgz" c); cp /tmp/c/corpus_records_*_summary.json "$FINAL/" 2>/dev/null; ls "$FINAL"
