#!/usr/bin/env bash
# The GPU fuzz campaign toward issue 22's 300 models at one commit: the package of commit $FROZEN, unpacked from
# .shared/s22/ff_frozen.tgz (made with `git archive $FROZEN fuseforge | gzip > .shared/s22/ff_frozen.tgz`), runs every
# optimize and check: PYTHONPATH names it and the campaign runs from another folder (the checkout's root would come
# first on sys.path), so later commits of the checkout do not change what is measured. The record resumes from
# .shared/s22/fuzz.json: copy $OUT/fuzz.json back there after each command.
# carry [".shared/s22"]; `FROZEN=<sha> SECONDS_LEFT=500 [FUZZ_FLAGS=--every-kernel] bash
# bench/results/2026-11-29b_gpu/next_s22_fuzz.sh`
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
REPO=$PWD; PY=$REPO/.venv/bin/python; F=/tmp/ff_frozen; RUN=/tmp/fuzz_run
rm -rf $F; mkdir -p $F $RUN/fuzz; tar xzf .shared/s22/ff_frozen.tgz -C $F
[ -f $RUN/fuzz/fuzz.json ] || [ ! -f .shared/s22/fuzz.json ] || cp .shared/s22/fuzz.json $RUN/fuzz/fuzz.json
cd $RUN && export PYTHONPATH=$F FUSEFORGE_COMMIT=$FROZEN
$PY -c "import fuseforge; print('fuseforge from', fuseforge.__file__)"
(while sleep 20; do [ -f fuzz/fuzz.json ] && cp fuzz/fuzz.json "$OUT/fuzz.json.part" \
    && mv "$OUT/fuzz.json.part" "$OUT/fuzz.json"; done) &
COPIER=$!
timeout -s TERM -k 10 ${SECONDS_LEFT:-500} $PY -m fuseforge fuzz --seed ${FUZZ_SEED:-40000} --count 300 --jobs 10 \
    --out fuzz --timeout 600 --check --no-compile ${FUZZ_FLAGS:-} > "$OUT/fuzz.log" 2>&1
echo "fuzz exit $? (124: stopped at the limit; the same command goes on)"; grep -v "^\[" "$OUT/fuzz.log" | tail -25
kill $COPIER 2>/dev/null; cp fuzz/fuzz.json "$OUT/fuzz.json"
find fuzz/logs fuzz/models fuzz/runs -maxdepth 2 -type f \( -name '*.log' -o -name '*.py' -o -name report.md \
    -o -name check.json -o -name 50_verify.json \) | tar czf "$OUT/fuzz_runs.tgz" -T -
