#!/usr/bin/env bash
# Prepared at the end of the twenty-third session (one H200, ~560 s). First, on this machine:
#   mkdir -p .shared/s24 && tar xzf bench/results/2026-11-29d_gpu/fuzz_rrelu_6011715.tgz -C .shared/s24
#   [ -f .shared/s22/fuzz.json ] || cp bench/results/2026-11-29d_gpu/fuzz_6011715.json .shared/s22/fuzz.json
#   [ -f .shared/s22/ff_frozen.tgz ] || git archive 6011715 fuseforge | gzip > .shared/s22/ff_frozen.tgz
# then carry [".shared/s22", ".shared/s24"]; `FUSEFORGE_COMMIT=<sha> bash bench/results/2026-11-29d_gpu/next_s24_run1.sh`
# 1. fuzz_040042 with the truth's rrelu fixed (c5bd23d): eager against the float64 run, the whole model and the captured
#    graph node by node, on the CPU and on CUDA, rand and signed inputs: every difference fp32-class now.
# 2. `fuseforge check` at this commit on the ModelNew of 6011715 of the two rrelu models (fuzz_040042, fuzz_040069):
#    `correct` expected, each worst error at eager's (the truth with its rrelu; 09d7aa4's kernel_dataflow).
# 3. GPU tests: the random draws' (c5bd23d changed Float32Draws) and the reducing tensor-core conv forms' (a persistent
#    NCHW one added after 0a16e92's run); then the few-channel tensor-core lab's three variants (rs, rsp, rspa).
# 4. The GPU fuzz campaign at 6011715 for the time left (copy $OUT/fuzz.json back to .shared/s22/fuzz.json).
# $OUT: diag.tgz (the logs of 1-3), conv_rs.json, fuzz.json, fuzz.log, fuzz_runs.tgz, gpu_lease.jsonl: 6 of the 8 files
# a command brings back.
set -u
bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0a
PY=.venv/bin/python; M=.shared/s24/fuzz; T0=$(date +%s); D=/tmp/diag; mkdir -p $D
for s in "" "--signed"; do
  timeout 60 $PY dev/eager_vs_float64.py $M/models/fuzz_040042.py --devices cpu,cuda $s --jump 1e-5 \
      > $D/eager_vs_float64${s/--/_}.log 2>&1
  echo "eager_vs_float64 $s exit $?"; grep -v -i warn $D/eager_vs_float64${s/--/_}.log | tail -14 | cut -c1-200
done
for n in 040042 040069; do
  timeout 90 $PY -m fuseforge check $M/models/fuzz_$n.py $M/runs/fuzz_$n/model_new.py --json $D/check_$n.json \
      --no-compile --trials 10 --warmup 2 > $D/check_$n.log 2>&1
  echo "check $n exit $? at $(( $(date +%s) - T0 )) s"; tail -3 $D/check_$n.log | cut -c1-300
done
timeout 150 $PY -m pytest -q -n 2 -p no:cacheprovider -m gpu tests/test_evaluate_random.py tests/test_conv_igemm_kernels.py \
    -k "random or draws or reducing" > $D/gpu_tests.log 2>&1
echo "GPU tests exit $? at $(( $(date +%s) - T0 )) s"; tail -2 $D/gpu_tests.log
timeout 120 $PY dev/kernels/conv_wgmma_rs/bench_conv_rs.py --reps 15 --out $OUT/conv_rs.json > $D/conv_rs.log 2>&1
echo "conv_rs lab exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^odd|^blocks|^[0-9]|rror" $D/conv_rs.log | cut -c1-260
tar czf $OUT/diag.tgz -C /tmp diag  # a command brings back 8 files at most: the small logs as one
LEFT=$(( 520 - ($(date +%s) - T0) - 30 ))
echo "fuzz for $LEFT s"
[ $LEFT -gt 60 ] && FROZEN=6011715 SECONDS_LEFT=$LEFT bash bench/results/2026-11-29b_gpu/next_s22_fuzz.sh
cp /tmp/fuzz_run/fuzz/gpu_lease.jsonl $OUT/ 2>/dev/null  # the runs' waits for the GPU: is the campaign GPU-bound?
echo "total $(( $(date +%s) - T0 )) s"
