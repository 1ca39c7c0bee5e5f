// Persistent executor benchmark: the one-row decode step's projection chain of
// every layer (the ops the persistent executor runs today), run (1) as one
// launch per op with programmatic dependent launch, captured in a CUDA graph
// (the launch executor's way), and (2) as one persistent launch
// (launch/persistent_step.h; the fused chain both with the weights streamed
// by each unit and through a producer warp's ring), against the no-compute floor (one launch reading
// the same weight bytes with 16-byte loads), all in the same run. Per layer:
//
//   x += y; a = RMSNorm(x) g     a -> qkv (gemv, N = q + 2 kv)     qkv[:q] -> y (gemv o)
//   x += y; a = RMSNorm(x) g     a -> gu (gemv gate|up)            gu -> y (gemv down, the SwiGLU input)
//
// (the attention is not part of the chain: the o gemv reads the q columns),
// and the same with the residual add + RMSNorm fused into the qkv and gate|up
// gemv (chain "fused": the engine's one-row step, 4 ops per layer).
// Shapes: SmolLM2-135M (30 layers, INT4 group 64) and Llama-3.1-8B (32 layers,
// group 128); random weights. Time: median of CUDA-graph replays, CUDA events,
// L2 flushed by a read pass before each. Prints markdown, writes JSON.
//
// --breakdown: a second table from the units' device timestamps (where each
// op of the fused chain spends its time; JSON beside the first, *_breakdown.json).
//
// usage: persistent_step_bench [--models smollm2,8b] [--ctas N] [--ring-ctas-per-sm 1,2,3,4] [--breakdown]
// [--reps N]
//                              [--json out.json]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/harness.h"
#include "core/error.h"
#include "launch/buffer.h"
#include "launch/decode_ops.h"
#include "launch/device.h"
#include "launch/fill.h"
#include "launch/linear.h"
#include "launch/persistent_step.h"
#include "launch/stream.h"

using namespace futr;
using json = nlohmann::json;

namespace {

struct Shape {
  const char* key;
  const char* model;
  int layers, H, I, q, kv, group;
};
constexpr Shape kShapes[] = {
    {"smollm2", "SmolLM2-135M", 30, 576, 1536, 576, 192, 64},
    {"8b", "Llama-3.1-8B", 32, 4096, 14336, 4096, 1024, 128},
};

struct Options {
  std::vector<std::string> models{"smollm2", "8b"};
  int ctas = 0;
  int reps = 30;
  std::vector<int> ring_ctas_per_sm{1, 2, 3, 4};
  bool breakdown = false;
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      FUTR_CHECK(i + 1 < argc, "{} needs a value", a);
      return argv[++i];
    };
    if (a == "--models") o.models = bench::split_list(next());
    else if (a == "--ctas") o.ctas = std::stoi(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--json") o.json_path = next();
    else if (a == "--breakdown") o.breakdown = true;
    else if (a == "--ring-ctas-per-sm") {
      o.ring_ctas_per_sm.clear();
      for (const std::string& v : bench::split_list(next())) o.ring_ctas_per_sm.push_back(std::stoi(v));
    } else fail("unknown option {}", a);
  }
  return o;
}

std::unique_ptr<cuda::W4Linear> random_linear(int n, int k, int group, uint64_t seed, cudaStream_t s) {
  auto lin = std::make_unique<cuda::W4Linear>(n, k, group, 1);
  cuda::fill_random(lin->weights(), cuda::FillType::kU8, size_t(n) * k / 2, seed, 0, 0, s);
  cuda::fill_random(lin->scales(), cuda::FillType::kF16, size_t(n) * (k / group), seed + 1, 0.002f, 0.02f, s);
  return lin;
}

struct Layer {
  std::unique_ptr<cuda::W4Linear> qkv, o, gate_up, down;
  cuda::DeviceBuffer<uint16_t> g1, g2;
};

std::string rep_weights(const cuda::PersistentStep& step, int per_sm) {
  return step.ring() ? fmt::format("ring {}/SM x {}", per_sm, step.ring_stages()) : "registers";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The fused chain's ops per layer, in order, and the timestamps' breakdown
// of each (see the report's columns), averaged over the layers but the first.
void breakdown(bench::Report& brk, const char* model, const std::string& weights,
               const std::vector<std::vector<cuda::PersistentStep::UnitTimes>>& t,
               const std::vector<Layer>& layers, double floor_us_per_byte) {
  constexpr const char* kOps[] = {"qkv (RMSNorm in)", "o", "gate_up (RMSNorm in)", "down (SwiGLU in)"};
  constexpr int kPerLayer = 4;
  auto last_end = [&](size_t i) {
    uint64_t e = 0;
    for (const auto& u : t[i]) e = std::max(e, u.end);
    return e;
  };
  for (int k = 0; k < kPerLayer; ++k) {
    double span = 0, lag = 0, unit = 0, sums = 0, store = 0, tail = 0, lead = 0;
    int n = 0;
    for (size_t i = size_t(kPerLayer + k); i < t.size(); i += kPerLayer, ++n) {
      const uint64_t prev = last_end(i - 1), end = last_end(i);
      uint64_t first_ready = UINT64_MAX;
      std::vector<double> u_unit, u_sums, u_store, u_end, u_lead;
      for (const auto& u : t[i]) {
        first_ready = std::min(first_ready, u.ready);
        u_unit.push_back(double(u.end - u.ready));
        u_end.push_back(double(u.end - prev));
        if (u.computed) {
          u_sums.push_back(double(u.computed - u.ready));
          u_store.push_back(double(u.end - u.computed));
        }
        if (u.produce_last) u_lead.push_back(double(int64_t(u.ready) - int64_t(u.produce_last)));
      }
      span += double(end - prev);
      lag += double(int64_t(first_ready) - int64_t(prev));
      unit += median(u_unit);
      sums += median(u_sums);
      store += median(u_store);
      tail += double(end - prev) - median(u_end);
      lead += median(u_lead);
    }
    const Layer& L = layers.front();
    const cuda::W4Linear* lin[] = {L.qkv.get(), L.o.get(), L.gate_up.get(), L.down.get()};
    const double mb = double(lin[k]->weight_bytes());
    const double d = n > 0 ? 1e3 * n : 1.0;  // ns -> us, mean over layers
    brk.add({{"model", model},
             {"weights", weights},
             {"op", kOps[k]},
             {"MB", mb / 1e6},
             {"floor us", mb * floor_us_per_byte},
             {"span us", span / d},
             {"lag us", lag / d},
             {"unit us", unit / d},
             {"sums us", sums / d},
             {"store us", store / d},
             {"tail us", tail / d},
             {"lead us", lead / d}});
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo& dev = cuda::require_device();
  cuda::Stream stream;
  bench::GraphTimer timer(o.reps);
  cuda::DeviceBuffer<unsigned> sink(1);
  bench::Report rep(
      "Decode projection chain (M = 1): launches with PDL in a graph vs one persistent launch, " + dev.name,
      {"model", "chain", "weights", "layers", "ops", "MB", "floor us", "launches us", "launches % of floor",
       "persistent us", "persistent % of floor", "ctas", "x launches"});
  bench::Report brk(
      "Where the fused chain's persistent launch spends its time, per op of a layer (means over layers; unit "
      "timestamps, globaltimer), " +
          dev.name,
      {"model", "weights", "op", "MB", "floor us", "span us", "lag us", "unit us", "sums us", "store us",
       "tail us", "lead us"});
  brk.set_meta("environment", bench::environment_json());
  brk.set_meta(
      "columns",
      "span: the op's last unit end minus the op before's; lag: the op before's last unit end to this "
      "op's first unit past its wait; unit: median unit from its wait to its end; sums: median wait to "
      "sums done (ring); store: median split-K store; tail: last unit end minus the median unit end; "
      "lead: median of wait end minus the producer's last copy of the unit (ring; > 0: its weights "
      "were all requested before its inputs were ready)");
  rep.set_meta("environment", bench::environment_json());
  rep.set_meta(
      "timing",
      fmt::format("median of {} CUDA-graph replays, CUDA events, L2 flushed by a read pass", o.reps));
  for (const std::string& key : o.models) {
    const Shape* sh = nullptr;
    for (const Shape& s : kShapes)
      if (key == s.key) sh = &s;
    FUTR_CHECK(sh, "unknown model {} (smollm2, 8b)", key);
    const int H = sh->H, I = sh->I, nqkv = sh->q + 2 * sh->kv;
    std::vector<Layer> layers(sh->layers);
    uint64_t seed = 1;
    size_t bytes = 0;
    for (Layer& L : layers) {
      L.qkv = random_linear(nqkv, H, sh->group, seed += 2, stream);
      L.o = random_linear(H, sh->q, sh->group, seed += 2, stream);
      L.gate_up = random_linear(2 * I, H, sh->group, seed += 2, stream);
      L.down = random_linear(H, I, sh->group, seed += 2, stream);
      for (auto* g : {&L.g1, &L.g2}) {
        *g = cuda::DeviceBuffer<uint16_t>(H);
        cuda::fill_random(g->get(), cuda::FillType::kBF16, H, seed += 2, 0.5f, 1.5f, stream);
      }
      for (const auto* l : {L.qkv.get(), L.o.get(), L.gate_up.get(), L.down.get()})
        bytes += l->weight_bytes();
    }
    cuda::DeviceBuffer<float> x(H);
    cuda::DeviceBuffer<uint16_t> a(H), y(H), qkv(nqkv), gu(2 * size_t(I));
    cuda::fill_random(x.get(), cuda::FillType::kF32, H, 7, -1, 1, stream);
    cuda::fill_random(y.get(), cuda::FillType::kBF16, H, 8, -1, 1, stream);
    auto norm = [&](const cuda::DeviceBuffer<uint16_t>& g) {
      cuda::RmsNormArgs n;
      n.x = x.get();
      n.add = y.get();
      n.ld_add = H;
      n.gain = g.get();
      n.out = a.get();
      n.rows = 1;
      n.H = H;
      return n;
    };
    auto config = [&](const cuda::W4Linear& l, bool pdl) {
      cuda::DecodeConfig c =
          cuda::linear_config(cuda::DecodeWeights::kInt4, 1, l.n(), l.k(), dev.sm_count, sh->group);
      c.pdl = pdl;
      return c;
    };
    cuda::DeviceBuffer<float> x2(H);
    // The floor: the same bytes in one region, read once.
    cuda::DeviceBuffer<uint8_t> region(bytes);
    cuda::fill_random(region.get(), cuda::FillType::kU8, bytes, 9, 0, 0, stream);
    const void* ptrs[1] = {region.get()};
    const size_t sizes[1] = {bytes};
    const double floor_us = timer.us(
        [&](cudaStream_t st) { bench::read_regions(ptrs, sizes, 1, dev.sm_count, sink.get(), st); }, stream);
    for (const bool fused : {false, true}) {
      // The chain's ops for either executor: norm(gain) and gemm(lin, in, out, swiglu, fused norm).
      auto chain = [&](auto&& norm_op, auto&& gemm_op) {
        for (const Layer& L : layers) {
          if (fused) {
            const cuda::DecodeNormInput n1{x.get(), y.get(), L.g1.get(), x2.get(), 1e-5f};
            gemm_op(*L.qkv, nullptr, qkv.get(), false, &n1);
            gemm_op(*L.o, qkv.get(), y.get(), false, nullptr);
            const cuda::DecodeNormInput n2{x2.get(), y.get(), L.g2.get(), x.get(), 1e-5f};
            gemm_op(*L.gate_up, nullptr, gu.get(), false, &n2);
          } else {
            norm_op(L.g1);
            gemm_op(*L.qkv, a.get(), qkv.get(), false, nullptr);
            gemm_op(*L.o, qkv.get(), y.get(), false, nullptr);
            norm_op(L.g2);
            gemm_op(*L.gate_up, a.get(), gu.get(), false, nullptr);
          }
          gemm_op(*L.down, gu.get(), y.get(), true, nullptr);
        }
      };
      // (1) one launch per op, PDL between them (not the first).
      const double launches_us = timer.us(
          [&](cudaStream_t st) {
            bool first = true;
            chain(
                [&](const cuda::DeviceBuffer<uint16_t>& g) {
                  cuda::rmsnorm(norm(g), st, !first);
                  first = false;
                },
                [&](const cuda::W4Linear& l, const void* in, void* out, bool sw,
                    const cuda::DecodeNormInput* n) {
                  l.forward(in, out, 1, config(l, !first), st, sw, n);
                  first = false;
                });
          },
          stream);
      // (2) the same ops in one persistent launch: the gemv's weights streamed
      // by each unit into registers, and (a list of gemvs only) through a
      // producer warp's shared-memory ring.
      std::vector<std::pair<cuda::PersistentWeights, int>> ways{{cuda::PersistentWeights::kRegisters, 0}};
      if (fused)
        for (const int per_sm : o.ring_ctas_per_sm) ways.emplace_back(cuda::PersistentWeights::kRing, per_sm);
      for (const auto& [way, per_sm] : ways) {
        cuda::PersistentStep step(way, per_sm);
        chain(
            [&](const cuda::DeviceBuffer<uint16_t>& g) { step.rmsnorm(norm(g)); },
            [&](const cuda::W4Linear& l, const void* in, void* out, bool sw, const cuda::DecodeNormInput* n) {
              step.gemm(l.args(in, out, 1, sw, n), config(l, false));
            });
        const int ctas = o.ctas > 0 ? std::min(o.ctas, step.resident_ctas()) : 0;
        step.launch(stream, ctas);  // uploads the list outside the capture
        const double persistent_us = timer.us([&](cudaStream_t st) { step.launch(st, ctas); }, stream);
        if (fused && o.breakdown) {
          cuda::PersistentStep rec(way, per_sm);
          chain(
              [&](const cuda::DeviceBuffer<uint16_t>& g) { rec.rmsnorm(norm(g)); },
              [&](const cuda::W4Linear& l, const void* in, void* out, bool sw,
                  const cuda::DecodeNormInput* n) { rec.gemm(l.args(in, out, 1, sw, n), config(l, false)); });
          rec.record_times();
          rec.launch(stream, ctas);
          bench::flush_l2_read(region.get(), std::min(bytes, 2 * dev.l2_bytes), sink.get(), stream);
          rec.launch(stream, ctas);
          breakdown(brk, sh->model, rep_weights(step, per_sm), rec.times(stream), layers,
                    floor_us / double(bytes));
        }
        rep.add({{"model", sh->model},
                 {"chain", fused ? "fused" : "unfused"},
                 {"weights", rep_weights(step, per_sm)},
                 {"layers", sh->layers},
                 {"ops", step.size()},
                 {"MB", double(bytes) / 1e6},
                 {"floor us", floor_us},
                 {"launches us", launches_us},
                 {"launches % of floor", 100.0 * floor_us / launches_us},
                 {"persistent us", persistent_us},
                 {"persistent % of floor", 100.0 * floor_us / persistent_us},
                 {"ctas", ctas > 0 ? ctas : step.resident_ctas()},
                 {"x launches", launches_us / persistent_us}});
      }
    }
  }
  rep.emit(o.json_path);
  if (o.breakdown) {
    std::string path = o.json_path;
    if (!path.empty()) path.insert(path.size() - (path.ends_with(".json") ? 5 : 0), "_breakdown");
    brk.emit(path);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "persistent_step_bench: %s\n", e.what());
  return 1;
}
