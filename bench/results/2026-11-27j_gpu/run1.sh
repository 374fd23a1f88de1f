bash scripts/device_env.sh >/dev/null 2>&1; export PYTHONUNBUFFERED=1
P=.venv/bin/python
( nproc; lscpu; for c in 0 1 7 8 14 15; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)"; done
  $P -c "from fuseforge.suite import environment as e; print('thread_siblings(15)=', e.thread_siblings(15))"; git rev-parse HEAD; $P -c "import torch; print(torch.__version__)" ) > $OUT/topology.txt 2>&1
tail -3 $OUT/topology.txt
timeout 90 $P dev/kernels/bench_thin_mm.py --out $OUT/thin_mm2.json > $OUT/thin_mm2.txt 2>&1; tail -25 $OUT/thin_mm2.txt
timeout 300 $P -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_seed_models.py --durations=5 --basetemp=/tmp/ptseed > $OUT/seed_tests.log 2>&1; tail -15 $OUT/seed_tests.log
timeout 170 $P -m pytest -q -m gpu -p no:cacheprovider tests/test_evaluate_random.py tests/test_check_plan.py --durations=5 > $OUT/truth_tests.log 2>&1; tail -15 $OUT/truth_tests.log
(cd /tmp/ptseed && tar czf $OUT/seed_runs.tgz --exclude='*.so' --exclude='*.o' --exclude='build*' . ) 2>&1 | tail -2; ls -la $OUT
