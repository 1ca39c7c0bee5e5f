#!/usr/bin/env bash
# First call on a fresh GPU machine: what works there, the ceilings, and the
# transformers cross-check material. Binaries come prebuilt in build/bin.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
ls -d /usr/local/cuda*/lib* 2>&1 | head; ldd build/bin/ceilings_bench | grep -E "cublas|not found"
which compute-sanitizer ncu cuobjdump cmake ninja; nproc
build/bin/device_probe_test 2>&1 | tail -4
compute-sanitizer --tool memcheck build/bin/device_probe_test --gtest_filter=*Fill* 2>&1 | tail -3
build/bin/ceilings_bench --json $OUT/ceilings.json
python3 scripts/hf_crosscheck.py --out /tmp/hf_tiny > $OUT/hf_crosscheck.log 2>&1; tail -5 $OUT/hf_crosscheck.log
tar -C /tmp -czf $OUT/hf_tiny.tar.gz hf_tiny && ls -la $OUT
