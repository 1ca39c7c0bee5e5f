// Decode attention benchmark: one query row per sequence at the
// Llama-3.1-8B attention shape (32 query heads, 8 KV heads, head dim 128), over
// the BF16 cache, the INT4 mirror and the rotated INT4 mirror, for every batch x
// context of the lists. Per row: the split configuration, time (median of CUDA-
// graph replays, L2 flushed by a clean read pass before each rep), the KV bytes
// read and GB/s, the no-compute floor (one launch reading exactly the same bytes
// with 16-byte loads, same run), % of that floor, and PyTorch SDPA over a BF16
// cache (flash and cuDNN backends, bench/peers/torch_attention_peer.py, same
// device call) with the speedup over the faster one. Prints markdown, writes JSON,
// and a TARGET line per target of the issue.
//
// usage: decode_attention_bench [--batch 1,8,32] [--ctx 1024,8192,32768]
//          [--kinds bf16,int4,int4-rot] [--splits 0,-1,8,..] [--ctas 0,-1,2,..]
//          [--min-tokens N] [--overhead-tokens N]
// --splits: 0 the heuristic of the batch alone, -1 the engine's one count for
// every batch (attention_heuristic_invariant over batches 1..32), N that many.
// --ctas: CTAs per (sequence, KV head): 0 one per chunk, -1 attention_ctas
// (the engine's per-batch choice), N that many (skipped above the split count).
//          [--reps N] [--peers sdpa.json] [--json out.json]
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
#include "launch/decode_attention.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/stream.h"

using namespace futr;
using json = nlohmann::json;

namespace {

struct Options {
  std::vector<int> batch{1, 8, 32}, ctx{1024, 8192, 32768};
  std::vector<std::string> kinds{"bf16", "int4", "int4-rot"};
  std::vector<int> splits{0};  // 0: the heuristic, -1: the invariant one
  std::vector<int> ctas{0};    // 0: one per chunk, -1: attention_ctas
  int min_tokens = 256, overhead = 128, reps = 30;
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
    if (a == "--batch") o.batch = bench::split_ints(next());
    else if (a == "--ctx") o.ctx = bench::split_ints(next());
    else if (a == "--kinds") o.kinds = bench::split_list(next());
    else if (a == "--splits") o.splits = bench::split_ints(next());
    else if (a == "--ctas") o.ctas = bench::split_ints(next());
    else if (a == "--min-tokens") o.min_tokens = std::stoi(next());
    else if (a == "--overhead-tokens") o.overhead = std::stoi(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--peers") o.peers = next();
    else if (a == "--json") o.json_path = next();
    else fail("unknown option {}", a);
  }
  return o;
}

constexpr int kKvHeads = 8, kGroup = 4, kD = 128;

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo& dev = cuda::require_device();
  std::map<std::string, json> peers;
  if (!o.peers.empty()) {
    std::ifstream f(o.peers);
    if (f) {
      const json j = json::parse(f);
      for (const json& r : j["rows"])
        peers[fmt::format("{}|{}", r["batch"].get<int>(), r["ctx"].get<int>())] = r;
    }
  }
  cuda::Stream stream;
  bench::GraphTimer timer(o.reps);
  cuda::DeviceBuffer<unsigned> sink(1);
  bench::Report rep("Decode attention, Llama-3.1-8B shape (32 q heads / 8 KV heads, head dim 128)",
                    {"batch", "ctx", "kv", "config", "us", "KV MB", "GB/s", "floor us", "% of floor",
                     "sdpa flash us", "sdpa cudnn us", "speedup vs faster sdpa"});
  rep.set_meta("environment", bench::environment_json());
  rep.set_meta(
      "timing",
      fmt::format("median of {} CUDA-graph replays, CUDA events, L2 flushed by a read pass", o.reps));
  std::vector<std::string> targets;
  {  // the fixed cost of the timing method: a graph of one empty launch
    const double us = timer.us(
        [&](cudaStream_t st) { bench::read_regions(nullptr, nullptr, 0, dev.sm_count, sink.get(), st); },
        stream);
    rep.set_meta("empty_launch_us", us);
    std::printf("empty launch (graph of one kernel reading nothing): %.2f us\n", us);
  }
  for (int batch : o.batch)
    for (int ctx : o.ctx) {
      const int slots = batch * ((ctx + 15) / 16 * 16);
      const size_t prim = size_t(slots) * kKvHeads * kD, nib = prim / 2, sc = size_t(slots) * kKvHeads;
      cuda::DeviceBuffer<uint16_t> k(prim), v(prim), q(size_t(batch) * kKvHeads * kGroup * kD), out(q.size());
      cuda::DeviceBuffer<uint8_t> k4(nib), v4(nib);
      cuda::DeviceBuffer<float> ks(sc), vs(sc);
      cuda::fill_random(k.get(), cuda::FillType::kBF16, prim, 1, -1, 1, stream);
      cuda::fill_random(v.get(), cuda::FillType::kBF16, prim, 2, -1, 1, stream);
      cuda::fill_random(q.get(), cuda::FillType::kBF16, q.size(), 3, -2, 2, stream);
      cuda::fill_random(k4.get(), cuda::FillType::kU8, nib, 4, 0, 0, stream);
      cuda::fill_random(v4.get(), cuda::FillType::kU8, nib, 5, 0, 0, stream);
      cuda::fill_random(ks.get(), cuda::FillType::kF32, sc, 6, 0.01f, 0.1f, stream);
      cuda::fill_random(vs.get(), cuda::FillType::kF32, sc, 7, 0.01f, 0.1f, stream);
      std::vector<int> base(static_cast<size_t>(batch)), lens(static_cast<size_t>(batch), ctx);
      for (int b = 0; b < batch; ++b) base[size_t(b)] = b * ((ctx + 15) / 16 * 16);
      cuda::DeviceBuffer<int> dbase(base), dlen(lens);
      cuda::KvLayerPtrs cache{k.get(), v.get(), k4.get(), v4.get(), ks.get(), vs.get(), slots};
      const json* peer =
          peers.count(fmt::format("{}|{}", batch, ctx)) ? &peers[fmt::format("{}|{}", batch, ctx)] : nullptr;
      double flash = -1, cudnn = -1;
      if (peer) {
        if ((*peer)["flash_us"].is_number()) flash = (*peer)["flash_us"].get<double>();
        if ((*peer)["cudnn_us"].is_number()) cudnn = (*peer)["cudnn_us"].get<double>();
      }
      const double faster = flash > 0 && cudnn > 0 ? std::min(flash, cudnn) : std::max(flash, cudnn);
      for (const std::string& kind : o.kinds)
        for (int splits : o.splits)
          for (int ctas : o.ctas) {
            const bool int4 = kind != "bf16";
            const int rot = kind == "int4-rot" ? 64 : 0;
            cuda::AttentionShape s{batch, kKvHeads, kGroup, kD, int4, rot, ctx};
            cuda::AttentionConfig cfg =
                cuda::attention_heuristic(s, dev.sm_count, 0, o.min_tokens, o.overhead);
            if (splits > 0) cfg.splits = splits;
            if (splits < 0) {
              static constexpr int kBatches[] = {1, 2, 4, 8, 16, 32};
              cfg = cuda::attention_heuristic_invariant(s, dev.sm_count, kBatches);
            }
            if (ctas > cfg.splits) continue;
            cfg.ctas = ctas >= 0 ? ctas : cuda::attention_ctas(s, cfg.splits, dev.sm_count).ctas;
            cuda::DeviceBuffer<float> ws(std::max<size_t>(1, cuda::attention_workspace_floats(s, cfg)));
            cuda::DeviceBuffer<int> counters(cuda::attention_counters(s));
            counters.fill_bytes(0);
            cuda::AttentionArgs a{q.get(),  out.get(), dbase.get(),    dlen.get(),     cache,
                                  ws.get(), ws.size(), counters.get(), counters.size()};
            const double us =
                timer.us([&](cudaStream_t st) { cuda::decode_attention(s, a, cfg, st); }, stream);
            // The same bytes without compute (one launch).
            const size_t tok = size_t(batch) * size_t(ctx) * kKvHeads;
            const void* ptrs[4];
            size_t bytes[4];
            int count;
            if (int4) {
              ptrs[0] = k4.get(), ptrs[1] = v4.get(), ptrs[2] = ks.get(), ptrs[3] = vs.get();
              bytes[0] = bytes[1] = tok * kD / 2, bytes[2] = bytes[3] = tok * 4;
              count = 4;
            } else {
              ptrs[0] = k.get(), ptrs[1] = v.get();
              bytes[0] = bytes[1] = tok * kD * 2;
              count = 2;
            }
            size_t total = 0;
            for (int i = 0; i < count; ++i) total += bytes[i];
            const double floor_us = timer.us(
                [&](cudaStream_t st) {
                  bench::read_regions(ptrs, bytes, count, dev.sm_count, sink.get(), st);
                },
                stream);
            json row = {{"batch", batch},
                        {"ctx", ctx},
                        {"kv", kind},
                        {"config", cuda::describe(cfg)},
                        {"us", us},
                        {"KV MB", double(total) / 1e6},
                        {"GB/s", double(total) / (us * 1e-6) / 1e9},
                        {"floor us", floor_us},
                        {"% of floor", 100.0 * floor_us / us}};
            if (flash > 0) row["sdpa flash us"] = flash;
            if (cudnn > 0) row["sdpa cudnn us"] = cudnn;
            if (faster > 0) row["speedup vs faster sdpa"] = faster / us;
            rep.add(row);
            if (kind == "int4-rot" && splits == 0 && ctas == 0) {
              if (long(batch) * ctx >= 65536)
                targets.push_back(fmt::format("TARGET int4-rot b{} ctx{} >= 80% of floor: {:.1f}% {}", batch,
                                              ctx, 100.0 * floor_us / us,
                                              floor_us / us >= 0.8 ? "MET" : "MISSED"));
              if (batch >= 8 && ctx >= 8192 && faster > 0)
                targets.push_back(fmt::format("TARGET int4-rot b{} ctx{} >= 3x faster sdpa: {:.2f}x {}",
                                              batch, ctx, faster / us,
                                              faster / us >= 3.0 ? "MET" : "MISSED"));
              if (batch == 1 && ctx == 8192)
                targets.push_back(fmt::format("TARGET int4-rot b1 ctx8192 <= 8 us: {:.2f} us {}", us,
                                              us <= 8.0 ? "MET" : "MISSED"));
            }
          }
    }
  rep.emit(o.json_path);
  for (const std::string& t : targets) std::printf("%s\n", t.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "decode_attention_bench: %s\n", e.what());
  return 1;
}
