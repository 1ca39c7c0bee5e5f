// Prefill attention benchmark: causal GQA of packed prompt chunks
// over the BF16 cache, at the Llama-3.1-8B (32 query heads / 8 KV heads, head
// dim 128) and SmolLM2-135M (9 / 3, head dim 64) attention shapes, for every
// `requests x length` of the list (no prefix: the shapes the peer can run) and
// the chunked-prefill rows (`--chunks`: new rows over a prefix). Per row: time
// (median of CUDA-graph replays, L2 flushed by a clean read pass before each
// rep), causal FLOP/s (4 D per visible query-key pair and head), % of the
// BF16 dense ceiling measured in the same run, and PyTorch SDPA (flash and
// cuDNN backends, bench/peers/torch_prefill_attention_peer.py, same device
// call) with our speed relative to the faster one. Prints markdown, writes
// JSON, and a TARGET line (>= 0.8x the faster SDPA backend).
//
// usage: prefill_attention_bench [--shapes 1x8192,4x2048,16x512] [--chunks 4x512+1536]
//          [--models llama-3.1-8b,smollm2-135m] [--reps N] [--peers sdpa.json] [--json out.json]
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/harness.h"
#include "core/error.h"
#include "launch/buffer.h"
#include "launch/check.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/prefill_attention.h"
#include "launch/stream.h"

using namespace futr;
using json = nlohmann::json;

namespace {

struct Options {
  std::vector<std::string> shapes{"1x8192", "4x2048", "16x512"}, chunks{"4x512+1536", "1x2048+6144"};
  std::vector<std::string> models{"llama-3.1-8b", "smollm2-135m"};
  int reps = 20;
  std::string peers, json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      FUTR_CHECK(i + 1 < argc, "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--shapes") o.shapes = bench::split_list(next());
    else if (a == "--chunks") o.chunks = bench::split_list(next());
    else if (a == "--models") o.models = bench::split_list(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--peers") o.peers = next();
    else if (a == "--json") o.json_path = next();
    else fail("unknown option {}", a);
  }
  return o;
}

struct Model {
  int heads, kv_heads, d;
};
Model model_shape(const std::string& m) {
  if (m == "llama-3.1-8b") return {32, 8, 128};
  if (m == "smollm2-135m") return {9, 3, 64};
  fail("unknown model {} (llama-3.1-8b, smollm2-135m)", m);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo& dev = cuda::require_device();
  (void)dev;
  std::map<std::string, json> peers;
  if (!o.peers.empty()) {
    std::ifstream f(o.peers);
    if (f) {
      const json j = json::parse(f);
      for (const json& r : j["rows"])
        peers[fmt::format("{}|{}x{}", r["model"].get<std::string>(), r["requests"].get<int>(),
                          r["len"].get<int>())] = r;
    }
  }
  cuda::Stream stream;
  bench::GraphTimer timer(o.reps);
  const bench::Ceilings ceil = bench::measure_ceilings(stream);
  bench::Report rep("Prefill attention (causal GQA, BF16 cache, packed requests)",
                    {"model", "requests x (prefix +) rows", "us", "TFLOP/s", "% of bf16 peak",
                     "sdpa flash us", "sdpa cudnn us", "x faster sdpa"});
  rep.set_meta("environment", bench::environment_json());
  rep.set_meta("bf16_peak_tflops", ceil.bf16_tflops);
  rep.set_meta(
      "timing",
      fmt::format("median of {} CUDA-graph replays, CUDA events, L2 flushed by a read pass", o.reps));
  std::vector<std::string> targets;
  std::vector<std::string> all = o.shapes;
  all.insert(all.end(), o.chunks.begin(), o.chunks.end());
  for (const std::string& model : o.models) {
    const Model m = model_shape(model);
    for (const std::string& shape : all) {
      // "RxN" or "RxN+P": R requests of N new rows each over a prefix of P positions.
      int reqs = 0, n = 0, prefix = 0;
      FUTR_CHECK(std::sscanf(shape.c_str(), "%dx%d+%d", &reqs, &n, &prefix) >= 2, "bad shape {}", shape);
      const int per_req = (prefix + n + 127) / 128 * 128 + 128;
      const int slots = reqs * per_req, rows = reqs * n;
      const size_t kv_elems = size_t(slots) * m.kv_heads * m.d;
      const int64_t q_ld = int64_t(m.heads + 2 * m.kv_heads) * m.d;  // the QKV output's rows
      cuda::DeviceBuffer<uint16_t> k(kv_elems), v(kv_elems), q(size_t(rows) * q_ld),
          out(size_t(rows) * m.heads * m.d);
      cuda::fill_random(k.get(), cuda::FillType::kBF16, kv_elems, 1, -1, 1, stream);
      cuda::fill_random(v.get(), cuda::FillType::kBF16, kv_elems, 2, -1, 1, stream);
      cuda::fill_random(q.get(), cuda::FillType::kBF16, q.size(), 3, -2, 2, stream);
      std::vector<cuda::PrefillRequest> cr;
      std::vector<int> rb, nr, p0, sb;
      double pairs = 0;  // visible query-key pairs
      for (int r = 0; r < reqs; ++r) {
        cr.push_back({r * n, n, prefix, r * per_req});
        rb.push_back(r * n), nr.push_back(n), p0.push_back(prefix), sb.push_back(r * per_req);
        pairs += double(n) * prefix + double(n) * (n + 1) / 2;
      }
      const std::vector<int> tiles = cuda::prefill_tiles(cr);
      cuda::DeviceBuffer<int> drb(rb), dn(nr), dp(p0), ds(sb), dt(tiles);
      cuda::PrefillAttentionArgs a;
      a.q = q.get(), a.out = out.get(), a.q_ld = q_ld, a.rows = rows;
      a.n_heads = m.heads, a.kv_heads = m.kv_heads, a.head_dim = m.d;
      a.k = k.get(), a.v = v.get(), a.num_slots = slots;
      a.row_begin = drb.get(), a.n_rows = dn.get(), a.pos0 = dp.get(), a.slot_base = ds.get();
      a.tiles = dt.get(), a.n_tiles = int(tiles.size() / 2);
      const double us = timer.us([&](cudaStream_t st) { cuda::prefill_attention(a, st); }, stream);
      const double tflops = 4.0 * m.d * m.heads * pairs / (us * 1e-6) / 1e12;
      json row = {{"model", model},
                  {"requests x (prefix +) rows", shape},
                  {"us", us},
                  {"TFLOP/s", tflops},
                  {"% of bf16 peak", 100.0 * tflops / ceil.bf16_tflops}};
      const auto it = peers.find(fmt::format("{}|{}", model, shape));
      if (it != peers.end()) {
        const json& pr = it->second;
        const double flash = pr["flash_us"].is_number() ? pr["flash_us"].get<double>() : -1;
        const double cudnn = pr["cudnn_us"].is_number() ? pr["cudnn_us"].get<double>() : -1;
        if (flash > 0) row["sdpa flash us"] = flash;
        if (cudnn > 0) row["sdpa cudnn us"] = cudnn;
        const double faster = flash > 0 && cudnn > 0 ? std::min(flash, cudnn) : std::max(flash, cudnn);
        if (faster > 0) {
          row["x faster sdpa"] = faster / us;
          targets.push_back(fmt::format("TARGET {} {} >= 0.8x the faster SDPA: {:.2f}x {}", model, shape,
                                        faster / us, faster / us >= 0.8 ? "MET" : "MISSED"));
        }
      }
      rep.add(row);
    }
  }
  rep.emit(o.json_path);
  for (const std::string& t : targets) std::printf("%s\n", t.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "prefill_attention_bench: %s\n", e.what());
  return 1;
}
