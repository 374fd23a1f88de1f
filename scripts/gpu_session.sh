#!/usr/bin/env bash
# Steps of a GPU session's runs (bench/GPU_RUNS.md): `bash scripts/gpu_session.sh STEP` on the GPU machine,
# from the repository root, after `bash scripts/device_env.sh`. Results under out/suite (kept between
# commands on a warm machine) and copied to $OUT.
# The copy on the GPU machine has no usable .git: pass the commit it is, FUSEFORGE_COMMIT=$(git rev-parse --short HEAD).
set -uo pipefail
export PYTHONUNBUFFERED=1 FUSEFORGE_COMMIT="${FUSEFORGE_COMMIT:-unknown}"
PY=.venv/bin/python
DB=out/suite/results.sqlite
mkdir -p out/suite out/rows "${OUT:=/tmp/out}"

snapshot() {  # a consistent copy of the database, and the jobs' artefacts without their builds
    [ -f "$DB" ] || return 0
    $PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d)" "$DB" "$OUT/results.sqlite"
    local jobs; jobs="$(basename "${DB%.sqlite}")_out"  # the suite's default artefact folder: DB's name + _out
    [ -d "out/suite/$jobs" ] || return 0
    (cd out/suite && find "$jobs" -path '*torch_extensions*' -prune -o -type f -size -2M \
        \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.py' \) -print \
        | tar czf "$OUT/jobs.tgz" -T -)
}

case "$1" in
  corpus)  # the grader's adversarial corpus on the GPU, shard $2 (K/N, default 0/1); kernels built in parallel first
    shard="${2:-0/1}"; tag="${shard/\//_of_}"
    [ -f out/corpus_prebuilt ] || { ls tests/adversarial/*.py | xargs -P 16 -I{} timeout 300 $PY -c "import sys, pathlib; \
from fuseforge.suite.build import build_extension; build_extension(pathlib.Path(sys.argv[1]))" {} \
        > "$OUT/corpus_prebuild.log" 2>&1; touch out/corpus_prebuilt; }
    FUSEFORGE_CORPUS_SHARD="$shard" FUSEFORGE_CORPUS_RECORDS="$OUT/corpus_records_$tag.json" timeout "${3:-540}" \
        $PY -m pytest -v -p no:cacheprovider -rfE tests/test_check_corpus.py -k test_on_a_gpu_every_candidate \
        --junitxml="$OUT/corpus_$tag.xml" > "$OUT/corpus_$tag.log" 2>&1
    echo "corpus shard $shard pytest exit $?"; grep -E "FAILED|passed|failed" "$OUT/corpus_$tag.log" | tail -8
    ;;
  conv-labs)  # the tensor-core conv lab beside the direct kernel, then the conv kernels' GPU tests
    timeout 120 $PY dev/kernels/conv_direct/bench_conv_mma.py --out "$OUT/conv_mma.json" > "$OUT/conv_mma.log" 2>&1
    echo "conv_mma bench exit $?"; tail -8 "$OUT/conv_mma.log"
    timeout 230 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_conv_kernels.py > "$OUT/conv_gpu_tests.log" 2>&1
    echo "conv kernels' GPU tests exit $?"; tail -3 "$OUT/conv_gpu_tests.log"
    ;;
  rows)  # the fused row kernels: their GPU tests, then optimize on the models that get one
    $PY -m pytest -q -p no:cacheprovider tests/test_rows.py > "$OUT/rows_pytest.log" 2>&1; tail -3 "$OUT/rows_pytest.log"
    for m in rmsnorm_residual gemm_softmax_rows gemm_layernorm_relu matmul_logsumexp_relu bmm_scale_softmax_bmm; do
        $PY -m fuseforge optimize ../shared/problems/dev/$m.py -o out/rows/$m > out/rows/$m.log 2>&1
        echo "$m exit $?: $(grep -h -m1 'bench:' out/rows/$m/50_evaluate.log 2>/dev/null | cut -c1-200)"
    done
    (cd out && tar czf "$OUT/rows.tgz" --exclude='*torch_extensions*' rows)
    ;;
  families-tests)  # the kernel families' GPU tests (odd sizes vs float64, per family)
    $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_rows.py tests/test_channels.py \
        tests/test_channel_reductions.py tests/test_gemm_kernels.py > "$OUT/families_pytest.log" 2>&1
    echo "families pytest exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/families_pytest.log" | tail -20
    DB=out/suite/none.sqlite  # nothing to snapshot
    ;;
  conv-tests)  # the conv family's GPU tests (direct and tensor-core kernels vs float64) and the timed conv probe
    $PY -m pytest -v -p no:cacheprovider -rfE -m gpu tests/test_conv_kernels.py tests/test_conv_igemm_kernels.py \
        tests/test_conv_precision.py > "$OUT/conv_pytest.log" 2>&1
    echo "conv pytest exit $?"; grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/conv_pytest.log" | tail -12
    timeout "${2:-240}" $PY -m fuseforge.evaluate.conv_precision ../shared/problems/*/*.py --time \
        --out "$OUT/conv_times.json" > "$OUT/conv_times.log" 2>&1
    echo "conv probe exit $?"; tail -3 "$OUT/conv_times.log"
    DB=out/suite/none.sqlite  # nothing to snapshot
    ;;
  plain)  # optimize jobs without the kernel families, in their own database; resumes like `problems`
    DB=out/suite/plain.sqlite
    timeout -s TERM "$2" $PY -m fuseforge suite "${3:-../shared/problems}" --db "$DB" --no-families \
        > "$OUT/suite_plain.log" 2>&1
    echo "suite exit $?"; tail -5 "$OUT/suite_plain.log"
    ;;
  candidates)  # check jobs: the real answers and two buggy candidates (crash, hang)
    mkdir -p /tmp/cands && cp .shared/candidates/*.py bench/suite_candidates/*.py /tmp/cands/
    $PY -m fuseforge suite ../shared/problems --candidates /tmp/cands --db "$DB" --run-timeout 200 --build-timeout 600 2>&1 | tail -40
    ;;
  problems-killed)  # optimize jobs, killed with SIGKILL after $2 seconds (and the orphaned jobs with it)
    timeout -s KILL "$2" $PY -m fuseforge suite ../shared/problems --db "$DB" > "$OUT/suite_killed.log" 2>&1
    echo "suite exit $? (137: killed)"
    pkill -9 -f "m [f]useforge" ; sleep 2
    ;;
  fuzz)  # the GPU fuzz campaign for $2 seconds: seeds $3.. ($4 models), $5 at a time, each verified ModelNew checked
        # again; resumes from out/fuzz (a warm machine) or from the record named by FUZZ_RESUME (a fresh one);
        # FUZZ_FLAGS="--every-kernel": every anchor a kernel can take is that kernel (the kernels on odd shapes)
    mkdir -p out/fuzz
    [ -f out/fuzz/fuzz.json ] || [ -z "${FUZZ_RESUME:-}" ] || cp "$FUZZ_RESUME" out/fuzz/fuzz.json
    # the record is copied out every 20 s: a command killed at the device's limit (in-flight jobs can take longer
    # than that margin to stop) still brings back every outcome recorded so far
    (while sleep 20; do [ -f out/fuzz/fuzz.json ] && cp out/fuzz/fuzz.json "$OUT/fuzz.json.part" \
        && mv "$OUT/fuzz.json.part" "$OUT/fuzz.json"; done) &
    COPIER=$!
    timeout -s TERM -k 10 "$2" $PY -m fuseforge fuzz --seed "${3:-20000}" --count "${4:-300}" --jobs "${5:-10}" \
        --out out/fuzz --timeout 600 --check --no-compile ${FUZZ_FLAGS:-} > "$OUT/fuzz.log" 2>&1
    echo "fuzz exit $? (124: stopped at $2 s; the same command goes on)"; grep -v "^\[" "$OUT/fuzz.log" | tail -25
    kill "$COPIER" 2>/dev/null
    cp out/fuzz/fuzz.json "$OUT/fuzz.json"
    (cd out && find fuzz/logs fuzz/models fuzz/runs -maxdepth 2 -type f \( -name '*.log' -o -name '*.py' \
        -o -name report.md -o -name check.json -o -name 50_verify.json \) | tar czf "$OUT/fuzz_runs.tgz" -T -)
    DB=out/suite/none.sqlite  # nothing to snapshot
    ;;
  own-checks)  # `check` jobs on the ModelNew files optimize wrote for the problem models (the suite records' jobs.tgz,
              # the later one of a model winning), for at most $2 seconds; resumes from out/suite/own.sqlite
    DB=out/suite/own.sqlite
    # OWN_FROM: a suite's artefact folder on this machine (out/suite/results_out after `problems`), else the records
    rm -rf /tmp/own_x /tmp/own && mkdir -p /tmp/own_x /tmp/own
    if [ -n "${OWN_FROM:-}" ]; then
        for f in "$OWN_FROM"/*/*/model_new.py; do
            name=$(basename "$(dirname "$f")"); cp "$f" "/tmp/own/${name%-*}.ours.py"
        done
    else  # OWN_TGZ: suite records' jobs.tgz files (the later one of a model wins), else the 2026-11-24/25 records
        for t in ${OWN_TGZ:-bench/results/2026-11-24_suite69_h100/run1_jobs.tgz bench/results/2026-11-24_suite69_h100/run2_jobs.tgz \
                 bench/results/2026-11-25_rerun3_h100/jobs.tgz bench/results/2026-11-25b_h100/outclass10_jobs.tgz}; do
            rm -rf /tmp/own_x/* && tar xzf "$t" -C /tmp/own_x --wildcards '*/model_new.py' --exclude='*/attempts/*'
            for f in /tmp/own_x/*/*/*/model_new.py; do
                name=$(basename "$(dirname "$f")"); cp "$f" "/tmp/own/${name%-*}.ours.py"
            done
        done
    fi
    if [ -n "${OWN_SKIP:-}" ]; then  # OWN_SKIP="a.sqlite b.sqlite": not the models some record already found correct
        for name in $($PY -c "import sqlite3, sys
for db in sys.argv[1:]:
    for (m,) in sqlite3.connect(db).execute(\"select model_name from jobs where verdict = 'correct'\"): print(m)" $OWN_SKIP | sort -u); do
            rm -f "/tmp/own/$name.ours.py"
        done
    fi
    if [ -n "${OWN_ONLY:-}" ]; then  # OWN_ONLY="100_ 16_": only the models whose names start so
        for f in /tmp/own/*.py; do
            keep=0; for p in $OWN_ONLY; do case "$(basename "$f")" in "$p"*) keep=1;; esac; done
            [ "$keep" = 1 ] || rm -f "$f"
        done
    fi
    echo "$(ls /tmp/own | wc -l) ModelNew files"
    # verdicts only: no torch.compile baseline, 10 timed calls; two checks in flight per GPU (OWN_SLOTS; their GPU work
    # one at a time): a check of a model with 0.5 GB outputs writes ~13 GB of reference outputs, and three filled the
    # 64 GB disk of a one-GPU machine
    timeout -s TERM "$2" $PY -m fuseforge suite ../shared/problems --candidates /tmp/own --db "$DB" --run-timeout 600 \
        --run-slots "${OWN_SLOTS:-2}" --run-command "{python} -m fuseforge check {model} {candidate} --json {out}/check.json \
--workdir {out}/check_work --device {device} --no-compile --trials 10 --warmup 2" > "$OUT/suite_own.log" 2>&1
    echo "suite exit $?"; tail -5 "$OUT/suite_own.log"
    ;;
  problems)  # optimize jobs (default plan) on ${3:-../shared/problems} for at most $2 seconds; the same command resumes
    timeout -s TERM "$2" $PY -m fuseforge suite "${3:-../shared/problems}" --db "$DB" > "$OUT/suite_resume.log" 2>&1
    echo "suite exit $?"; tail -5 "$OUT/suite_resume.log"
    ;;
esac
snapshot
[ -f "$DB" ] && $PY -m fuseforge report "$DB" 2>&1 | tail -45
