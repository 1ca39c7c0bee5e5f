#!/usr/bin/env bash
# The mean KL between the GPU FP8 prefill path and the CPU FP8 reference of
# the same numerics on the first 32,768 tokens (ctx 1024, pieces of 256): the
# CPU reference (the machine's 16 cores) saves its top-32 distributions, the
# GPU run and the CPU reference with its default roundings (the yardstick)
# compare with them. Binaries: .devcarry/e/futr.xz; the model from the parts.
#   usage: OUT=dir scripts/device/prefill_kl.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p models .devcarry/run
[ -s "$M" ] || cat .devcarry/m1/* .devcarry/m2/* .devcarry/m3/* > "$M"
sha256sum "$M" | cut -c1-16
xz -dc .devcarry/e/futr.xz > .devcarry/run/futr && chmod +x .devcarry/run/futr
F=.devcarry/run/futr
T=.devcarry/wiki.test.raw
C="--ctx 1024 --batch 256 --max-tokens 32768 --json -q"
time $F perplexity --model $M $T --backend cpu --threads 16 --weights fp8 --fp8-rms cast --fp8-numerics gpu --kv bf16 $C --save-kl-base /tmp/cpu.klb > $OUT/cpu_ref.json 2> $OUT/cpu_ref.err
grep -E '"ppl"' $OUT/cpu_ref.json; tail -2 $OUT/cpu_ref.err
$F perplexity --model $M $T --backend gpu --prefill --kv bf16 $C --kl-base /tmp/cpu.klb > $OUT/gpu_prefill_kl.json 2> $OUT/gpu.err
grep -E '"ppl"|kl|delta|top1|agree' $OUT/gpu_prefill_kl.json | head -20; tail -2 $OUT/gpu.err
$F perplexity --model $M $T --backend cpu --threads 16 --weights fp8 --fp8-rms cast --kv bf16 $C --kl-base /tmp/cpu.klb > $OUT/cpu_cpunum_kl.json 2> $OUT/cpu2.err
grep -E '"ppl"|kl|delta|top1|agree' $OUT/cpu_cpunum_kl.json | head -20; tail -2 $OUT/cpu2.err
