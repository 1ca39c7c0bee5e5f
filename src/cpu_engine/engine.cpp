// The CPU engines (see engine.h).
#include "cpu_engine/engine.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "cpu_engine/kv_quant.h"
#include "cpu_engine/threads.h"
#include "runtime/batch.h"
#include "runtime/perplexity.h"

namespace futr::cpu {

using runtime::BatchRow;
using runtime::RowOutput;
using runtime::SeqId;

CpuEngine::CpuEngine(const Model& model, std::shared_ptr<const quant::QuantizedWeights> q,
                     const CpuEngineOptions& o)
    : model_(model), opt_(o) {
  FUTR_CHECK(o.weights != WeightFormat::kAuto && o.kv != KvFormat::kAuto,
             "CPU engine: unresolved format (weights {}, KV {})", to_string(o.weights), to_string(o.kv));
  FUTR_CHECK(o.ctx >= 0, "--ctx must be positive (got {})", o.ctx);
  FUTR_CHECK(o.threads >= 0, "--threads must be positive (got {})", o.threads);
  FUTR_CHECK(o.max_seqs >= 1 && o.max_seqs <= 4096,
             "the maximum number of sequences must be in 1..4096 (got {})", o.max_seqs);
  FUTR_CHECK(o.max_step_tokens >= 1 && o.max_step_tokens <= (1 << 20),
             "the maximum tokens per step must be in 1..1048576 (got {})", o.max_step_tokens);
  FUTR_CHECK(o.kv_block_size >= 0 && o.kv_block_size <= runtime::BlockPool::kMaxBlockSize,
             "--block-size must be in 0..{} positions (0: no paging; got {})",
             runtime::BlockPool::kMaxBlockSize, o.kv_block_size);
  FUTR_CHECK(o.kv_blocks >= 0, "--kv-blocks must be >= 0 (got {})", o.kv_blocks);
  FUTR_CHECK(o.kv_blocks == 0 || o.kv_block_size > 0,
             "--kv-blocks needs a paged KV cache (--block-size > 0)");
  opt_.ctx = o.ctx > 0 ? o.ctx : model.config.max_context;
  const int threads = set_num_threads(o.threads);
  std::unique_ptr<KvStorage> own_kv;  // paged: the Forward's own cache is a view of the pool
  if (o.kv_block_size > 0) {
    const int B = o.kv_block_size;
    const int64_t blocks = o.kv_blocks > 0 ? o.kv_blocks : int64_t(o.max_seqs) * ((opt_.ctx + B - 1) / B);
    FUTR_CHECK(blocks <= runtime::BlockPool::kMaxBlocks && blocks * B <= (int64_t(1) << 24),
               "paged KV cache: {} blocks of {} positions = {} positions, more than 16777216", blocks, B,
               blocks * B);
    pool_ = std::make_unique<runtime::BlockPool>(blocks, B);
    kv_pool_ = std::make_unique<PagedKvPool>(
        model.config, make_kv_storage(model.config, int(blocks * B), o.kv, o.kv_block), B);
    own_kv = std::make_unique<PagedKvStorage>(*kv_pool_, opt_.ctx);
  }
  if (o.weights == WeightFormat::kFp32 && o.kv == KvFormat::kFp32 && !q) {
    fp32_ = own_kv ? std::make_unique<Forward>(model, make_weights(model), std::move(own_kv))
                   : std::make_unique<Forward>(model, opt_.ctx);
  } else {
    QuantRunOptions ro;
    ro.weights = o.weights;
    ro.kv = o.kv;
    ro.kv_block = o.kv_block;
    ro.fp8 = o.fp8;
    ro.fp8_rms_in_cast = o.fp8_rms_in_cast;
    ro.fp8_gpu_numerics = o.fp8_gpu_numerics;
    quant_ = std::make_unique<QuantForward>(model, std::move(q), ro, opt_.ctx, std::move(own_kv));
  }
  const KvStorage& kv = kv_pool_ ? kv_pool_->slots() : forward().cache().storage();
  const std::string seqs =
      (o.max_seqs > 1 ? fmt::format(" x {} sequences", o.max_seqs) : "") +
      (pool_ ? fmt::format(", paged: {} blocks of {} = {} positions", pool_->num_blocks(),
                           pool_->block_size(), pool_->num_blocks() * pool_->block_size())
             : "");
  info_.name = "cpu";
  info_.describe =
      fp32_ ? fmt::format("cpu (FP32 reference, {} threads, ctx {}{}, {} KV cache {:.1f} MiB)", threads,
                          opt_.ctx, seqs, kv.name(), double(kv.bytes()) / (1 << 20))
            : fmt::format("cpu (quantized reference: {}; {} threads, ctx {}{}, KV {:.1f} MiB)",
                          quant_->describe(), threads, opt_.ctx, seqs, double(kv.bytes()) / (1 << 20));
  info_.vocab = model.config.vocab;
  info_.ctx = forward().capacity();
  info_.max_seqs = o.max_seqs;
  info_.max_step_tokens = o.max_step_tokens;
  info_.weights = o.weights;
  info_.kv = o.kv;
  if (pool_) {
    info_.kv_block_size = pool_->block_size();
    info_.kv_blocks = pool_->num_blocks();
  }
  table_ = runtime::SequenceTable(o.max_seqs, info_.ctx);
  slots_.resize(size_t(o.max_seqs));
  if (!pool_) slots_[0].cache = &forward().cache();
}

CpuEngine::~CpuEngine() = default;

void CpuEngine::open(SeqId id, const runtime::SamplerConfig& sampling) {
  const int s = table_.open(id, sampling);  // checks (id, free slot, sampler) before anything changes
  table_.sampler(s).limit_vocab(model_.sampleable_vocab());  // padded LM-head rows are never drawn
  Slot& slot = slots_[size_t(s)];
  if (!slot.cache) {
    const ModelConfig& c = model_.config;
    try {
      if (kv_pool_) {
        auto view = std::make_unique<PagedKvStorage>(*kv_pool_, opt_.ctx);
        slot.paged = view.get();
        slot.own = std::make_unique<KvCache>(std::move(view));
      } else {
        slot.own = std::make_unique<KvCache>(make_kv_storage(c, opt_.ctx, opt_.kv, opt_.kv_block));
      }
    } catch (...) {
      table_.close(id);  // out of memory: the sequence was not opened
      throw;
    }
    slot.cache = slot.own.get();
  }
  slot.cache->clear();
  FUTR_ASSERT(!slot.paged || slot.paged->blocks().table.empty());
}

void CpuEngine::truncate(SeqId id, int len) {
  const int s = table_.truncate(id, len);
  Slot& slot = slots_[size_t(s)];
  slot.cache->truncate(len);
  if (slot.paged) pool_->truncate(slot.paged->blocks(), len);
}

void CpuEngine::close(SeqId id) {
  Slot& slot = slots_[size_t(table_.close(id))];
  slot.cache->clear();
  if (slot.paged) pool_->release(slot.paged->blocks());  // full blocks stay cached for attach_prefix()
}

int CpuEngine::length(SeqId id) const { return table_.length(id); }

int64_t CpuEngine::free_positions() const {
  return pool_ ? pool_->free_blocks() * pool_->block_size() : table_.free_positions();
}

int64_t CpuEngine::blocks_needed(SeqId id, int n) const {
  if (!pool_) return 0;
  return pool_->blocks_needed(slots_[size_t(table_.slot(id))].paged->blocks(), n);
}

int CpuEngine::attach_prefix(SeqId id, std::span<const int32_t> tokens) {
  const int s = table_.slot(id);
  if (!pool_) return 0;
  FUTR_CHECK(table_.length(id) == 0,
             "a prefix attaches to an empty sequence (sequence {} holds {} positions)", id,
             table_.length(id));
  Slot& slot = slots_[size_t(s)];
  const int n = pool_->attach(slot.paged->blocks(), tokens.first(std::min(tokens.size(), size_t(info_.ctx))));
  slot.cache->advance(n);
  table_.set_length(s, n);
  return n;
}

std::optional<runtime::Sampler> CpuEngine::sampler_state(SeqId id) const {
  return table_.sampler(table_.slot(id));
}

void CpuEngine::restore_sampler(SeqId id, const runtime::Sampler& sampler) {
  table_.sampler(table_.slot(id)) = sampler;
}

runtime::StepResult CpuEngine::step(std::span<const BatchRow> rows) {
  const runtime::BatchPlan plan =
      runtime::plan_batch(rows, info_, [&](SeqId id) { return table_.length_or_closed(id); });
  const size_t V = size_t(info_.vocab);
  runtime::StepResult r;
  if (plan.n_logits > 0) r.logits = Tensor({int64_t(plan.n_logits), int64_t(V)});
  r.tokens.reserve(size_t(plan.n_tokens));
  r.logprobs.reserve(size_t(plan.n_logprobs));
  if (pool_) {  // every block the step takes, checked before any row runs
    int64_t need = 0;
    for (const runtime::SeqRun& run : plan.runs)
      need += pool_->blocks_needed(slots_[size_t(table_.slot(run.seq))].paged->blocks(), run.end - run.begin);
    FUTR_CHECK(need <= pool_->free_blocks(),
               "out of KV blocks: the step needs {} more blocks of {} positions, {} are free", need,
               pool_->block_size(), pool_->free_blocks());
  }
  std::vector<int32_t> tokens;
  int64_t logit_row = 0;
  for (const runtime::SeqRun& run : plan.runs) {
    const int slot = table_.slot(run.seq);
    Slot& s = slots_[size_t(slot)];
    tokens.clear();
    for (int i = run.begin; i < run.end; ++i) tokens.push_back(rows[size_t(i)].token);
    const int len0 = s.cache->length();
    if (s.paged) {
      std::optional<runtime::BlockCopy> copy;
      const bool grown = pool_->grow(s.paged->blocks(), int(tokens.size()), &copy);
      FUTR_ASSERT(grown);  // checked above
      if (copy) kv_pool_->copy_block(*copy);
    }
    // Paged: the positions the cache kept become the sequence's (their tokens
    // indexed), the blocks beyond them go back.
    auto commit_paged = [&] {
      if (!s.paged) return;
      const int kept = s.cache->length() - len0;
      pool_->commit(s.paged->blocks(), std::span<const int32_t>(tokens).first(size_t(kept)));
      pool_->truncate(s.paged->blocks(), s.cache->length());
    };
    Tensor logits;
    try {
      // Decode rows (none given as prompt: speculative decoding's drafts) as
      // each alone, so that a row's logits never depend on the rows beside it.
      const bool decode = std::none_of(rows.begin() + run.begin, rows.begin() + run.end,
                                       [](const BatchRow& b) { return b.prompt; });
      logits = forward().eval(*s.cache, tokens, run.first_out - run.begin, decode);
    } catch (...) {
      commit_paged();
      table_.set_length(slot, s.cache->length());  // the table follows the cache, whatever it kept
      throw;
    }
    commit_paged();
    table_.set_length(slot, s.cache->length());
    for (int i = run.first_out; i < run.end; ++i) {
      const BatchRow& row = rows[size_t(i)];
      const std::span<const float> z(logits.row(i - run.first_out), V);
      switch (row.out) {
        case RowOutput::kNone: break;
        case RowOutput::kLogits: std::memcpy(r.logits.row(logit_row++), z.data(), V * sizeof(float)); break;
        case RowOutput::kToken: r.tokens.push_back(table_.sampler(slot).sample(z)); break;
        case RowOutput::kLogprob: r.logprobs.push_back(-runtime::token_nll(z, row.target)); break;
      }
    }
  }
  return r;
}

std::string CpuEngine::rollback_unsupported_reason() const {
  const quant::ScaleBank* bank = fp8_bank();
  if (bank && bank->config().scaling == Fp8Scaling::kDelayed)
    return "FP8 delayed scaling is engine state: the rows of rejected drafts would change the scales of "
           "later steps";
  return {};
}

nlohmann::json CpuEngine::stats() const {
  nlohmann::json j;
  int64_t used = 0, bytes = 0;
  used = table_.positions_used();
  for (const Slot& s : slots_)
    if (s.cache) bytes += s.cache->storage().bytes();
  if (kv_pool_) bytes += kv_pool_->slots().bytes();
  j["engine"] = info_.name;
  j["weights"] = to_string(info_.weights);
  j["kv"] = to_string(info_.kv);
  j["sequences_open"] = table_.open_count();
  j["max_seqs"] = info_.max_seqs;
  j["ctx"] = info_.ctx;
  j["kv_positions_used"] = used;
  j["kv_positions_free"] = free_positions();
  j["kv_bytes"] = bytes;
  if (pool_) {
    const runtime::BlockPoolStats& b = pool_->stats();
    j["kv_paged"] = {{"block_size", pool_->block_size()},
                     {"blocks", pool_->num_blocks()},
                     {"blocks_free", pool_->free_blocks()},
                     {"blocks_used", pool_->used_blocks()},
                     {"blocks_cached", pool_->cached_blocks()},
                     {"blocks_attached", b.attached},
                     {"blocks_evicted", b.evicted},
                     {"block_copies", b.copies}};
  }
  if (const quant::ScaleBank* bank = fp8_bank()) {
    const quant::ScaleStats t = bank->total();
    nlohmann::json f;
    f["history"] = bank->config().history;
    f["margin"] = bank->config().margin;
    f["policy"] = to_string(bank->config().policy);
    f["calls"] = t.calls;
    f["saturated_calls"] = t.saturated_calls;
    f["saturated_values"] = t.saturated_values;
    f["zero_calls"] = t.zero_calls;
    f["recomputes"] = t.recomputes;
    f["max_amax"] = t.max_amax;
    j["fp8"] = f;
  }
  return j;
}

}  // namespace futr::cpu
