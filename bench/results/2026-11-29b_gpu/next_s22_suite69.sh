#!/usr/bin/env bash
# All 69 problem models at one commit on one GPU machine, resumable across commands (issue 22's record at one commit).
# carry [".shared/problems", ".shared/s22"]; copy $OUT/results.sqlite back to
# .shared/s22/suite69.sqlite after each command, and run it again until the report counts 69 jobs. On one H200 the
# twenty-first session ran ~25 s of wall a model (15 + 22 models in 539 + 554 s): three commands of ~550 s.
# `FUSEFORGE_COMMIT=<sha> SECONDS_LEFT=550 bash bench/results/2026-11-29b_gpu/next_s22_suite69.sh` (x2/x4: every GPU).
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
mkdir -p out/suite
[ -f .shared/s22/suite69.sqlite ] && cp .shared/s22/suite69.sqlite out/suite/results.sqlite
bash scripts/gpu_session.sh problems ${SECONDS_LEFT:-550} .shared/problems
