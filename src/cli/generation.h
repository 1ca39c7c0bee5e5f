// The token loop `futr generate` and `futr chat` share, its statistics, and
// Ctrl-C handling.
//
// generate_tokens(): evaluates `prompt` (appended to what the sequence holds)
// through the engine, then repeats: sample (the penalties see the prompt and
// every sampled token: Sampler::accept), stop at an end-of-generation token,
// --max-tokens, a stop string (runtime::StopMatcher: the text before it is
// shown, not the string), a full context, or Ctrl-C; otherwise stream the
// token's text and evaluate it (one decode step). The last sampled token is
// not evaluated (nothing needs its logits); Generation::pending says which it
// was, so a chat can evaluate it with the next turn.
//
// With a drafter (--speculative ngram, cli/speculative_options.h) the loop is
// the same, over runtime::SpeculativeDecoder: a decode step runs the token
// with a draft of the next ones, and a draw that matches the draft needs no
// step of its own. The tokens, the text and where it stops are those without
// a drafter (runtime/speculative.h); only the time and the step count change.
//
// Statistics (print_stats(), also after Ctrl-C):
//   load        reading the model and building the engine (s)
//   prompt      tokens evaluated before the first draw, their time and rate;
//               below 32 tokens the rate is marked as mostly fixed cost
//   first token time from the start of the prompt to the first token shown
//               (prefill + first draw): what a user waits for
//   generation  tokens produced; the rate counts the tokens drawn from decode
//               steps only (the first token comes from the prefill), with the
//               time per token and the decode steps
//   speculative (with a drafter) draft tokens run, accepted, the acceptance
//               rate and the tokens per decode step
// print_stats_json(): the same as one JSON object on one line (--json).
//
// Ctrl-C: InterruptScope installs a SIGINT handler for its lifetime. While a
// generation runs, Ctrl-C sets a flag the loop checks before each token (the
// answer stops, the program goes on); outside one, Ctrl-C ends the program as
// usual (exit status 130).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace futr::cli {

struct Generation {
  int prompt_tokens = 0;            // evaluated before the first draw
  double prompt_seconds = 0;        // their evaluation
  double first_token_seconds = -1;  // start -> first token shown (-1: none)
  int generated = 0;                // tokens produced (the ending token not counted)
  int decode_steps = 0;             // engine steps after the prompt (one row each without a drafter)
  int decode_tokens = 0;  // tokens drawn from their rows (every draw but the first, the end token included)
  bool speculative = false;          // a drafter proposed the next tokens
  runtime::SpeculativeStats drafts;  // its drafts (speculative only)
  double decode_seconds = 0;         // from the first draw to the end
  std::vector<int32_t> tokens;       // the generated tokens
  std::string text;                  // their full text (stop string included)
  int32_t pending = -1;              // last generated token, not evaluated (-1: none)
  enum class End { kEog, kMaxTokens, kStop, kContextFull, kInterrupted } end = End::kEog;
};

// `emit` receives the text to show, piece by piece (already flushed by the caller).
// drafter: null (one row per decode step) or one holding the tokens the
// sequence holds; it holds them again afterwards (the pending token not included).
// ignore_eos: the end-of-generation tokens' logits are -inf (never drawn, nor accepted as drafts).
// engine_draws: the sequence was opened with sampler's config and the engine
// draws the tokens (engine_draws() below said it may); `sampler` then only
// records the history.
Generation generate_tokens(runtime::SequenceRunner& seq, runtime::Sampler& sampler, const Tokenizer& tok,
                           std::span<const int32_t> prompt, int max_tokens,
                           const std::function<void(const std::string&)>& emit,
                           runtime::Drafter* drafter = nullptr, bool ignore_eos = false,
                           bool engine_draws = false);

// Whether the engine's own sampler can draw a generation's tokens, the same
// tokens the host sampler would (runtime::SpeculativeDecoder's engine_draws):
// no penalty (they need the history), no --ignore-eos masking, no ids beyond
// the tokenizer in the logits, and with drafts greedy decoding only (a greedy
// sequence's draft rows share one GPU micro-step). The GPU engine then
// computes the draws next to the logits instead of copying each row to the
// host.
bool engine_draws(const runtime::SamplerConfig& sampling, const runtime::EngineInfo& info,
                  const Tokenizer& tok, bool drafting, bool ignore_eos);

// The statistics lines on stderr ("futr: ..."); load_seconds < 0: no load line.
void print_stats(const Generation& g, double load_seconds, int capacity);
// The statistics as one JSON line on stderr: {"prompt_tokens", "prompt_seconds",
// "first_token_seconds", "generated", "decode_steps", "decode_tokens",
// "decode_seconds", "tokens_per_second", "end", "load_seconds" (>= 0 only),
// "speculative": {"mode", "steps", "drafted", "accepted", "acceptance",
// "tokens_per_step"} (mode "off": no drafts)}.
void print_stats_json(const Generation& g, double load_seconds);

// True once Ctrl-C was pressed during the current generation (cleared by
// InterruptScope::begin()).
bool interrupted();

class InterruptScope {
 public:
  InterruptScope();     // installs the handler
  ~InterruptScope();    // restores the previous one
  static void begin();  // a generation starts: Ctrl-C now stops it
  static void end();    // it ended: Ctrl-C ends the program again
};

}  // namespace futr::cli
