// Persistent executor benchmark: the one-row decode step's projection chain of
// every layer (the ops the persistent executor runs today), run (1) as one
// launch per op with programmatic dependent launch, captured in a CUDA graph
// (the launch executor's way), and (2) as one persistent launch
// (launch/persistent_step.h), against the no-compute floor (one launch reading
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
// usage: persistent_step_bench [--models smollm2,8b] [--ctas N] [--reps N] [--json out.json]
#include <cstdio>
#include <memory>
#include <string>
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
    else fail("unknown option {}", a);
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

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const cuda::DeviceInfo& dev = cuda::require_device();
  cuda::Stream stream;
  bench::GraphTimer timer(o.reps);
  cuda::DeviceBuffer<unsigned> sink(1);
  bench::Report rep(
      "Decode projection chain (M = 1): launches with PDL in a graph vs one persistent launch, " + dev.name,
      {"model", "chain", "layers", "ops", "MB", "floor us", "launches us", "launches % of floor",
       "persistent us", "persistent % of floor", "ctas", "x launches"});
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
      // (2) the same ops in one persistent launch.
      cuda::PersistentStep step;
      chain([&](const cuda::DeviceBuffer<uint16_t>& g) { step.rmsnorm(norm(g)); },
            [&](const cuda::W4Linear& l, const void* in, void* out, bool sw, const cuda::DecodeNormInput* n) {
              step.gemm(l.args(in, out, 1, sw, n), config(l, false));
            });
      step.launch(stream, o.ctas);  // uploads the list outside the capture
      const double persistent_us = timer.us([&](cudaStream_t st) { step.launch(st, o.ctas); }, stream);
      rep.add({{"model", sh->model},
               {"chain", fused ? "fused" : "unfused"},
               {"layers", sh->layers},
               {"ops", step.size()},
               {"MB", double(bytes) / 1e6},
               {"floor us", floor_us},
               {"launches us", launches_us},
               {"launches % of floor", 100.0 * floor_us / launches_us},
               {"persistent us", persistent_us},
               {"persistent % of floor", 100.0 * floor_us / persistent_us},
               {"ctas", o.ctas > 0 ? o.ctas : step.resident_ctas()},
               {"x launches", launches_us / persistent_us}});
    }
  }
  rep.emit(o.json_path);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "persistent_step_bench: %s\n", e.what());
  return 1;
}
