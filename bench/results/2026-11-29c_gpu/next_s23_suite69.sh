#!/usr/bin/env bash
# All 69 problem models at one commit on one GPU machine, resumable across commands (issue 22's record at one commit).
# The first command starts from baselines69_h200_torch211.sqlite: eager's and torch.compile's times of all 69 on an
# H200 with torch 2.11.0+cu130 (the suites of 6849ded and f1237dc, no jobs), so the suite takes both baselines from
# that cache where the GPU and torch match (the record's compile_cached / eager_cached say so) and spends its CPU on
# the builds. carry [".shared/problems", ".shared/s23"]; copy $OUT/results.sqlite back to .shared/s23/suite69.sqlite
# after each command, and run it again until the report counts 69 jobs.
# `FUSEFORGE_COMMIT=<sha> SECONDS_LEFT=540 bash bench/results/2026-11-29c_gpu/next_s23_suite69.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
export FUSEFORGE_COMMIT=${FUSEFORGE_COMMIT:-unknown}
mkdir -p out/suite
if [ -f .shared/s23/suite69.sqlite ]; then cp .shared/s23/suite69.sqlite out/suite/results.sqlite
else cp bench/results/2026-11-29c_gpu/baselines69_h200_torch211.sqlite out/suite/results.sqlite; fi
bash scripts/gpu_session.sh problems ${SECONDS_LEFT:-540} .shared/problems
