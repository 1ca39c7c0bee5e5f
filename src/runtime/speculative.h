// Speculative decoding of one sequence without a draft model: a Drafter
// (runtime/ngram_drafter.h) proposes the next tokens, one engine step runs the
// sequence's last token and the whole draft as rows of the sequence, and the
// drafts the target model would have produced itself are kept.
//
// One verification step. The sequence holds positions [0, P); its last token
// x0 (drawn, not yet run) and the draft d1..dk run as rows at positions
// P..P+k, every row asking for its logits (z_0..z_k, z_i conditioned on
// x0 d1..di). Then, for i = 0, 1, ...:
//   y_i = the ordinary sampler's draw from z_i (verify_draft);
//   i < k and y_i == d_{i+1}: d_{i+1} is accepted (its K/V, stored at P+i+1,
//     is what ordinary decoding would have stored) and z_{i+1} is next;
//   otherwise y_i is the step's last token: the correction of a rejected
//     draft, or the bonus token when all k were accepted (i == k). The rows
//     of the rejected drafts, positions [P+i+1, P+k], are dropped
//     (Engine::truncate) and y_i is the next step's x0.
// A step thus yields 1..k+1 tokens for the cost of one step of k+1 rows.
//
// The acceptance rule (verify_draft). Let p be the distribution the ordinary
// sampler draws from at a position (runtime/sampler.h: penalties over the
// history, temperature, top-k, min-p, top-p; greedy: the point mass at the
// argmax) and let the draft token x come from a deterministic drafter, a
// point mass q = delta_x. The standard speculative-sampling rule (Leviathan et
// al. 2023; Chen et al. 2023) accepts x with probability min(1, p(x)/q(x)) =
// p(x) and on rejection draws from norm(max(0, p - q)), which is p with x
// removed, renormalized; its output is distributed exactly as p. verify_draft
// implements it with one uniform u of the sampler's generator: y = the
// sampler's draw with u (the first id whose cumulative probability exceeds
// u); accept iff y == x. Then P(accept) = P(u in x's interval) = p(x), and
// given a rejection u is uniform over the other ids' intervals, so y follows
// p without x, renormalized: the rule above, with the coin and the residual
// draw coupled through u. Consequences:
//   - every position consumes one uniform and draws from the sampler's own
//     distribution, so with batch-invariant engines (a row's logits do not
//     depend on the other rows of its step) the tokens are exactly those of
//     ordinary decoding with the same seed, greedy or sampled, with every
//     filter and penalty (the history grows as the caller accepts tokens);
//   - greedy is the special case p = delta_argmax: accept iff x is the argmax.
//
// Rollback. Rows of rejected drafts are removed with Engine::truncate, which
// must leave the sequence as if they had never run:
// Engine::rollback_unsupported_reason() is empty when it does (the CPU engines
// except with FP8 weights, whose delayed scaling is engine state; the GPU
// engine: its sequence length is host-side and later rows overwrite the
// dropped K/V).
//
// Budget. A step's draft is capped so that its rows fit the context
// (P + k + 1 <= ctx), the engine's step (k + 1 <= max_step_tokens) and the
// caller's remaining draws (k + 1 <= the draws it may still make), so no row
// runs that ordinary decoding could not have needed.
//
// Tests: tests/runtime/speculative_test.cpp (greedy and sampled tokens equal
// to ordinary decoding on every CPU KV format; fully accepted, fully rejected
// and context-limited drafts; the rule's output distribution against the
// target's; rollback).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"
#include "runtime/sampler.h"

namespace futr::runtime {

enum class SpeculativeMode { kOff, kNgram };
std::string to_string(SpeculativeMode m);                      // "off" | "ngram"
SpeculativeMode parse_speculative_mode(const std::string& s);  // futr::Error naming the accepted values
std::vector<std::string> speculative_mode_names();

struct SpeculativeConfig {
  SpeculativeMode mode = SpeculativeMode::kOff;
  int draft_max = 8;  // tokens per draft at most (NgramDrafter::kMaxDraft)
};

// The drafter of a configuration (nullptr for kOff).
std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config);

// Tokens per draft at most where the user gives none: 8, or 7 on an engine
// whose steps of several rows are padded (Engine::step_rows: the GPU engine,
// whose drafts are sized to its buckets of 2, 4 and 8 rows; 7 measured fastest
// there on every workload, docs/PERF.md "Speculative decoding").
inline constexpr int kDraftMaxDefault = 8;
inline constexpr int kDraftMaxPaddedDefault = 7;
int default_draft_max(const Engine& engine);

struct SpeculativeStats {
  int64_t steps = 0;     // decode steps (one engine step each, after the prompt)
  int64_t drafted = 0;   // draft tokens run
  int64_t accepted = 0;  // of them, accepted
  // Accepted / drafted (0 when nothing was drafted).
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  // {"steps", "drafted", "accepted", "acceptance"}.
  nlohmann::json to_json() const;
};

// One draw at a position: `token` is what the sampler draws from `logits`
// (exactly Sampler::sample, so the generator advances as in ordinary
// decoding); accepted: it equals `draft` (draft < 0: no draft at this
// position, never accepted). See the file comment for why this is the
// speculative-sampling rule.
struct DraftVerdict {
  int32_t token = -1;
  bool accepted = false;
};
DraftVerdict verify_draft(Sampler& sampler, std::span<const float> logits, int32_t draft);

// Decoding of one sequence, with drafts when a drafter is given, for a token
// loop of the form
//   dec.prefill(prompt);
//   while (...) { t = dec.draw(sampler); ...stop?...; dec.advance(t, draws_left); }
//   dec.finish();
// Without a drafter every advance() is one decode step of one row, the
// ordinary loop. The drafter (if any) must hold the tokens the sequence holds
// (a fresh one for an empty sequence); the decoder pushes the tokens it
// evaluates (prefill) and the tokens it is advanced by, so afterwards it
// holds the sequence again (the last drawn token, never advanced, not
// included).
class SpeculativeDecoder {
 public:
  // engine_draws: every row's token is drawn by the sequence's own sampler in
  // the engine (SequenceRunner::draw: no logits leave it; draw() then ignores
  // its sampler and logits() is not available). Valid when that sampler is
  // the caller's (the config the sequence was opened with), its draws use no
  // history (uses_history false), no ids are banned, and with a drafter only
  // for greedy decoding (the engine draws every row of a step, which for a
  // temperature > 0 would consume the uniforms of rows a rejection drops).
  SpeculativeDecoder(SequenceRunner& seq, Drafter* drafter, bool engine_draws = false);

  // Appends `tokens` (>= 1; prompt rows) to the sequence; the logits of the
  // last one are the current row.
  void prefill(std::span<const int32_t> tokens);
  // The current row: the logits the next draw is made from (host draws only).
  std::span<const float> logits() const;
  bool engine_draws() const { return engine_draws_; }
  // The position the next token drawn would take: what SequenceRunner::position()
  // is at this point of ordinary decoding.
  int position() const { return base_ + row_ + 1; }
  // verify_draft() on the current row with the draft token at this position;
  // the `banned` ids' logits are -inf first (never drawn, never accepted).
  DraftVerdict draw(Sampler& sampler, std::span<const int32_t> banned = {});
  // Continues the sequence with `token` (the token draw() returned):
  // accepted, the next row is current (no engine step); otherwise the rows
  // of rejected drafts are dropped and one step runs `token` with a new
  // draft. draws_left (>= 1): the draws the caller may still make after this
  // one at most (caps the draft). position() < ctx is the caller's check.
  void advance(int32_t token, int draws_left);
  // Drops the rows beyond position() (drafts after the last draw): the
  // sequence then holds what ordinary decoding's would.
  void finish();

  const SpeculativeStats& stats() const { return stats_; }

 private:
  SequenceRunner& seq_;
  Drafter* drafter_;
  bool engine_draws_ = false;
  Tensor rows_;                 // [1 + draft, vocab] logits of the last step (host draws)
  std::vector<int32_t> drawn_;  // [1 + draft] the engine's tokens of the last step (engine draws)
  std::vector<int32_t> draft_;  // the last step's draft
  std::vector<float> masked_;   // [vocab] the current row with banned ids at -inf (draw)
  int base_ = 0;                // position of the last step's first row
  int row_ = 0;                 // the current row in rows_
  SpeculativeStats stats_;
};

}  // namespace futr::runtime
