// Launchers, the explicit variant list and the heuristic of the decode GEMMs
// (see w4a16.h). The kernels: src/kernels/sm90_w4a16_{gemv,skinny}.cuh (and,
// with -DFUTR_DEV=ON, dev/kernels/sm90_w4a16_{stream,sk}.cuh).
#include "launch/w4a16.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "launch/check.h"
#include "launch/device.h"
#include "launch/w4a16_variant.cuh"

namespace futr::cuda {

namespace {

using w4a16::Variant;
constexpr size_t kSkMaxSmem = size_t(96) * 1024;  // sk: dynamic shared memory per CTA, at most

// ---- the compiled variants ---------------------------------------------------
// Exactly what decode_heuristic() can pick (the test
// W4A16Invalid.HeuristicStaysInsideTheCompiledList holds the two together).
// The stream and sk kernels and the tile shapes the heuristic never picks are
// in dev/launch/w4a16_dev.cu (-DFUTR_DEV=ON), measured in docs/PERF.md.
const Variant kVariants[] = {
    // M = 1: INT4 register-ring GEMV (one weight tile per warp, a 4-chunk ring).
    FUTR_GEMV(128, 1, 4),
    FUTR_GEMV(64, 1, 4),
    // M = 2..32: INT4 skinny (MT row tiles of 8, TN weight tiles per warp; TN = 2
    // at M = 9..16 for the wide group-128 matrices).
    FUTR_SKINNY4(128, 1, 1),
    FUTR_SKINNY4(128, 2, 1),
    FUTR_SKINNY4(128, 2, 2),
    FUTR_SKINNY4(128, 4, 1),
    FUTR_SKINNY4(64, 1, 1),
    FUTR_SKINNY4(64, 2, 1),
    FUTR_SKINNY4(64, 4, 1),
    // M = 1..32: the E4M3-weight comparison path.
    FUTR_SKINNY8(1, 2),
    FUTR_SKINNY8(2, 2),
    FUTR_SKINNY8(4, 1),
};

// Every compiled row: the list above, then dev/'s.
template <class F>
void for_each_variant(F&& f) {
  for (const Variant& v : kVariants)
    if (v.fn) f(v);
  for (const Variant& v : w4a16::dev_variants())
    if (v.fn) f(v);
}

const char* kind_name(DecodeKernel k) {
  switch (k) {
    case DecodeKernel::kGemv: return "gemv";
    case DecodeKernel::kSkinny: return "skinny";
    case DecodeKernel::kStream: return "stream";
    default: return "sk";
  }
}
bool is_stream_k(DecodeKernel k) { return k == DecodeKernel::kStream || k == DecodeKernel::kStreamK; }

std::string variant_name(const Variant& v) {
  std::ostringstream os;
  os << (v.format == DecodeWeights::kInt4 ? "int4 g" + std::to_string(v.group) : std::string("e4m3")) << " "
     << kind_name(v.kernel);
  if (v.kernel == DecodeKernel::kGemv) os << " tn=" << v.a << " loads=" << v.b;
  else if (v.kernel == DecodeKernel::kStreamK) os << " loads=" << v.b << " batches=" << v.a;
  else os << " mt=" << v.a << " tn=" << v.b;
  return os.str();
}

const Variant& find_variant(DecodeWeights f, int group, const DecodeConfig& c) {
  const int g = f == DecodeWeights::kInt4 ? group : 0;
  const int a =
      c.kernel == DecodeKernel::kGemv ? c.tn : (c.kernel == DecodeKernel::kStreamK ? c.batches : c.mt);
  const int b = c.kernel == DecodeKernel::kSkinny || c.kernel == DecodeKernel::kStream ? c.tn : c.loads;
  const Variant* exact = nullptr;
  const Variant* best = nullptr;
  double best_d = 1e30;
  for_each_variant([&](const Variant& v) {
    if (v.format != f || v.group != g || v.kernel != c.kernel || exact) return;
    if (v.a == a && v.b == b) {
      exact = &v;
      return;
    }
    const double d = std::fabs(std::log2(double(v.a) / std::max(a, 1))) +
                     std::fabs(std::log2(double(v.b) / std::max(b, 1)));
    if (d < best_d) best_d = d, best = &v;
  });
  if (exact) return *exact;
  if (!best) {
    std::string compiled;
    for_each_variant([&](const Variant& v) {
      const std::string k = (v.format == DecodeWeights::kInt4 ? "int4 g" + std::to_string(v.group) : "e4m3") +
                            std::string(" ") + kind_name(v.kernel);
      if (compiled.find(k) == std::string::npos) compiled += (compiled.empty() ? "" : ", ") + k;
    });
    fail(
        "decode GEMM: no compiled {} variant for {} (group {}); compiled: {} (the stream and sk kernels and "
        "the tiles the heuristic never picks are built with -DFUTR_DEV=ON, the weight formats by "
        "FUTR_W4A16_VARIANTS)",
        kind_name(c.kernel), f == DecodeWeights::kInt4 ? "INT4" : "E4M3", group, compiled);
  }
  fail("decode GEMM: no compiled variant '{}' (group {}); nearest supported: '{}'", describe(c), g,
       variant_name(*best));
}

int num_blocks(int k) { return (k + 127) / 128; }

// Raises the variant's dynamic shared-memory limit once and returns how many
// of its CTAs fit on one SM (cached: occupancy queries cost host time).
int prepare(const Variant& v) {
  static std::mutex mu;
  static std::map<const void*, int> occ;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = occ.find(v.fn); it != occ.end()) return it->second;
  // gemv: its split's slice of x (kb_per_split x 256 bytes, set per launch).
  const size_t max_smem = v.kernel == DecodeKernel::kGemv      ? size_t(160) * 1024
                          : v.kernel == DecodeKernel::kStreamK ? kSkMaxSmem
                                                               : v.smem;
  // NOTE: the opt-in is needed above 48 KB of dynamic plus static shared memory
  // (the kernels declare a few words statically): raised for every variant.
  if (max_smem > 0)
    FUTR_CUDA_CHECK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(max_smem)));
  int blocks = 0;
  FUTR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, v.fn, v.threads, v.smem));
  FUTR_CHECK(blocks > 0,
             "decode GEMM: variant needs more resources than one SM has ({} bytes of shared memory)", v.smem);
  occ[v.fn] = blocks;
  return blocks;
}

struct SplitPlan {
  int kb_per_split, splits;
};
SplitPlan split_plan(int k, int splits) {
  const int nblk = num_blocks(k);
  const int s = std::clamp(splits, 1, nblk);
  const int kbps = (nblk + s - 1) / s;
  return {kbps, (nblk + kbps - 1) / kbps};
}

// CTAs along N: 8 warps x tn tiles of 16 channels each (gemv, skinny); the
// stream kernel's columns are tile groups of 8 tiles (its tn splits a group
// between fewer warps).
int col_ctas(const DecodeConfig& c, int n) {
  if (is_stream_k(c.kernel)) return (n / 16 + 7) / 8;
  return (n / 16 + 8 * c.tn - 1) / (8 * c.tn);
}

// Stream kernel: its items (tile group x k128 block) and the grid it runs with.
int stream_items(int n, int k) { return ((n / 16 + 7) / 8) * num_blocks(k); }
int stream_runs(const DecodeConfig& c, int n, int k) {  // 0: one per CTA
  return c.run > 0 ? (stream_items(n, k) + c.run - 1) / c.run : 0;
}
// The sk kernel stages its chunks' x rows and scales in shared memory (its
// rows' chunk_smem, at most kSkMaxSmem per CTA; every sk row of a group stages
// the same bytes), so a grid too small for that is raised (ctas= below it is
// honoured as far as it fits). 1 when no sk row is compiled (a request for sk
// then fails naming the compiled variants).
int sk_max_items(int group, int m) {
  size_t (*chunk_smem)(int, int) = nullptr;
  for_each_variant([&](const Variant& v) {
    if (v.kernel == DecodeKernel::kStreamK && v.group == group) chunk_smem = v.chunk_smem;
  });
  if (!chunk_smem) return 1;
  int items = 1;
  auto bytes = [&](int it) { return chunk_smem(m, 2 * it); };
  while (bytes(2 * items) <= kSkMaxSmem) items *= 2;
  while (bytes(items + 1) <= kSkMaxSmem) ++items;
  return items;
}
int stream_grid(const DecodeConfig& c, int n, int k, int resident, int group = 0, int m = 1) {
  const int items = stream_items(n, k);
  int g = c.run > 0 ? stream_runs(c, n, k) : items;
  if (c.ctas > 0) g = std::min(g, c.ctas);
  if (resident > 0) g = std::min(g, resident);
  if (c.kernel == DecodeKernel::kStreamK) {
    // At most a group's items per CTA (the kernel has two segments at most),
    // and what its shared memory holds.
    const int per = std::min(sk_max_items(group, m), num_blocks(k));
    g = std::max(g, (items + per - 1) / per);
  }
  return std::max(g, 1);
}

void check_shape(DecodeWeights f, const DecodeArgs& a) {
  const char* fmt_name = f == DecodeWeights::kInt4 ? "W4A16" : "W8A16";
  FUTR_CHECK(a.m >= 1 && a.m <= 64, "{} decode GEMM: M = {} outside the supported 1..64", fmt_name, a.m);
  FUTR_CHECK(a.n >= 16 && a.n % 16 == 0, "{} decode GEMM: N = {} must be a positive multiple of 16", fmt_name,
             a.n);
  FUTR_CHECK(a.k >= 64 && a.k % 64 == 0, "{} decode GEMM: K = {} must be a positive multiple of 64", fmt_name,
             a.k);
  if (f == DecodeWeights::kInt4) {
    FUTR_CHECK(a.group == 64 || a.group == 128,
               "W4A16 decode GEMM: group size {} not supported (compiled: 64, 128)", a.group);
    FUTR_CHECK(a.k % a.group == 0,
               "W4A16 decode GEMM: K = {} is not a multiple of the group size {}; "
               "nearest supported: group 64",
               a.k, a.group);
  }
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const void* x = a.norm ? a.norm->x : a.x;
  FUTR_CHECK(a.w && a.scales && x && a.y, "{} decode GEMM: null operand pointer", fmt_name);
  FUTR_CHECK(aligned(a.w) && aligned(x) && aligned(a.y) && aligned(a.scales),
             "{} decode GEMM: operands must be 16-byte aligned", fmt_name);
  if (a.norm) {
    const DecodeNormInput& n = *a.norm;
    auto aligned8 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7) == 0; };
    FUTR_CHECK(n.add && n.gain && n.x_out && n.x_out != n.x && aligned(n.x_out) && aligned8(n.add) &&
                   aligned8(n.gain) && std::isfinite(n.eps) && n.eps >= 0,
               "W4A16 decode GEMM (RMSNorm input): x, add, gain and x_out (another buffer than x) must be "
               "non-null and aligned (x, x_out 16 bytes, add, gain 8), eps finite >= 0");
    FUTR_CHECK(a.m <= kDecodeGemvMaxRows && a.k <= kDecodeNormMaxK && f == DecodeWeights::kInt4,
               "W4A16 decode GEMM (RMSNorm input): fused into the INT4 gemv only (M <= {}, K <= {}); got M = "
               "{}, K = {}",
               kDecodeGemvMaxRows, kDecodeNormMaxK, a.m, a.k);
  }
}

}  // namespace

#if !FUTR_DEV
std::span<const w4a16::Variant> w4a16::dev_variants() { return {}; }
#endif

static_assert(device::kGemvMaxRows == kDecodeGemvMaxRows, "the gemv's rows: one number");

std::string describe(const DecodeConfig& c) {
  std::ostringstream os;
  os << kind_name(c.kernel);
  if (c.kernel == DecodeKernel::kGemv) os << " tn=" << c.tn << " loads=" << c.loads;
  else if (c.kernel == DecodeKernel::kStreamK) os << " loads=" << c.loads << " batches=" << c.batches;
  else os << " mt=" << c.mt << " tn=" << c.tn;
  if (is_stream_k(c.kernel)) {
    os << " ctas=" << c.ctas;
    if (c.run) os << " run=" << c.run;
    if (c.pdl) os << " pdl";
  } else {
    os << " splits=" << c.splits;
    if (c.fold > 0) os << " fold=" << c.fold;
    if (c.seq) os << " seq";
  }
  return os.str();
}

std::vector<std::string> decode_variants() {
  std::vector<std::string> v;
  for_each_variant([&](const Variant& x) { v.push_back(variant_name(x)); });
  return v;
}

bool decode_compiled(DecodeWeights f, int group, const DecodeConfig& c) {
  try {
    const Variant& v = find_variant(f, group, c);
    (void)v;
    return true;
  } catch (const Error&) {
    return false;
  }
}

// ---- the heuristic -------------------------------------------------------------
// Measured on the H200 (docs/PERF.md; w4a16_bench --sweep): the kernels are
// latency-bound, so the configuration that keeps the most bytes in flight per
// SM wins. Kernel and tiles per warp, by M:
//   M = 1 (INT4): the gemv (TM = 1, a 4-chunk register ring, 4 CTAs/SM).
//     (The sweep measured two tiles per warp 6-13% faster on the 8B / 70B
//     gate_up and down projections alone, but the decode step got slower
//     with them: 8B batch 1 2.68 -> 2.78 ms; not applied.)
//   M >= 2: skinny, MT = ceil(M/8) rounded to 1, 2, 4; two tiles per warp
//     (2 CTAs/SM; group 128, the compiled variants) at M = 9..16 and
//     N >= 8192 (8B gate_up M = 16: 50.3 -> 41.3 us, 70B gate_up 152 -> 92 us).
// The split count is a function of (N, K) alone, never of M (decode_splits):
// the gemv and skinny kernels run the same per-row arithmetic (the chunk MMAs,
// the group scaling and the in-order reduction of sm90_w4a16_common.cuh), so
// with one K split a row's output has the same bits whatever rows share its
// launch (batch invariance: a greedy request gives the same tokens alone and
// in any batch). The reduction's order is a property of the shape too: the
// splits summed in groups (decode_fold), then the groups. What M still
// chooses is how the splits run: one CTA per split (small M: parallelism)
// or, for the skinny kernel, a CTA per group folding its splits' sums in the
// reduction's order (DecodeConfig::seq: large M, where the partials' traffic
// costs more than the parallelism gains; measured on the H200, 8B gate_up at
// M = 32: 72.6 us with two split CTAs, 57.6 with one). M > 32 runs as launches of 32 rows (mt = 4). The
// stream (bulk copy) and sk (stream-K) kernels measured slower (docs/PERF.md): they are in dev/
// (-DFUTR_DEV=ON) and run only on request.
namespace {

struct KernelChoice {
  DecodeConfig c;
  int ctas_per_sm;
};

KernelChoice kernel_for(DecodeWeights f, int m, int n, int group) {
  KernelChoice k;
  DecodeConfig& c = k.c;
  k.ctas_per_sm = 2;
  const bool int4 = f == DecodeWeights::kInt4;
  if (int4 && m == 1) {
    c.kernel = DecodeKernel::kGemv;
    c.tn = 1;
    c.loads = 4;
    k.ctas_per_sm = 4;
  } else {
    c.kernel = DecodeKernel::kSkinny;
    c.mt = m <= 8 ? 1 : (m <= 16 ? 2 : 4);
    if (int4) {
      const bool wide = group == 128 && c.mt == 2 && n >= 8192;
      c.tn = wide ? 2 : 1;
      k.ctas_per_sm = c.tn == 2 ? 2 : (c.mt == 1 ? 4 : (c.mt == 2 ? 3 : 2));
    } else {
      c.tn = c.mt == 4 ? 1 : 2;
    }
  }
  return k;
}

// The wave model of one launch of M rows with `ctas` CTAs along K of `kbps`
// k128 blocks each: waves * (kbps + 4) (the 4: a CTA's fixed cost, ring fill
// and epilogue), plus the partial sums' L2 traffic (grows with M and the
// partials). With 9 or more rows and at most 8 k128 blocks a split costs
// 1.15-1.45x more than the model says (measured: SmolLM2's K = 576 at M = 16 /
// 32, one split against five).
double grid_cost(DecodeWeights f, int m, int n, int k, int ctas, int kbps, int sm_count, int group) {
  const KernelChoice kc = kernel_for(f, m, n, group);
  const int slots = kc.ctas_per_sm * std::max(sm_count, 1);
  const int waves = (col_ctas(kc.c, n) * ctas + slots - 1) / slots;
  double cost = double(waves) * (kbps + 4) + (ctas > 1 ? 0.05 * m * (1.0 + 0.25 * ctas) : 0.0);
  if (ctas > 1 && m >= 9 && num_blocks(k) <= 8) cost *= 1.6;
  return cost;
}

// A CTA per group of `fold` splits (0: one group): how many CTAs along K, and
// the k128 blocks of each.
SplitPlan group_plan(int k, int splits, int fold) {
  const SplitPlan sp = split_plan(k, splits);
  const int g = fold > 0 ? std::min(fold, sp.splits) : sp.splits;
  const int kbps = std::min(g * sp.kb_per_split, num_blocks(k));
  return {kbps, (num_blocks(k) + kbps - 1) / kbps};
}

// The cheaper way to run s splits (reduced in groups of `fold`) at M rows: one
// CTA per split, or (skinny, M >= 2) a CTA per group folding its splits in turn
// (DecodeConfig::seq; one group: one CTA along K, no partials). Several
// groups only where one CTA per split takes more than one wave: within one
// wave the model's partial traffic overstates what fewer CTAs along K save
// (measured: SmolLM2's down at M = 32, 60 CTAs, 12 splits in 6 groups 2x
// slower than one CTA per split).
double run_cost(DecodeWeights f, int m, int n, int k, int s, int fold, int sm_count, int group,
                bool* seq = nullptr) {
  const SplitPlan sp = split_plan(k, s);
  const double par = grid_cost(f, m, n, k, sp.splits, sp.kb_per_split, sm_count, group);
  const KernelChoice kc = kernel_for(f, m, n, group);
  const SplitPlan gp = group_plan(k, s, fold);
  const bool one_wave = col_ctas(kc.c, n) * sp.splits <= kc.ctas_per_sm * std::max(sm_count, 1);
  const bool can_seq = sp.splits > 1 && kc.c.kernel == DecodeKernel::kSkinny && (gp.splits == 1 || !one_wave);
  const double sq = can_seq ? grid_cost(f, m, n, k, gp.splits, gp.kb_per_split, sm_count, group) : par;
  if (seq) *seq = can_seq && sq < par;
  return std::min(par, sq);
}

// One split count and one reduction group size for every M: the pair
// minimizing the sum over the decode buckets (M = 1, 2, 4, 8, 16, 32) of each
// bucket's modelled cost relative to its own best (so no bucket is sacrificed
// to another); ties go to fewer splits (less partial traffic), then to one
// group. The groups give the large-M launches a middle way between one CTA per
// split and one CTA for all of K (8B down at M = 32: 16 splits 44.1 us, all in
// one CTA 152.5, 8 CTAs of two 38.2; docs/PERF.md) with every M's bits the same.
struct SplitChoice {
  int splits, fold;
};
SplitChoice split_choice(DecodeWeights f, int n, int k, int sm_count, int group) {
  constexpr int kBuckets[] = {1, 2, 4, 8, 16, 32};
  const int max_s = std::min(16, num_blocks(k));
  // The candidates: s splits in groups of g (g = s: one group), each group
  // count once.
  std::vector<SplitChoice> cands;
  for (int s = 1; s <= max_s; ++s) {
    if (split_plan(k, s).splits != s) continue;  // equivalent to a smaller count
    int last_groups = 0;
    for (int g = s; g >= 1; --g) {
      const int groups = (s + g - 1) / g;
      if (groups == last_groups) continue;
      last_groups = groups;
      cands.push_back({s, g == s ? 0 : g});
    }
  }
  double best_m[6];
  for (int b = 0; b < 6; ++b) {
    best_m[b] = 1e30;
    for (const SplitChoice& c : cands)
      best_m[b] = std::min(best_m[b], run_cost(f, kBuckets[b], n, k, c.splits, c.fold, sm_count, group));
  }
  double best = 1e30;
  SplitChoice pick{1, 0};
  for (const SplitChoice& c : cands) {
    double total = 0;
    for (int b = 0; b < 6; ++b)
      total += run_cost(f, kBuckets[b], n, k, c.splits, c.fold, sm_count, group) / best_m[b];
    if (total < best - 1e-9) best = total, pick = c;
  }
  return pick;
}

}  // namespace

int decode_splits(DecodeWeights f, int n, int k, int sm_count, int group) {
  return split_choice(f, n, k, sm_count, group).splits;
}

int decode_fold(DecodeWeights f, int n, int k, int sm_count, int group) {
  return split_choice(f, n, k, sm_count, group).fold;
}

DecodeConfig decode_heuristic(DecodeWeights f, int m, int n, int k, int sm_count, int group) {
  m = std::min(m, 32);
  DecodeConfig c = kernel_for(f, m, n, group).c;
  const SplitChoice sc = split_choice(f, n, k, sm_count, group);
  c.splits = sc.splits;
  c.fold = sc.fold;
  run_cost(f, m, n, k, c.splits, c.fold, sm_count, group, &c.seq);
  return c;
}

// The stream kernel's configuration for (M, N, K): mt = ceil(M/8) rounded to
// 1, 2, 4, one weight tile per warp, as many CTAs as are resident at once (the
// variant's __launch_bounds__ minimum per SM): stream-K then gives every CTA
// the same bytes in one wave.
DecodeConfig decode_stream_heuristic(DecodeWeights f, int m, int n, int k, int sm_count) {
  m = std::min(m, 32);
  DecodeConfig c;
  c.kernel = DecodeKernel::kStream;
  c.mt = m <= 8 ? 1 : (m <= 16 ? 2 : 4);
  c.tn = 1;
  const int per_sm = c.mt == 1 ? 3 : 2;
  c.ctas = std::min(stream_items(n, k), per_sm * std::max(sm_count, 1));
  (void)f;
  return c;
}

DecodeConfig apply_overrides(DecodeConfig c, const std::string& spec) {
  std::istringstream is(spec);
  std::string item;
  while (std::getline(is, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    FUTR_CHECK(eq != std::string::npos, "config override '{}': expected key=value", item);
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "kernel") {
      FUTR_CHECK(val == "gemv" || val == "skinny" || val == "stream" || val == "sk",
                 "config override kernel={}: expected gemv, skinny, stream or sk", val);
      c.kernel = val == "gemv"     ? DecodeKernel::kGemv
                 : val == "skinny" ? DecodeKernel::kSkinny
                 : val == "stream" ? DecodeKernel::kStream
                                   : DecodeKernel::kStreamK;
      continue;
    }
    if (key == "pdl") {
      FUTR_CHECK(val == "0" || val == "1", "config override pdl={}: expected 0 or 1", val);
      c.pdl = val == "1";
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(val.c_str(), &end, 10);
    FUTR_CHECK(
        end && *end == 0 && v >= (key == "probe" || key == "seq" || key == "fold" ? 0 : 1) && v <= 100000,
        "config override {}={}: expected a positive integer", key, val);
    if (key == "loads") c.loads = int(v);
    else if (key == "mt") c.mt = int(v);
    else if (key == "batches") c.batches = int(v);
    else if (key == "tn") c.tn = int(v);
    else if (key == "splits") c.splits = int(v);
    else if (key == "seq") c.seq = v != 0;
    else if (key == "fold") c.fold = int(v);
    else if (key == "ctas") c.ctas = int(v);
    else if (key == "run") c.run = int(v);
    else if (key == "probe") c.probe = int(v);
    else
      fail(
          "config override: unknown key '{}' (kernel, tn, loads, batches, mt, splits, fold, seq, ctas, run, "
          "pdl)",
          key);
  }
  return c;
}

size_t decode_workspace_floats(const DecodeConfig& c, int m, int n, int k) {
  m = std::min(m, 32);        // M > 32 runs as launches of at most 32 rows
  if (is_stream_k(c.kernel))  // ws[group + run][M][128] (runs: the grid's bound, or ceil(T/R))
    return size_t(col_ctas(c, n) + (c.run > 0 ? stream_runs(c, n, k) : stream_grid(c, n, k, 0, 64, m))) *
           size_t(m) * 128;
  const SplitPlan sp = c.seq ? group_plan(k, c.splits, c.fold) : split_plan(k, c.splits);
  return sp.splits > 1 ? size_t(sp.splits) * size_t(m) * size_t(n) : 0;
}

size_t decode_counters(const DecodeConfig& c, int n) { return size_t(col_ctas(c, n)); }

DecodeConfig decode_as_gemv(DecodeConfig c) {
  c.kernel = DecodeKernel::kGemv, c.tn = 1, c.loads = 4, c.mt = 1, c.seq = false;
  return c;
}

// The rows' x slices (gemv_x_stride uint4 each: kb_per_split x 256 B, padded
// for several rows) and the tiles' scales (8 tn x groups x 32 B).
size_t decode_gemv_smem(const DecodeConfig& c, int m, int k, int group) {
  const SplitPlan sp = split_plan(k, c.splits);
  return size_t(m) * size_t(device::gemv_x_stride(2 * sp.kb_per_split, m)) * 16 +
         size_t(8 * c.tn) * size_t((sp.kb_per_split * 128 + group - 1) / group) * 32;
}

int decode_occupancy(DecodeWeights f, int group, const DecodeConfig& c) {
  return prepare(find_variant(f, group, c));
}

w4a16::DecodeLaunch w4a16::decode_launch(DecodeWeights f, const DecodeArgs& a, const DecodeConfig& c) {
  check_shape(f, a);
  FUTR_CHECK(a.m <= 32, "decode GEMM: one launch takes at most 32 rows, got {}", a.m);
  const Variant& v = find_variant(f, a.group, c);
  FUTR_CHECK(!a.x_swiglu || c.kernel == DecodeKernel::kGemv || c.kernel == DecodeKernel::kStreamK,
             "decode GEMM ({}): the SwiGLU input is fused into the gemv and sk kernels (M <= 8) only",
             describe(c));
  FUTR_CHECK(!a.norm || (c.kernel == DecodeKernel::kGemv && !a.x_swiglu),
             "decode GEMM ({}): the RMSNorm input is fused into the gemv kernel only (and not with the "
             "SwiGLU input)",
             describe(c));
  if (c.kernel == DecodeKernel::kGemv)
    FUTR_CHECK(a.m <= kDecodeGemvMaxRows,
               "decode GEMM: the gemv kernel takes M <= {}, got M = {}; use kernel=skinny",
               kDecodeGemvMaxRows, a.m);
  else if (c.kernel == DecodeKernel::kStreamK)
    FUTR_CHECK(a.m <= 8, "decode GEMM: the sk kernel takes M <= 8, got M = {}; use kernel=skinny", a.m);
  else
    FUTR_CHECK(a.m <= 8 * c.mt, "decode GEMM: M = {} needs mt >= {} (got mt = {})", a.m, (a.m + 7) / 8, c.mt);
  const bool stream = is_stream_k(c.kernel);
  FUTR_CHECK(!c.seq || c.kernel == DecodeKernel::kSkinny,
             "decode GEMM ({}): sequential splits are the skinny "
             "kernel's",
             describe(c));
  // Sequential splits: a CTA per group of splits (one group: the whole of K as
  // its slice), folding at the splits' boundaries.
  const SplitPlan arith = split_plan(a.k, stream ? 1 : c.splits);
  const SplitPlan sp = c.seq ? group_plan(a.k, c.splits, c.fold) : arith;
  // The stream kernel's workspace is checked against its bound for c (the grid
  // may shrink below c.ctas to what is resident, never grow).
  const size_t need_ws = decode_workspace_floats(c, a.m, a.n, a.k);
  const size_t need_ctr = decode_counters(c, a.n);
  if (stream || sp.splits > 1) {
    FUTR_CHECK(a.ws && a.ws_floats >= need_ws,
               "decode GEMM ({}): split-K workspace of {} floats needed, {} given", describe(c), need_ws,
               a.ws_floats);
    FUTR_CHECK(a.counters && a.n_counters >= need_ctr,
               "decode GEMM ({}): {} split-K counters needed, {} given", describe(c), need_ctr, a.n_counters);
  }
  const int resident = prepare(v) * require_device().sm_count;
  const int grid_x = stream ? stream_grid(c, a.n, a.k, resident, a.group, a.m) : col_ctas(c, a.n);
  device::DecodeParams p{static_cast<const uint8_t*>(a.w),
                         a.scales,
                         static_cast<const __nv_bfloat16*>(a.x),
                         static_cast<__nv_bfloat16*>(a.y),
                         a.ws,
                         a.counters,
                         a.m,
                         a.n,
                         a.k,
                         sp.kb_per_split,
                         sp.splits,
                         stream ? c.run : 0,
                         stream ? c.probe : 0,
                         a.x_swiglu ? 1 : 0,
                         a.norm ? 1 : 0,
                         a.norm ? a.norm->x : nullptr,
                         a.norm ? a.norm->add : nullptr,
                         a.norm ? a.norm->gain : nullptr,
                         a.norm ? a.norm->x_out : nullptr,
                         a.norm ? a.norm->eps : 0.f,
                         c.seq && arith.splits > 1 ? 2 * arith.kb_per_split : 0,
                         c.seq ? 1 : c.fold};
  DecodeLaunch out{p, stream ? dim3(unsigned(grid_x)) : dim3(unsigned(grid_x), unsigned(sp.splits)), &v, 0};
  size_t& smem = out.smem;
  if (c.kernel == DecodeKernel::kGemv) smem = decode_gemv_smem(c, a.m, a.k, a.group);
  else if (c.kernel ==
           DecodeKernel::kStreamK) {  // the CTA's x rows and scales (at most 2 x ceil(T/P) chunks)
    const int maxc = 2 * ((stream_items(a.n, a.k) + grid_x - 1) / grid_x);
    smem = v.chunk_smem(a.m, maxc);
  } else smem = v.smem;
  FUTR_CHECK(
      smem <= size_t(160) * 1024,
      "decode GEMM ({}): K = {} in {} split(s) stages {} bytes of x, more than 160 KB; use more splits",
      describe(c), a.k, sp.splits, smem);
  return out;
}

void decode_gemm(DecodeWeights f, const DecodeArgs& a, const DecodeConfig& c, cudaStream_t s) {
  check_shape(f, a);
  if (a.m > 32) {  // M = 33..64: two launches of rows [0, 32) and [32, M) (the weights are read twice)
    DecodeArgs lo = a, hi = a;
    lo.m = 32;
    hi.m = a.m - 32;
    hi.x = static_cast<const uint16_t*>(a.x) + size_t(32) * a.k;
    hi.y = static_cast<uint16_t*>(a.y) + size_t(32) * a.n;
    decode_gemm(f, lo, c, s);
    decode_gemm(f, hi, c, s);
    return;
  }
  w4a16::DecodeLaunch l = w4a16::decode_launch(f, a, c);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = l.grid;
  cfg.blockDim = dim3(unsigned(l.variant->threads));
  cfg.dynamicSmemBytes = l.smem;
  cfg.stream = s;
  // PDL: every kernel issues its first weight loads before griddepcontrol.wait
  // and touches x, ws, counters and y only after it (ptx/pdl.cuh).
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = c.pdl ? 1 : 0;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  void* args[] = {&l.p};
  FUTR_CUDA_CHECK(cudaLaunchKernelExC(&cfg, l.variant->fn, args));
}

}  // namespace futr::cuda
