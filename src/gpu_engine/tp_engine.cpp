// The tensor-parallel engine (see tp_engine.h): N rank engines driven in
// lockstep, one thread each, the vocabulary shards joined on the host.
#include "gpu_engine/tp_engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/error.h"
#include "gpu_engine/nccl.h"
#include "launch/check.h"
#include "runtime/batch.h"
#include "runtime/perplexity.h"

namespace futr::gpu {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;

void TpGpuEngine::prepare(const ModelConfig& c, int tp) {
  FUTR_CHECK(tp >= 1 && tp <= 64, "--tp {} out of range (1..64)", tp);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  cudaGetLastError();
  FUTR_CHECK(devices >= tp, "--tp {} needs {} GPUs; this machine has {}", tp, tp, devices);
  plan_ = runtime::make_tensor_parallel_plan(c, tp);  // refuses splits that break heads or SwiGLU pairs
  std::string why;
  FUTR_CHECK(NcclComms::available(&why), "--tp {}: tensor parallelism needs NCCL: {}", tp, why);
  std::vector<int> devs;
  for (int r = 0; r < tp; ++r) devs.push_back(r);
  comms_ = std::make_unique<NcclComms>(devs);
}

GpuEngineOptions TpGpuEngine::rank_options(const GpuEngineOptions& o, const ModelConfig& c, int rank) const {
  GpuEngineOptions r = o;
  r.tp_comms = comms_.get();
  r.tp_rank = rank;
  r.rank_config = runtime::rank_config(c, plan_);
  const runtime::IndexRange v = plan_.ranks[size_t(rank)].vocab;
  r.lm_begin = int(v.begin);
  r.lm_rows = int(v.size());
  r.gpu_sampling = false;
  if (const char* e = std::getenv("FUTR_TP_TIMEOUT_S")) r.tp_timeout_s = std::max(1.0, std::atof(e));
  return r;
}

TpGpuEngine::TpGpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                         const GpuEngineOptions& o, int tp)
    : config_(model.config), sampleable_vocab_(model.sampleable_vocab()) {
  FUTR_CHECK(q && q->format == WeightFormat::kInt4,
             "GPU engine: runs INT4 weights (--weights int4, or a .futr file with INT4 weights)");
  prepare(model.config, tp);
  ranks_.resize(size_t(tp));
  on_ranks([&](int r) {
    auto shard =
        std::make_shared<const quant::QuantizedWeights>(runtime::shard_quantized_weights(*q, plan_, r));
    ranks_[size_t(r)] = std::make_unique<GpuEngine>(model, shard, rank_options(o, model.config, r));
  });
  table_ = runtime::SequenceTable(o.max_seqs, ranks_[0]->info().ctx);
  info_ = ranks_[0]->info();
  info_.describe = fmt::format("tensor parallel over {} GPUs (NCCL {}), rank 0: {}", tp, NcclComms::version(),
                               info_.describe);
}

TpGpuEngine::TpGpuEngine(const ModelConfig& config, uint64_t seed, const GpuEngineOptions& o, int tp)
    : config_(config), sampleable_vocab_(config.vocab) {
  prepare(config, tp);
  ranks_.resize(size_t(tp));
  on_ranks([&](int r) {
    GpuEngineOptions ro = rank_options(o, config, r);
    const ModelConfig rc = *ro.rank_config;
    ro.rank_config.reset();  // the synthetic constructor takes the rank's config directly
    ranks_[size_t(r)] = std::make_unique<GpuEngine>(rc, seed, ro);
  });
  table_ = runtime::SequenceTable(o.max_seqs, ranks_[0]->info().ctx);
  info_ = ranks_[0]->info();
  info_.describe = fmt::format("tensor parallel over {} GPUs (NCCL {}), rank 0: {}", tp, NcclComms::version(),
                               info_.describe);
}

TpGpuEngine::~TpGpuEngine() {
  // The rank engines free their buffers on their own devices, then the communicators go.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r]) continue;
    cudaSetDevice(int(r));
    ranks_[r].reset();
  }
  comms_.reset();
}

void TpGpuEngine::on_ranks(const std::function<void(int)>& f) {
  const int n = plan_.tp;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        FUTR_CUDA_CHECK(cudaSetDevice(comms_ ? comms_->device(r) : r));
        f(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        if (comms_) comms_->abort();  // the other ranks' collectives end instead of waiting
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

void TpGpuEngine::open(SeqId id, const runtime::SamplerConfig& sampling) {
  const int s = table_.open(id, sampling);
  table_.sampler(s).limit_vocab(sampleable_vocab_);
  for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r]->open(id);  // bookkeeping only (host)
}

void TpGpuEngine::truncate(SeqId id, int len) {
  table_.truncate(id, len);
  for (auto& e : ranks_) e->truncate(id, len);
}

void TpGpuEngine::close(SeqId id) {
  table_.close(id);
  for (auto& e : ranks_) e->close(id);
}

runtime::StepResult TpGpuEngine::step(std::span<const BatchRow> rows) {
  FUTR_CHECK(!comms_->aborted(),
             "tensor parallelism: the ranks were aborted by an earlier failure; open a new "
             "engine");
  const runtime::BatchPlan plan =
      runtime::plan_batch(rows, info_, [&](SeqId id) { return table_.length_or_closed(id); });
  // Every row that needs the distribution asks each rank for its shard's logits.
  std::vector<BatchRow> rr(rows.begin(), rows.end());
  for (BatchRow& r : rr)
    if (r.out == RowOutput::kToken || r.out == RowOutput::kLogprob) r.out = RowOutput::kLogits, r.target = -1;
  std::vector<runtime::StepResult> res(ranks_.size());
  on_ranks([&](int r) { res[size_t(r)] = ranks_[size_t(r)]->step(rr); });
  ++steps_;

  const size_t V = size_t(config_.vocab);
  runtime::StepResult out;
  if (plan.n_logits > 0) out.logits = Tensor({int64_t(plan.n_logits), int64_t(V)});
  out.tokens.reserve(size_t(plan.n_tokens));
  out.logprobs.reserve(size_t(plan.n_logprobs));
  std::vector<float> z(V);
  int j = 0, nl = 0;  // j: the row's index among the ranks' logits rows
  for (size_t i = 0; i < rows.size(); ++i) {
    const BatchRow& row = rows[i];
    table_.set_length(table_.slot(row.seq), row.pos + 1);
    if (row.out == RowOutput::kNone) continue;
    float* dst = row.out == RowOutput::kLogits ? out.logits.row(nl++) : z.data();
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const runtime::IndexRange v = plan_.ranks[r].vocab;
      std::memcpy(dst + v.begin, res[r].logits.row(j), size_t(v.size()) * sizeof(float));
    }
    ++j;
    const std::span<const float> full(dst, V);
    if (row.out == RowOutput::kLogprob) out.logprobs.push_back(-runtime::token_nll(full, row.target));
    else if (row.out == RowOutput::kToken)
      out.tokens.push_back(table_.sampler(table_.slot(row.seq)).sample(full));
  }
  return out;
}

nlohmann::json TpGpuEngine::stats() const {
  nlohmann::json j;
  j["engine"] = "gpu";
  j["tp"] = plan_.tp;
  j["steps"] = steps_;
  j["nccl"] = NcclComms::version();
  j["sequences_open"] = table_.open_count();
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& e : ranks_) ranks.push_back(e->stats());
  j["ranks"] = ranks;
  return j;
}

}  // namespace futr::gpu
