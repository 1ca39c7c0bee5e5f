// The Engine: the one seam between the commands (generate, perplexity,
// bench, serve) and whatever runs the model (the CPU references in src/cpu_engine/,
// the GPU engine in src/gpu_engine/). The grain of llama.cpp's
// llama_decode(llama_batch) or vLLM's model runner, not an op-level backend:
// an engine owns its weights, its KV cache and its fused kernels.
//
// Sequences. A sequence is opened by id, grows by the rows of step() calls,
// can be truncated (keep positions [0, len)) and is closed; its KV positions
// are released on close. At most info().max_seqs are open at once, each holds
// at most info().ctx positions.
//
// A step runs a batch of rows. Row i = (token, seq, pos, out, target, prompt):
//   - the rows of one sequence are contiguous and in order, and the first row
//     of sequence s has pos == length(s) (append only; truncate() to go back),
//     each next row pos + 1;
//   - at most info().max_step_tokens rows; a sequence appears in one run;
//   - out says what comes back for the row: nothing (prompt rows), its logits,
//     a token sampled on the engine with the sequence's sampler (open()), or
//     log p(target | prefix) (perplexity scoring without copying logits);
//   - prompt says the row's token was given (a prompt or scored text), not
//     drawn by the engine in the step before: an engine with a separate
//     prompt path (the GPU engine's FP8 prefill) runs exactly the prompt rows
//     there, however they were cut into steps, and every other row through
//     its decode path, so the path a row takes never depends on chunking.
// The result holds, in row order of the rows that asked, logits as one
// [n_logits, vocab] FP32 tensor, sampled tokens, log-probabilities.
//
// Every misuse (unknown or duplicate id, a row out of order, a token outside
// the vocabulary, too many rows, a sequence past ctx, no free sequence) throws
// futr::Error naming the problem, and changes nothing: the check runs before
// any row is computed.
//
// Results do not depend on batching (batch invariance): a row's outputs have
// the same bits whether its sequence runs alone or with others, and however
// its prompt was cut into steps (on the GPU engine for a given prompt flag;
// tests/runtime/engine_test.cpp and tests/gpu_engine/invariance_test.cpp).
// Rows that are not prompt rows have the bits they have alone also when
// several rows of their sequence share a step, on every engine (speculative
// decoding's drafts, runtime/speculative.h); the CPU engines' prompt rows
// depend on the cut within rounding (tests/support/tolerances.h kCpuChunking).
//
// Paged KV cache (optional; docs/LAYOUTS.md "Paged KV cache"). An engine
// whose info().kv_block_size > 0 keeps its KV cache in blocks of that many
// positions, shared by all sequences: a sequence takes a block when it grows
// into one (free_blocks(), blocks_needed() say what a step will take, and a
// step that would need more than are free throws before computing anything),
// its full blocks are indexed by their token prefix and outlive it in the
// cache until evicted, and attach_prefix() gives a new sequence the longest
// cached prefix instead of computing it. free_positions() then counts free
// blocks x block size. The CPU and GPU engines page when asked
// (--block-size; tests/cpu_engine/paged_kv_test.cpp,
// tests/gpu_engine/paged_test.cpp); an engine that does not page (block size
// 0, the tensor-parallel engines) keeps the defaults below, and a scheduler
// admits against free_positions() as before. A scheduler that preempts a
// sequence (closes it and opens it again later) keeps its sampler with
// sampler_state() / restore_sampler(), so the draws continue exactly.
//
// Tests: tests/runtime/engine_test.cpp (the contract, on every CPU engine);
// tests/cpu_engine/paged_kv_test.cpp (paging).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/model.h"
#include "runtime/config.h"
#include "runtime/sampler.h"

namespace futr::runtime {

using SeqId = int64_t;

enum class RowOutput : uint8_t {
  kNone,     // prompt row: K/V stored, nothing returned
  kLogits,   // its logits row (FP32, vocab wide)
  kToken,    // a token drawn by the sequence's sampler from its logits
  kLogprob,  // log softmax(logits)[target], in double
};

struct BatchRow {
  int32_t token = 0;  // input token id
  SeqId seq = 0;      // an open sequence
  int32_t pos = 0;    // its position (== length(seq) for the sequence's first row)
  RowOutput out = RowOutput::kNone;
  int32_t target = -1;  // kLogprob: the token whose log-probability is returned
  bool prompt = false;  // the token was given, not drawn (above): the engine's prompt path may take it
};

struct StepResult {
  Tensor logits;                 // [rows with kLogits, vocab], in batch order (empty if none)
  std::vector<int32_t> tokens;   // one per kToken row, in batch order
  std::vector<double> logprobs;  // one per kLogprob row, in batch order
};

struct EngineInfo {
  std::string name;                            // "cpu" | "gpu"
  std::string describe;                        // one line: formats, threads/device, cache size
  int vocab = 0;                               // logits width
  int ctx = 0;                                 // positions per sequence
  int max_seqs = 0;                            // sequences open at once
  int max_step_tokens = 0;                     // rows per step()
  WeightFormat weights = WeightFormat::kFp32;  // resolved (never kAuto)
  KvFormat kv = KvFormat::kFp32;               // resolved (never kAuto)
  int kv_block_size = 0;                       // positions per KV block when the engine pages; 0: it does not
  int64_t kv_blocks = 0;                       // blocks in the paged cache (0 when it does not page)
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Opens an empty sequence `id` with its sampler (used by RowOutput::kToken
  // rows). futr::Error if `id` is open or max_seqs are open.
  virtual void open(SeqId id, const SamplerConfig& sampling = {}) = 0;
  // Keeps positions [0, len) of `id` (0 <= len <= length(id)).
  virtual void truncate(SeqId id, int len) = 0;
  // Closes `id` and frees its positions. futr::Error if it is not open.
  virtual void close(SeqId id) = 0;
  virtual bool is_open(SeqId id) const = 0;
  virtual int length(SeqId id) const = 0;  // positions stored; futr::Error if not open

  // Runs the rows (see the file comment for the contract).
  virtual StepResult step(std::span<const BatchRow> rows) = 0;

  // KV positions still free across the engine: what a scheduler admits
  // against (a request needs prompt + max_tokens positions, at most ctx).
  virtual int64_t free_positions() const = 0;
  // Sequences that can still be opened.
  virtual int free_sequences() const = 0;

  virtual const EngineInfo& info() const = 0;
  // Engine state as JSON: KV positions in use, FP8 delayed-scaling counters
  // (calls, saturations, recomputes, max amax) where FP8 runs, ...
  virtual nlohmann::json stats() const = 0;

  // Per-kernel profiling of the steps that follow (on: true), for benchmarks:
  // an engine that supports it times each launch of its steps one by one
  // (no overlap between launches) and reports the sums in stats()
  // ["profile"]; off again restores its normal launches. Returns false (and
  // does nothing) where the engine cannot profile (the CPU engines). On
  // while on starts new sums.
  virtual bool set_profiling(bool on) {
    (void)on;
    return false;
  }

  // --- Paged KV cache (info().kv_block_size > 0; see the file comment) ---
  // Blocks a step can still take: free blocks and cached blocks no sequence holds.
  virtual int64_t free_blocks() const { return 0; }
  // Blocks a step appending n rows to open sequence `id` takes (a new block
  // per block boundary crossed, one more to copy a shared partial last block).
  virtual int64_t blocks_needed(SeqId id, int n) const {
    (void)id;
    (void)n;
    return 0;
  }
  // On an open, empty sequence: attaches the longest cached prefix of
  // `tokens` (whole blocks) and returns its length (the sequence's length
  // now; its rows continue from there). 0 where nothing is cached or the
  // engine does not page.
  virtual int attach_prefix(SeqId id, std::span<const int32_t> tokens) {
    (void)id;
    (void)tokens;
    return 0;
  }
  // The state of the sampler of open sequence `id` (its generator position),
  // for restore_sampler() on the sequence that continues it after a
  // preemption. nullopt where the engine's draws depend on nothing but the
  // sequence's tokens and SamplerConfig (nothing to keep).
  virtual std::optional<Sampler> sampler_state(SeqId id) const {
    (void)id;
    return std::nullopt;
  }
  // Replaces the sampler of open sequence `id` (a state from sampler_state()).
  virtual void restore_sampler(SeqId id, const Sampler& sampler) {
    (void)id;
    (void)sampler;
  }

  // The rows a step of n rows of one sequence costs as much as: an engine
  // that pads its steps (the GPU engine's micro-steps run in buckets of 1, 2,
  // 4, ... 32 rows) returns the padded count, so that speculative decoding
  // sizes its drafts to fill them (runtime/speculative.h). n otherwise.
  virtual int step_rows(int n) const { return n; }

  // Empty when truncate() leaves a sequence exactly as if the dropped rows had
  // never run (what speculative decoding needs to drop the rows of rejected
  // drafts, runtime/speculative.h); otherwise why not, in one sentence.
  virtual std::string rollback_unsupported_reason() const { return {}; }
};

// One-line notes for the user (engine chosen and why, quantizing on load,
// calibration), printed on stderr by the CLI; may be empty.
using EngineLog = std::function<void(const std::string&)>;

// THE factory: resolves kAuto choices (engine, weights, KV), quantizes on
// load when asked, and builds the engine. `model` must outlive it.
// futr::Error for a choice that does not apply (e.g. --kv-block without
// int4-rot, --quant for a .futr file, --backend gpu without a GPU engine).
std::unique_ptr<Engine> make_engine(const Model& model, const RuntimeConfig& config,
                                    const EngineLog& log = {});

// The engine make_engine() builds for `config`: kGpu where asked (make_engine
// refuses it where there is none), or for kAuto where a Hopper GPU and the
// GPU engine are here and the formats asked for are its own (INT4 weights, a
// BF16 / INT4 cache); else kCpu. Probes the device once (cached).
EngineKind engine_for(const RuntimeConfig& config);

// Brings the GPU up (the device probe, then its context: a few hundred
// milliseconds) on a thread of its own while the caller reads the model, when
// `engine` may pick the GPU engine (kAuto, kGpu); make_engine() then finds it
// ready. The destructor waits for the thread. Nothing happens for kCpu or in
// a build without CUDA. Create it before loading the model, destroy it after
// make_engine().
class EngineWarmup {
 public:
  explicit EngineWarmup(EngineKind engine);
  ~EngineWarmup();
  EngineWarmup(const EngineWarmup&) = delete;
  EngineWarmup& operator=(const EngineWarmup&) = delete;

 private:
  std::thread thread_;
};

// A single sequence over an Engine, for the commands that run one sequence
// at a time (generate, chat): eval() appends tokens and returns the logits of
// rows [first_logit, n) as [n - first_logit, vocab]; prompts longer than
// max_step_tokens are split into several steps.
class SequenceRunner {
 public:
  // `sampling`: the engine's sampler of the sequence, which draw() uses.
  explicit SequenceRunner(Engine& engine, SeqId id = 0, const SamplerConfig& sampling = {});
  ~SequenceRunner();  // closes the sequence
  int position() const;
  int capacity() const;
  void reset();            // truncate to 0
  void truncate(int len);  // keep positions [0, len)
  // prompt: the tokens were given (BatchRow::prompt); false for a token the
  // engine drew (one decode step).
  Tensor eval(std::span<const int32_t> tokens, int first_logit, bool prompt = true);
  // As eval(), but rows [first_draw, n) return the token the engine's sampler
  // (the SamplerConfig given at construction) draws from their logits
  // (RowOutput::kToken: no logits leave the engine), one draw per row in
  // order.
  std::vector<int32_t> draw(std::span<const int32_t> tokens, int first_draw, bool prompt = true);
  Engine& engine() { return engine_; }

 private:
  // The checks of eval() and draw(): the call fits the context, its tokens the vocabulary.
  void check_call(std::span<const int32_t> tokens, int first_out) const;
  // Runs `tokens` in steps of at most max_step_tokens rows, rows [first_out, n)
  // asking for `out`; take(result, first, count) gets each step's outputs,
  // those of rows first_out + first .. + count.
  void run(std::span<const int32_t> tokens, int first_out, bool prompt, RowOutput out,
           const std::function<void(const StepResult&, int first, int count)>& take);

  Engine& engine_;
  SeqId id_;
};

}  // namespace futr::runtime
