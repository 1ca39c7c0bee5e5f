// The shared token loop, statistics and Ctrl-C handling (see generation.h).
#include "cli/generation.h"

#include <cmath>
#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "cli/common.h"

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

Generation generate_tokens(runtime::SequenceRunner& seq, runtime::Sampler& sampler, const Tokenizer& tok,
                           std::span<const int32_t> prompt, int max_tokens,
                           const std::function<void(const std::string&)>& emit, bool ignore_eos) {
  Generation g;
  g.prompt_tokens = int(prompt.size());
  sampler.limit_vocab(tok.vocab_size());  // a vocabulary padded beyond the tokenizer: never drawn
  for (int32_t t : prompt) sampler.accept(t, /*generated=*/false);
  const Stopwatch start;
  Tensor logits = seq.eval(prompt, int(prompt.size()) - 1);
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
  std::vector<float> masked;
  const Stopwatch t_gen;
  g.end = Generation::End::kMaxTokens;
  while (g.generated < max_tokens) {
    if (interrupted()) {
      g.end = Generation::End::kInterrupted;
      break;
    }
    const std::span<const float> row(logits.row(0), size_t(logits.dim(1)));
    check_logits_finite(row, g.generated == 0 ? std::string("generate: the prompt's last position")
                                              : fmt::format("generate: token {}", g.generated + 1));
    std::span<const float> draw = row;
    if (!eog.empty()) {
      masked.assign(row.begin(), row.end());
      for (int32_t id : eog)
        if (size_t(id) < masked.size()) masked[size_t(id)] = -INFINITY;
      draw = masked;
    }
    const int32_t next = sampler.sample(draw);
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
    if (g.generated == max_tokens || seq.position() >= seq.capacity()) {
      g.pending = next;
      if (g.generated < max_tokens) g.end = Generation::End::kContextFull;
      break;
    }
    const int32_t one[1] = {next};
    logits = seq.eval(one, 0, /*prompt=*/false);  // a drawn token: the decode path
    ++g.decode_steps;
  }
  g.decode_seconds = t_gen.seconds();
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
  const double rate = g.decode_steps > 0 ? double(g.decode_steps) / std::max(g.decode_seconds, 1e-9) : 0.0;
  fmt::print(stderr, "futr: generation {:5} tokens in {:7.3f} s ({:8.1f} tokens/s, {} decode steps{})\n",
             g.generated, g.decode_seconds, rate, g.decode_steps,
             g.decode_steps > 0 ? fmt::format(", {:.1f} ms/token", 1000.0 / std::max(rate, 1e-9)) : "");
}

}  // namespace futr::cli
