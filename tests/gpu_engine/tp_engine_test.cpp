// Tensor parallelism on the GPU (src/gpu_engine/tp_engine.h), on the
// synthetic tiny host model (4 query heads, 2 KV heads, FFN 512) with RTN
// INT4 weights:
//   - TP 1 through NCCL (one rank, one communicator: the all-reduces are
//     copies) equals the single-GPU engine bit for bit in its logits, and
//     its host-side log-probabilities and greedy tokens equal the GPU
//     engine's within tol::kLogitsReduce / exactly;
//   - TP 2 (where the machine has two GPUs) against TP 1: logits within
//     tol::kTensorParallelLogits (the BF16 all-reduce rounds the partial sums
//     differently from one GEMM's sum), and greedy generation identical;
//   - refusals: more ranks than GPUs, a split that breaks heads.
// Skips without a Hopper GPU (and the TP 2 part without two of them).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include <cuda_runtime.h>

#include "gpu_engine/engine.h"
#include "gpu_engine/nccl.h"
#include "gpu_engine/tp_engine.h"
#include "model/synthetic.h"
#include "quantize/quantize.h"
#include "runtime/perplexity.h"
#include "support/compare.h"
#include "support/expect_error.h"
#include "support/gpu.h"
#include "support/tolerances.h"

namespace futr {
namespace {

using runtime::BatchRow;
using runtime::RowOutput;

struct Tiny {
  Model model;
  std::shared_ptr<const quant::QuantizedWeights> q;
};
const Tiny& tiny() {
  static const Tiny* t = [] {
    auto* p = new Tiny{synthetic_host_model("tiny", 11), nullptr};
    cpu::QuantizeOptions qo;
    qo.format = WeightFormat::kInt4;
    qo.method = QuantMethod::kRtn;
    p->q = std::make_shared<quant::QuantizedWeights>(cpu::quantize_model(p->model, qo, {}));
    return p;
  }();
  return *t;
}

gpu::GpuEngineOptions options() {
  gpu::GpuEngineOptions o;
  o.kv = KvFormat::kBf16;
  o.ctx = 128;
  o.max_seqs = 4;
  o.max_step_tokens = 512;
  return o;
}

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  cudaGetLastError();
  return n;
}

#define FUTR_REQUIRE_NCCL()                                                      \
  do {                                                                           \
    std::string why;                                                             \
    if (!gpu::NcclComms::available(&why)) GTEST_SKIP() << "needs NCCL: " << why; \
  } while (0)

// Two prompts side by side, then decode rows; every row asks for `out`.
std::vector<std::vector<BatchRow>> script(RowOutput out) {
  std::vector<std::vector<BatchRow>> steps(3);
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 40 + 7 * s; ++i)
      steps[0].push_back({(13 * i + 5 * s) % 500, s, i, out, (7 * i + 3) % 500});
  for (int t = 1; t < 3; ++t)
    for (int s = 0; s < 2; ++s) {
      const int pos = 40 + 7 * s + t - 1;
      steps[size_t(t)].push_back({(11 * t + s) % 500, s, pos, out, (5 * t + s) % 500});
    }
  return steps;
}

std::vector<runtime::StepResult> run(runtime::Engine& e, RowOutput out) {
  e.open(0), e.open(1);
  std::vector<runtime::StepResult> r;
  for (const auto& st : script(out)) r.push_back(e.step(st));
  e.close(0), e.close(1);
  return r;
}

TEST(TpGpuEngine, OneRankThroughNcclEqualsTheSingleGpuEngine) {
  FUTR_REQUIRE_GPU();
  FUTR_REQUIRE_NCCL();
  gpu::GpuEngine single(tiny().model, tiny().q, options());
  gpu::TpGpuEngine tp1(tiny().model, tiny().q, options(), 1);
  const auto a = run(single, RowOutput::kLogits), b = run(tp1, RowOutput::kLogits);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].logits.data.size(), b[i].logits.data.size());
    EXPECT_EQ(0, std::memcmp(a[i].logits.data.data(), b[i].logits.data.data(), a[i].logits.data.size() * 4))
        << "step " << i;
  }
  const auto lp_gpu = run(single, RowOutput::kLogprob), lp_tp = run(tp1, RowOutput::kLogprob);
  for (size_t i = 0; i < lp_gpu.size(); ++i)
    for (size_t j = 0; j < lp_gpu[i].logprobs.size(); ++j)
      EXPECT_NEAR(lp_gpu[i].logprobs[j], lp_tp[i].logprobs[j], test::tol::kLogitsReduce) << i << " " << j;
  const auto t_gpu = run(single, RowOutput::kToken), t_tp = run(tp1, RowOutput::kToken);
  for (size_t i = 0; i < t_gpu.size(); ++i) EXPECT_EQ(t_gpu[i].tokens, t_tp[i].tokens) << "step " << i;
  EXPECT_EQ(tp1.stats()["tp"].get<int>(), 1);
}

TEST(TpGpuEngine, TwoRanksMatchOneRank) {
  FUTR_REQUIRE_GPU();
  FUTR_REQUIRE_NCCL();
  if (gpu_count() < 2) GTEST_SKIP() << "needs 2 GPUs (this machine has " << gpu_count() << ")";
  gpu::TpGpuEngine tp1(tiny().model, tiny().q, options(), 1);
  gpu::TpGpuEngine tp2(tiny().model, tiny().q, options(), 2);
  const auto a = run(tp1, RowOutput::kLogits), b = run(tp2, RowOutput::kLogits);
  for (size_t i = 0; i < a.size(); ++i) {
    const auto st = test::compare(b[i].logits.data, a[i].logits.data);
    EXPECT_EQ(st.non_finite, 0u);
    EXPECT_LE(st.rel_l2, test::tol::kTensorParallelLogits) << "step " << i;
  }
  const auto ta = run(tp1, RowOutput::kToken), tb = run(tp2, RowOutput::kToken);
  for (size_t i = 0; i < ta.size(); ++i) EXPECT_EQ(ta[i].tokens, tb[i].tokens) << "greedy tokens, step " << i;
}

TEST(TpGpuEngine, Refusals) {
  FUTR_REQUIRE_GPU();
  const int n = gpu_count();
  EXPECT_FUTR_ERROR(gpu::TpGpuEngine(tiny().model, tiny().q, options(), n + 1), "GPUs; this machine has");
  if (n >= 3) {  // 4 heads over 3 ranks: not whole heads
    EXPECT_FUTR_ERROR(gpu::TpGpuEngine(tiny().model, tiny().q, options(), 3),
                      "cannot split the model over TP 3");
  }
}

}  // namespace
}  // namespace futr
