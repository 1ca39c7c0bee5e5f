// The one tolerance table of the test suite. Each bound is a relative L2 error
// ||out - ref|| / ||ref|| against the CPU reference (float64 accumulation of the
// same quantized inputs), with the largest error observed on the H200 noted
// beside it. Change a bound only with a reason written here.
#pragma once

namespace futr::test::tol {

// CPU forward (FP32) vs Hugging Face transformers (FP32) logits.
// Observed (tests/cpu_engine/hf_crosscheck_test.cpp, 48 tokens, prefill / decode):
// gqa_hd64_tied_bf16 1.3e-6 / 1.6e-6, gqa_hd128_untied_llama3_f16_sharded
// 1.4e-6 / 1.8e-6, mqa_hd64_wide_heads_f32 6.0e-7 / 7.0e-7 (docs/CPU_BACKEND.md).
inline constexpr double kCpuVsTransformers = 1e-4;

// CPU forward (FP32) of the same tokens cut into different chunks (prefill in
// one call vs several, a suffix re-run after a truncate): the same computation
// up to the summation order inside BLAS. Observed (tests/cpu_engine/forward_test.cpp,
// tests/runtime/engine_test.cpp): below 1e-6.
inline constexpr double kCpuChunking = 1e-5;
// The same, seen through a log-probability: the absolute difference of
// log softmax(z)[t] (runtime::token_nll, double) when the prompt is cut into
// other chunks (the server's prefill steps vs one SequenceRunner step). A
// logit moved by d moves the logprob by at most 2 |d|, and the logits of the
// default model are a few tens in size, so kCpuChunking's relative 1e-6
// becomes absolute 1e-5 here. Observed (tests/server/logprobs_engine_test.cpp,
// SmolLM2): 1.0e-5 over a 46-token prompt cut into 16-row steps, 8.9e-6 over
// 24 decoded tokens (one row per step) against one step of all of them.
inline constexpr double kCpuChunkingLogprob = 1e-4;

// Tensor parallelism on the CPU (tests/runtime/tensor_parallel_test.cpp): the
// split layers (partial O / down products summed over the ranks, the LM head
// by vocabulary shards) against the unsplit cpu::Forward, FP32 both: only the
// summation order changes. Observed (TP 1 / 2 / 4 / 8, 2 layers, 10 tokens):
// largest 1.1e-6 (x86-64 CPU, 3 runs, 2026-12-01; tied and untied heads).
inline constexpr double kTensorParallelSplit = 1e-5;

// Any GPU result rounded once to BF16 at the output (FP32 accumulation of the
// same quantized inputs): BF16 has 8 significant bits, relative rounding error
// <= 2^-9 = 0.00195 per element, so the L2 ratio stays below that.
inline constexpr double kBf16Output = 4e-3;

// Decode GEMMs with quantized weights (tests/kernels/w4a16_test.cpp) against
// ref::w4a16 / ref::w8a16: exact products of BF16 activations and dequantized
// weights, FP32 accumulation, FP32 group scaling, one BF16 rounding of y.
inline constexpr double kW4A16 = 4e-3;  // largest observed on the H200 (6 runs, 2026-11-29): 2.3e-3
inline constexpr double kW8A16 = 4e-3;  // largest observed on the H200 (6 runs, 2026-11-29): 2.3e-3

// FP8 prefill GEMM (tests/kernels/fp8_gemm_test.cpp) against ref::gemm_rows +
// the epilogue references (exact E4M3/BF16 products, float blocks summed in
// double). The GPU accumulates on the tensor cores, whose FP8 accumulation
// keeps fewer bits than FP32 (the error grows with K), and rounds once to BF16.
// Largest observed on the H200, 3 runs of the full matrix (2026-11-29):
inline constexpr double kFp8GemmBf16Out = 1e-2;   // 4.5e-3 (70B down, K = 28672); 1.7e-3 at K <= 4096
inline constexpr double kBf16GemmBf16Out = 4e-3;  // 1.7e-3
// Promoted accumulation (the default; each 128-wide K stage's tensor-core sum
// added in FP32): the error left is the BF16 rounding of the output, as with
// BF16 inputs, whatever K. Not yet observed on the H200 (the bound of the
// BF16-input path, same argument).
inline constexpr double kFp8GemmPromotedBf16Out = 4e-3;
inline constexpr double kFp8GemmSumSq = 5e-3;  // 1.3e-3 (row sums of squares of the stored BF16 rows)
// E4M3 output dequantized vs the unquantized value: 3 mantissa bits, RNE, so
// <= 2^-4 relative per element (about 0.036 RMS for spread-out values).
inline constexpr double kFp8GemmE4m3Out = 5e-2;  // 2.7e-2

// The LM head (tests/kernels/lm_head_test.cpp) against ref::lm_head (float64
// over the exact BF16 products), FP32 logits not rounded further. The products
// are exact in FP32; the tensor cores sum each k16 step's products into the
// FP32 accumulator with the aligned sum truncated to FP32 width (measured
// behaviour of their FP32 accumulation: no round-to-nearest), an error of up
// to one ulp of the running sum per step. If every one of the K / 16 steps
// leaned the same way: (K / 16) 2^-23 = 3.1e-5 relative at K = 4096, the
// largest K tested; random signs give far less. The bound leaves a factor 3.
inline constexpr double kLmHead = 1e-4;  // not yet observed on the H200

// Decode attention (tests/kernels/decode_attention_test.cpp) against
// ref::decode_attention (float64 over exactly the cache's BF16 values or the
// mirror's decoded nibbles): FP16 query and probabilities (INT4 mirror; 11-bit
// mantissa) or BF16 ones (BF16 cache; 8 bits), FP32 accumulation, one BF16
// rounding of the output.
inline constexpr double kDecodeAttention = 6e-3;  // largest observed on the H200 (5 runs, 2026-12-01): 2.0e-3

// Prefill attention (tests/kernels/prefill_attention_test.cpp) against
// ref::prefill_attention (float64 over exactly the cache's BF16 values): BF16
// Q and K products on the tensor cores (exact) summed in FP32, P rounded to
// BF16 (8 bits) with the row sum taken over the rounded weights, FP32
// accumulation of P V, one BF16 rounding of the output: the decode
// attention's BF16 path, same bound.
inline constexpr double kPrefillAttention = 6e-3;  // not yet observed on the H200

// Logits reductions (tests/kernels/logits_reduce_test.cpp) against
// ref::logits_reduce (float64): absolute error of log-sum-exp and of
// log p(target). The GPU sums FP32 expf terms (<= 2 ulp each, 1.2e-7
// relative) in FP64, so the error of lse is ~1e-7 for any vocabulary; the
// bound leaves a factor of 10. argmax and the non-finite count are exact.
inline constexpr double kLogitsReduce = 2e-6;  // observed on the H200: (first run pending)

// The GPU engine (tests/gpu_engine/engine_test.cpp) against the CPU quantized
// reference with the same INT4 weights and KV format. The yardstick is the
// reference's own spread when only its FP32 summation order changes (the same
// tokens one position per step instead of one chunk through its prompt path,
// rows marked BatchRow::prompt; its decode rows are one position per step
// exactly, so they would give no spread at all): measured on SmolLM2
// (x86-64 CPU, 2026-12-01, 120 tokens), mean / max relative L2 of the logits
// per row 1.2e-2 / 4.7e-2 with the BF16 cache, 0.22 / 0.78 with the INT4
// mirror, 0.14 / 1.0 with the rotated mirror: every BF16 re-rounding of 30
// layers, and with the mirror every K/V requantization, turns one-ulp
// differences into visible ones. The GPU (other summation orders, FP16/BF16
// attention operands) must stay within this factor of that spread.
inline constexpr double kGpuEngineVsSpread = 2.0;  // largest observed on the H200 (2026-12-01): 1.70
// With the INT4 mirror the spread itself is measured on a few dozen rows of
// a chaotic quantity (every requantization of a K/V row that a one-ulp
// difference moves across a rounding boundary), so the yardstick moves: in
// one H200 run (2026-12-02, prompt chunks of 32 rows) the ratio ranged 1.09 to
// 1.87 over sub-samples of the same engines; 3.0 leaves that noise room while
// a real defect (a wrong row, a wrong head) gives ratios of 10 and more.
inline constexpr double kGpuEngineVsSpreadInt4Kv = 3.0;
// The GPU engine on the tiny family checkpoints (tests/data/hf_tiny: two
// layers, hidden 256; Qwen2, Mistral, Llama-2) against the CPU engine, mean
// relative L2 of the prompt logits per row and argmax agreement. The
// self-spread yardstick above does not carry over to two-layer models: the
// CPU's chunk-vs-stepwise spread there is 3-5e-3 with either cache (few
// roundings to amplify), below what the GPU's BF16 activations alone cost.
// Measured on the H200: the plain Llama checkpoint 3.6e-3 / 1.8e-2 (BF16
// cache / INT4 mirror), Qwen2 9.4e-3 / 4.4e-2 (its biases added to BF16
// projections, rounded again), Mistral 3.8e-3 / 2.3e-2; argmax agreement
// 0.885-1.0. Fixed bounds at ~2x the largest: a mishandled family feature is
// two orders above them (the Qwen2 checkpoint with its q/k/v biases dropped:
// 1.23 on the CPU engine).
inline constexpr double kGpuEngineFamilyBf16 = 2e-2;
inline constexpr double kGpuEngineFamilyInt4Kv = 1e-1;
inline constexpr double kGpuEngineFamilyArgmax = 0.8;
// The perplexity of a 1,020-token excerpt with the INT4 mirror: the reference
// against itself under a change of chunking moved it by up to 2.7% (int4: 81.71
// vs 83.27 on the H200 run of 2026-12-02); the GPU, another order, is held to
// 5% of the reference's value when the two CPU runs happen to agree closely
// (the 32k-token comparison in docs/ACCURACY.md is the precise one).
inline constexpr double kGpuEnginePplExcerptInt4Kv = 5e-2;

// Tensor parallelism (tests/gpu_engine/tp_engine_test.cpp): TP N against TP 1 on the
// tiny synthetic model, relative L2 of the logits per step. The O and down
// partial sums are BF16 (each rank's GEMM output) summed by a BF16 NCCL
// all-reduce: about one more BF16 rounding per layer than TP 1 (2^-9
// relative), two layers. Not yet observed (no run on two or more GPUs yet).
inline constexpr double kTensorParallelLogits = 2e-2;
// Greedy agreement (argmax of a row) of the GPU with the CPU, allowed below the
// CPU's own stepwise-vs-chunk agreement by this margin. BF16 cache: 0.05 (the
// self agreement is 0.98-1.0). With the INT4 mirror the agreement itself is
// chaotic (the requantization above): the tests add three standard deviations
// of the difference of two agreement fractions on the rows compared
// (tests/gpu_engine/engine_test.cpp argmax_margin: 0.31 on 37 rows at p = 0.73),
// since a fixed 0.10 failed on a 37-row sample (GPU 0.595 vs CPU 0.730, H200,
// 2026-12-02) with the mean deviation within 1.9x the CPU's own spread.
inline constexpr double kGpuEngineArgmaxMargin = 0.05;
// SmolLM2 with q/k/v biases of RMS 0.6 (GpuEngineQwen2Style; one fixed
// draw): the GPU against the CPU engine, mean relative L2 of the prompt
// logits and argmax agreement, 120 rows. Such biases make the model chaotic:
// over seven fresh draws on the H200 the GPU ranged 0.021-0.071 / 0.86-0.97
// with the BF16 cache and 0.13-0.83 / 0.30-0.72 with the INT4 mirror, the
// CPU's own spread moving as much (0.018-0.054 / 0.08-0.23), so the spread
// is no yardstick here. An engine that drops the biases gives 5.4 / 0.000
// (BF16) and 5.0 / 0.000 (INT4 mirror), measured on the CPU engine: the
// bounds sit ~3x above the worst draw and an order of magnitude below that.
inline constexpr double kQwen2StyleBf16 = 0.25;
inline constexpr double kQwen2StyleInt4Kv = 2.0;
inline constexpr double kQwen2StyleArgmaxBf16 = 0.6;
inline constexpr double kQwen2StyleArgmaxInt4Kv = 0.15;

// The GPU FP8 prefill path against the CPU FP8 reference of the same numerics
// (tests/gpu_engine/prefill_test.cpp; gpu_engine/prefill.h lists what still differs). Each
// remaining difference can move an E4M3 rounding of an activation (3 mantissa
// bits: a flip is a 6% change of one value) and every amax, hence every scale
// of the next call, so the logits differ by far more than BF16 noise: the
// reference against itself with its default roundings (FP32 residual and
// q/k/v) moves by a mean relative L2 of 0.104 per row, argmax agreement 0.895
// on the 200-row prompt (2026-12-02); the GPU measured 0.112 / 0.920 against it
// (H200, before the q/k/v roundings joined the reference's GPU variant).
// Gross bounds (a wrong row, head or slot gives ~1) and the spread factor:
inline constexpr double kPrefillVsFp8RefMeanRel = 0.25;  // mean relative L2 of a row's logits
// Rows with the same argmax: the reference's own 0.895 less three binomial
// sigmas of a 200-row difference of fractions (sqrt(2 p (1 - p) / 200) = 0.03).
inline constexpr double kPrefillVsFp8RefArgmax = 0.80;
// ... and within this factor of the reference's own spread under its default
// roundings (the decode engine's kGpuEngineVsSpread idea).
inline constexpr double kPrefillVsFp8RefSpread = 2.0;
// Decode rows after an FP8 prefill vs after a prompt through the INT4 decode
// step: two different quantized models of the prompt (FP8 vs INT4 RTN K/V; the
// INT4 RTN model's perplexity is 40% above the FP8 one's), so only a gross
// bound: measured 0.41 with the BF16 cache (H200, 2026-12-02), while a control
// engine given another 120-token prompt measured 0.31, so this test cannot
// tell a right context from a plausible wrong one; the cache contents are
// checked byte for byte by MirrorEqualsTheDecodeAppendsBytes.
inline constexpr double kPrefillThenDecodeMeanRel = 0.6;
// The excerpt's perplexity, GPU prefill vs the CPU FP8 reference, relative
// (the 32k-token |delta| is measured by scripts/gpu-check.sh: docs/ACCURACY.md).
inline constexpr double kPrefillPplExcerpt = 2e-2;

}  // namespace futr::test::tol
