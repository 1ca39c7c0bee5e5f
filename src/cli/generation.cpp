// The shared token loop, statistics and Ctrl-C handling (see generation.h).
#include "cli/generation.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cpu_engine/threads.h"

namespace futr::cli {

namespace {

volatile std::sig_atomic_t g_generating = 0;
volatile std::sig_atomic_t g_interrupted = 0;
struct sigaction g_previous {};

extern "C" void on_sigint(int sig) {
  if (g_generating) {
    g_interrupted = 1;
    return;
  }
  // Not generating: what Ctrl-C does anywhere else (async-signal-safe calls only).
  signal(sig, SIG_DFL);
  raise(sig);
}

// Tokens per second of the decode steps: the tokens drawn from their rows over their time.
double decode_rate(const Generation& g) {
  return g.decode_tokens > 0 ? double(g.decode_tokens) / std::max(g.decode_seconds, 1e-9) : 0.0;
}

double tokens_per_step(const Generation& g) {
  return g.decode_steps > 0 ? double(g.decode_tokens) / double(g.decode_steps) : 0.0;
}

}  // namespace

bool interrupted() { return g_interrupted != 0; }

InterruptScope::InterruptScope() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_previous);
}
InterruptScope::~InterruptScope() {
  g_generating = 0;
  sigaction(SIGINT, &g_previous, nullptr);
}
void InterruptScope::begin() {
  g_interrupted = 0;
  g_generating = 1;
}
void InterruptScope::end() { g_generating = 0; }

bool engine_draws(const runtime::SamplerConfig& sampling, const runtime::EngineInfo& info,
                  const Tokenizer& tok, bool drafting, bool ignore_eos) {
  // With drafts greedy only: the engine draws every row of a step, which for
  // a temperature > 0 would consume the uniforms of rows a rejection drops.
  return !runtime::uses_history(sampling) && !ignore_eos && info.vocab == tok.vocab_size() &&
         (!drafting || sampling.temperature == 0.0f);
}

Generation generate_tokens(runtime::SequenceRunner& seq, runtime::Sampler& sampler, const Tokenizer& tok,
                           std::span<const int32_t> prompt, int max_tokens,
                           const std::function<void(const std::string&)>& emit, runtime::Drafter* drafter,
                           bool ignore_eos, bool engine_draws) {
  Generation g;
  g.prompt_tokens = int(prompt.size());
  g.speculative = drafter != nullptr;
  sampler.limit_vocab(tok.vocab_size());  // a vocabulary padded beyond the tokenizer: never drawn
  for (int32_t t : prompt) sampler.accept(t, /*generated=*/false);
  FUTR_ASSERT(!engine_draws || !ignore_eos);
  runtime::SpeculativeDecoder dec(seq, drafter, engine_draws);
  const Stopwatch start;
  dec.prefill(prompt);
  g.prompt_seconds = start.seconds();

  StreamDecoder decoder(tok);
  runtime::StopMatcher stops(sampler.config().stop);
  auto show = [&](const std::string& s) {
    if (s.empty()) return;
    if (g.first_token_seconds < 0) g.first_token_seconds = start.seconds();
    emit(s);
  };
  std::vector<int32_t> eog;  // --ignore-eos: masked
  if (ignore_eos)
    for (int32_t id = 0; id < tok.vocab_size(); ++id)
      if (tok.is_eog(id)) eog.push_back(id);
  // On the CPU engine, a warning when the steps suddenly slow down (other
  // processes took the cores; cpu::ContentionWatch).
  std::optional<cpu::ContentionWatch> watch;
  if (seq.engine().info().name == "cpu") watch.emplace(cpu::num_threads());
  const Stopwatch t_gen;
  g.end = Generation::End::kMaxTokens;
  bool first_draw = true;
  while (g.generated < max_tokens) {
    if (interrupted()) {
      g.end = Generation::End::kInterrupted;
      break;
    }
    // (The engine's draws check their rows themselves.)
    if (!engine_draws)
      check_logits_finite(dec.logits(), g.generated == 0
                                            ? std::string("generate: the prompt's last position")
                                            : fmt::format("generate: token {}", g.generated + 1));
    const int32_t next = dec.draw(sampler, eog).token;
    if (!first_draw) ++g.decode_tokens;
    first_draw = false;
    if (tok.is_eog(next)) {
      g.end = Generation::End::kEog;
      break;
    }
    ++g.generated;
    g.tokens.push_back(next);
    sampler.accept(next, /*generated=*/true);
    const std::string piece = decoder.push(next);
    g.text += piece;
    show(stops.push(piece));
    if (stops.stopped()) {
      g.pending = next;
      g.end = Generation::End::kStop;
      break;
    }
    if (g.generated == max_tokens || dec.position() >= seq.capacity()) {
      g.pending = next;
      if (g.generated < max_tokens) g.end = Generation::End::kContextFull;
      break;
    }
    // A drawn token: the decode path (with a draft: no step when it was drafted).
    const Stopwatch t_step;
    const auto steps_before = dec.stats().steps;
    dec.advance(next, max_tokens - g.generated);
    if (watch && dec.stats().steps == steps_before + 1) {  // one engine step ran
      const std::string w = watch->observe(t_step.seconds());
      if (!w.empty()) fmt::print(stderr, "\n{}\n", w);
    }
  }
  dec.finish();  // the rows of drafts after the last draw
  g.decode_seconds = t_gen.seconds();
  g.decode_steps = int(dec.stats().steps);
  g.drafts = dec.stats();
  const std::string tail = decoder.flush();
  g.text += tail;
  if (!stops.stopped()) show(stops.push(tail) + stops.flush());
  return g;
}

void print_stats(const Generation& g, double load_seconds, int capacity) {
  if (g.end == Generation::End::kContextFull)
    fmt::print(stderr, "futr: stopped: the context of {} tokens is full (use a larger --ctx)\n", capacity);
  if (g.end == Generation::End::kInterrupted) fmt::print(stderr, "futr: stopped: interrupted (Ctrl-C)\n");
  if (load_seconds >= 0) fmt::print(stderr, "futr: load        {:7.3f} s (model and engine)\n", load_seconds);
  const double prate = double(g.prompt_tokens) / std::max(g.prompt_seconds, 1e-9);
  fmt::print(stderr, "futr: prompt     {:5} tokens in {:7.3f} s ({:8.1f} tokens/s{})\n", g.prompt_tokens,
             g.prompt_seconds, prate, g.prompt_tokens < 32 ? "; short prompt: mostly fixed cost" : "");
  if (g.first_token_seconds >= 0)
    fmt::print(stderr, "futr: first token after {:.3f} s\n", g.first_token_seconds);
  const double rate = decode_rate(g);
  fmt::print(stderr, "futr: generation {:5} tokens in {:7.3f} s ({:8.1f} tokens/s, {} decode steps{})\n",
             g.generated, g.decode_seconds, rate, g.decode_steps,
             g.decode_tokens > 0 ? fmt::format(", {:.1f} ms/token", 1000.0 / std::max(rate, 1e-9)) : "");
  if (g.speculative)
    fmt::print(stderr,
               "futr: speculative {} of {} draft tokens accepted ({:.1f}%), {:.2f} tokens per decode step\n",
               g.drafts.accepted, g.drafts.drafted, 100.0 * g.drafts.acceptance(), tokens_per_step(g));
}

void print_stats_json(const Generation& g, double load_seconds) {
  static constexpr const char* kEnds[] = {"eog", "max_tokens", "stop", "context_full", "interrupted"};
  nlohmann::ordered_json j;
  if (load_seconds >= 0) j["load_seconds"] = load_seconds;
  j["prompt_tokens"] = g.prompt_tokens;
  j["prompt_seconds"] = g.prompt_seconds;
  j["first_token_seconds"] = g.first_token_seconds;
  j["generated"] = g.generated;
  j["decode_steps"] = g.decode_steps;
  j["decode_tokens"] = g.decode_tokens;
  j["decode_seconds"] = g.decode_seconds;
  j["tokens_per_second"] = decode_rate(g);
  j["end"] = kEnds[int(g.end)];
  nlohmann::ordered_json s;
  s["mode"] = g.speculative ? "ngram" : "off";
  s["steps"] = g.drafts.steps;
  s["drafted"] = g.drafts.drafted;
  s["accepted"] = g.drafts.accepted;
  s["acceptance"] = g.drafts.acceptance();
  s["tokens_per_step"] = tokens_per_step(g);
  j["speculative"] = std::move(s);
  fmt::print(stderr, "{}\n", j.dump());
}

}  // namespace futr::cli
