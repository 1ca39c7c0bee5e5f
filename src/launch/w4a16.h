// Launchers of the decode GEMMs with weight-only quantization (W4A16 and the
// W8A16 comparison path): y[M,N] (BF16) = x[M,K] (BF16) * W[N,K]^T, 1 <= M <= 64.
//
//   W4A16: W = q * s, q symmetric INT4 in [-8, 7], s FP16 per output channel per
//          group of G = 128 or 64 inputs, both in fragment order
//          (src/kernels/layout/int4_fragment.cuh, docs/LAYOUTS.md).
//   W8A16: W = e4m3 * s, s FP32 per output channel, fragment order.
//
// Kernels: sm90_w4a16_gemv (M = 1..8, register ring, x staged in shared
// memory; the heuristic's choice at M = 1, and the kernel that takes the fused
// SwiGLU and RMSNorm inputs) and sm90_w4a16_skinny (M = 2..32, lane-private
// cp.async ring), both splitting K with a last-CTA reduction and computing a
// row's output with the same bits. M = 33..64 runs as two launches of at
// most 32 rows. Every kernel supports programmatic dependent launch
// (DecodeConfig::pdl). The stream (warp-specialised bulk-copy ring, stream-K
// over the resident CTAs) and sk (stream-K gemv) kernels measured slower
// (docs/PERF.md) and are built only in dev/ (-DFUTR_DEV=ON); kernel=stream and
// kernel=sk request them there.
// The configuration comes from a heuristic (decode_heuristic) or the caller;
// only the variants listed in w4a16.cu (and, with FUTR_DEV, dev/) are compiled
// (decode_variants()), and any other request fails with a futr::Error naming
// the nearest compiled one.
//
// Everything here is graph-capturable: no allocation, no synchronization; the
// split-K workspace and counters are the caller's (W4Linear owns them).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace futr::cuda {

enum class DecodeKernel { kGemv, kSkinny, kStream, kStreamK };

// One launch configuration; every field can be overridden from the benchmark's
// command line (apply_overrides).
struct DecodeConfig {
  DecodeKernel kernel = DecodeKernel::kGemv;
  int tn = 1;        // weight tiles of 16 channels per warp (a CTA: 8 warps, 128 * tn channels)
  int loads = 4;     // gemv: register-ring depth in k64 chunks (tn * loads 16-byte loads in flight);
                     // sk: chunks per load batch
  int batches = 1;   // sk: batches of `loads` chunks in flight (1: 4 CTAs/SM; 2: 3 CTAs/SM)
  int mt = 1;        // skinny: tiles of 8 rows of x (1: M <= 8, 2: M <= 16, 4: M <= 32)
  int splits = 1;    // gemv / skinny: K slices over gridDim.y (1 = no workspace)
  int fold = 0;      // gemv / skinny: the reduction sums the splits in groups of `fold` (each
                     // group from 0, then the groups in order; 0 = one group of all `splits`).
                     // A property of the shape like `splits` (decode_fold): it fixes the bits
  bool seq = false;  // skinny: each group's slices run one after another in one CTA along K, their
                     // sums folded in the reduction's order: the same bits as one CTA per split,
                     // a group's sum as the CTA's partial (one group: no workspace; large M, where
                     // the partials' traffic costs more than the parallelism gains)
  int ctas = 0;      // stream: grid size (0 = every CTA that can be resident; clamped to that)
  int run = 0;       // stream: 0 = one contiguous item range per CTA (stream-K); R > 0 = runs
                     // of R items (tile group x k128 block) dealt round-robin to the CTAs
  int probe = 0;     // stream, measurement only: 1 no scale copies, 2 no activation copies,
                     // 4 consumers only wait and release (results are wrong when set)
  bool pdl = false;  // launch with programmatic dependent launch (every kernel streams its
                     // first weights before griddepcontrol.wait)
};

// The weight encoding a decode GEMM reads (a kernel operand, not a model
// format: the model's formats are core/number_formats.h): INT4 group-scaled (W4A16,
// WeightFormat::kInt4's decode layout) or E4M3 per channel (W8A16, the FP8
// weights of WeightFormat::kFp8 read by the decode kernels).
enum class DecodeWeights { kInt4, kE4M3 };

// "gemv tn=1 loads=4 splits=1" / "skinny mt=1 tn=2 splits=4" / "stream mt=1 tn=1 ctas=396 pdl".
std::string describe(const DecodeConfig& c);

// The configuration the engine uses for (M, N, K) on a GPU with `sm_count`
// multiprocessors and INT4 group size `group` (pdl off: the caller opts in).
// Its K split is decode_splits(): the same for every M, so a row's output has
// the same bits in a launch of any number of rows (batch invariance).
DecodeConfig decode_heuristic(DecodeWeights f, int m, int n, int k, int sm_count, int group = 128);
// The K split count of (N, K) for every M (decode_heuristic's splits).
int decode_splits(DecodeWeights f, int n, int k, int sm_count, int group = 128);
// The reduction's group size of (N, K) for every M (decode_heuristic's fold;
// 0 = one group): the size that lets the large-M launches run a CTA per group.
int decode_fold(DecodeWeights f, int n, int k, int sm_count, int group = 128);
// The stream kernel's configuration (dev/ only, measured slower: docs/PERF.md).
DecodeConfig decode_stream_heuristic(DecodeWeights f, int m, int n, int k, int sm_count);

// Applies "key=value[,key=value...]" (kernel=gemv|skinny|stream, tn, loads, mt,
// splits, ctas, pdl=0|1)
// on top of `base`. Throws futr::Error on an unknown key or bad value.
DecodeConfig apply_overrides(DecodeConfig base, const std::string& spec);

// The compiled variants, one line each ("int4 g128 gemv tn=1 loads=4", ...).
std::vector<std::string> decode_variants();
// Whether the variant `c` selects (kernel and tiles; not the grid) is compiled.
bool decode_compiled(DecodeWeights f, int group, const DecodeConfig& c);

// The gemv kernel's rows at most (device::kGemvMaxRows).
inline constexpr int kDecodeGemvMaxRows = 8;

// Device operands of one launch.
// gemv only (M <= kDecodeGemvMaxRows): the input is bf16(RMSNorm(v) g), v = x + bf16(add) (the
// residual step of cuda::rmsnorm's add mode, fused into the GEMM that reads
// its output); v is stored to x_out, a buffer other than x. K <= 8192.
inline constexpr int kDecodeNormMaxK =
    8192;  // the widest row the fused RMSNorm input takes (70B's hidden size)
struct DecodeNormInput {
  const float* x = nullptr;        // [M, K] FP32 residual
  const uint16_t* add = nullptr;   // [M, K] BF16
  const uint16_t* gain = nullptr;  // [K] BF16
  float* x_out = nullptr;          // [M, K] FP32: x + add
  float eps = 1e-5f;
};

struct DecodeArgs {
  const void* w = nullptr;       // packed weights (fragment order)
  const void* scales = nullptr;  // INT4: FP16 [N/8][K/G][8] fragment order; E4M3: FP32 [N]
  const void* x = nullptr;       // [M, K] BF16
  void* y = nullptr;             // [M, N] BF16
  float* ws = nullptr;           // split-K partials, >= decode_workspace_floats()
  size_t ws_floats = 0;
  uint32_t* counters = nullptr;  // split-K arrival counters, zeroed once, >= decode_counters()
  size_t n_counters = 0;
  int m = 0, n = 0, k = 0;
  int group = 128;                        // INT4 group size (64 or 128); ignored for E4M3
  bool x_swiglu = false;                  // gemv only: x is [M, 2K] gate|up, the input bf16(silu(gate) * up)
  const DecodeNormInput* norm = nullptr;  // gemv only: the RMSNorm fused in (x unused then)
};

// Workspace the configuration needs for M rows (0 unless it splits K).
size_t decode_workspace_floats(const DecodeConfig& c, int m, int n, int k);
// Split-K counters the configuration needs (one per column CTA).
size_t decode_counters(const DecodeConfig& c, int n);

// Validates shapes, pointers, configuration and workspace, then launches on `s`.
void decode_gemm(DecodeWeights f, const DecodeArgs& a, const DecodeConfig& c, cudaStream_t s);

// `c`'s K split and reduction run by the gemv kernel (the same bits for each of
// up to kDecodeGemvMaxRows rows): the configuration of the decode step's
// projections that take the fused RMSNorm or SwiGLU input.
DecodeConfig decode_as_gemv(DecodeConfig c);

// Dynamic shared memory of one gemv CTA for M rows of K inputs in c.splits
// slices (the rows' x slices and the tiles' scales); the launch refuses more
// than 160 KB (a caller choosing the gemv for several rows checks it first).
size_t decode_gemv_smem(const DecodeConfig& c, int m, int k, int group);

// Resident CTAs per SM of the variant `c` selects (cudaOccupancy...), for reports.
int decode_occupancy(DecodeWeights f, int group, const DecodeConfig& c);

}  // namespace futr::cuda
