#!/usr/bin/env bash
# Steps of a GPU session's runs (bench/GPU_RUNS.md): `bash scripts/gpu_session.sh STEP` on the GPU machine,
# from the repository root, after `bash scripts/device_env.sh`. Results under out/suite (kept between
# commands on a warm machine) and copied to $OUT.
# The copy on the GPU machine has no usable .git: pass the commit it is, FUSEFORGE_COMMIT=$(git rev-parse --short HEAD).
set -uo pipefail
export PYTHONUNBUFFERED=1 FUSEFORGE_COMMIT="${FUSEFORGE_COMMIT:-unknown}"
PY=.venv/bin/python
DB=out/suite/results.sqlite
mkdir -p out/suite "${OUT:=/tmp/out}"

snapshot() {  # a consistent copy of the database, and the jobs' artefacts without their builds
    $PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" "$DB" "$OUT/results.sqlite"
    (cd out/suite && find results_out -path '*torch_extensions*' -prune -o -type f -size -2M \
        \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.py' \) -print \
        | tar czf "$OUT/jobs.tgz" -T -)
}

case "$1" in
  candidates)  # check jobs: the real answers and two buggy candidates (crash, hang)
    mkdir -p /tmp/cands && cp .shared/candidates/*.py bench/suite_candidates/*.py /tmp/cands/
    $PY -m fuseforge suite ../shared/problems --candidates /tmp/cands --db "$DB" --run-timeout 200 --build-timeout 600 2>&1 | tail -40
    ;;
  problems-killed)  # optimize jobs, killed with SIGKILL after $2 seconds (and the orphaned jobs with it)
    timeout -s KILL "$2" $PY -m fuseforge suite ../shared/problems --db "$DB" > "$OUT/suite_killed.log" 2>&1
    echo "suite exit $? (137: killed)"
    pkill -9 -f "m [f]useforge" ; sleep 2
    ;;
  problems)  # the same command again: resumes
    timeout -s TERM "$2" $PY -m fuseforge suite ../shared/problems --db "$DB" > "$OUT/suite_resume.log" 2>&1
    echo "suite exit $?"; tail -5 "$OUT/suite_resume.log"
    ;;
esac
snapshot
$PY -m fuseforge report "$DB" 2>&1 | tail -45
