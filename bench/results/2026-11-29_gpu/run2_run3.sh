#!/usr/bin/env bash
# The 69-model suite at one commit on one GPU, resumable across commands (issue 22's record, issue 24's regression
# table). carry [".shared/problems", ".shared/s20", ".shared/s20_suite.sh"]; copy $OUT/results.sqlite back to
# .shared/s20/results.sqlite after each command and run it again until the report counts 69 jobs.
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
mkdir -p out/suite
[ -f .shared/s20/results.sqlite ] && cp .shared/s20/results.sqlite out/suite/results.sqlite
bash scripts/gpu_session.sh problems ${SECONDS_LEFT:-540} ../shared/problems
