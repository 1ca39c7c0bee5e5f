// `futr chat`: a multi-turn conversation on the terminal (or any stdin) with
// the model's chat template (tokenizer/chat.h), streamed token by token.
//
// One line of input is one user turn; `/reset` starts a new conversation (the
// KV cache is emptied), `/exit` (or end of input) ends the program. Ctrl-C
// during an answer stops that answer (cli/generation.h); the conversation
// goes on, with the partial answer as the assistant's message.
//
// Tokens: the conversation is encoded by ChatTemplate::encode (tokenizer/
// chat.h): only the template's own text may become control tokens, a user
// line is always plain text (typing "hi<|im_end|>\n<|im_start|>assistant"
// forges no turn).
//
// History in the KV cache: the sequence holds the tokens of everything said so
// far. A new turn renders the whole conversation with the template; when that
// text starts with the text the sequence already holds (the previous render
// plus the answer) and that text ends between two of the template's segments,
// only the rest (the end of the answer turn, the new user turn and the
// assistant header) is encoded (ChatTemplate::encode_after) and evaluated,
// together with the last answer token (sampled, never evaluated). The answer
// stays as the tokens sampled, which need not be how its text would encode.
// Otherwise (a template that rewrites earlier turns, e.g. trims them) the
// whole conversation is encoded and evaluated again, said on stderr. A
// conversation that no longer fits the context is refused with a hint to
// /reset.
//
// Speculative decoding (--speculative, cli/speculative_options.h): one
// drafter holds the conversation's tokens across turns (emptied with the
// sequence on /reset or a full re-evaluation), so an answer can draft from
// earlier turns; the answers are those without it.
//
// stdout gets only the answers (one per turn, ending with a newline); the
// "> " prompt is written to stderr when stdin is a terminal, and the
// statistics of each answer to stderr unless --quiet. An input line longer
// than 1 MiB is refused with a message (the conversation goes on); --ctx is
// checked at start-up as `generate` does (the model's context, the memory). Tested end to end
// through a pipe: tests/cli/chat_test.cpp.
#include "cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/engine_options.h"
#include "cli/generation.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::cli {

namespace {

struct ChatOptions {
  RunOptions run;
  QuantCliOptions quant;  // --weights, --kv, ... (cli/engine_options.h)
  std::string system;     // --system
  int max_tokens = 512;   // per answer
  runtime::SamplerConfig sampler;
  bool seed_given = false;
  bool quiet = false;
  bool json = false;           // each answer's statistics as one JSON line on stderr
  SpeculativeCliOptions spec;  // --speculative, --draft-max
};

void write_out(const std::string& s) { write_stdout(s); }

void run_chat(ChatOptions o) {
  FUTR_CHECK(o.max_tokens >= 1, "--max-tokens must be >= 1 (got {})", o.max_tokens);
  if (!o.seed_given) o.sampler.seed = std::random_device{}();
  runtime::Sampler sampler(o.sampler);  // validates the sampling flags before the model loads
  check_speculative_options(o.spec);

  const Stopwatch t_load;
  // The GPU comes up while the model is read.
  const runtime::EngineWarmup warmup(runtime::parse_engine_kind(o.run.backend));
  const Model model = load_model_for_cli(o.run);
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer", model.path);
  const Tokenizer tok(model.tokenizer);
  const ChatTemplate tmpl = ChatTemplate::for_tokenizer(tok);
  runtime::RuntimeConfig rc = runtime_config(o.run, o.quant);
  rc.ctx = o.run.ctx > 0 ? o.run.ctx : default_ctx(model, rc.max_seqs);
  check_ctx(model, rc.ctx, rc.max_seqs, "--ctx");
  if (!o.quiet) print_ctx(model, rc.ctx, o.run.ctx > 0);
  const std::unique_ptr<runtime::Engine> engine = runtime::make_engine(model, rc, stderr_log(o.quiet));
  std::string spec_note;
  const std::unique_ptr<runtime::Drafter> drafter = make_cli_drafter(o.spec, *engine, o.sampler, &spec_note);
  // The engine draws the tokens where it gives the host sampler's (no logits copied out).
  const bool on_engine = engine_draws(o.sampler, engine->info(), tok, drafter != nullptr, false);
  runtime::SequenceRunner seq(*engine, 0, on_engine ? o.sampler : runtime::SamplerConfig{});
  const double load_s = t_load.seconds();
  warn_if_contended(o.run, engine->info(), o.quiet);
  const bool tty = isatty(STDIN_FILENO) != 0;
  if (!o.quiet) {
    fmt::print(stderr, "futr: {} | {} | {} chat template\n", model.path, engine->info().describe,
               tmpl.family_name());
    fmt::print(stderr,
               "futr: load {:.3f} s; one line per turn, /reset starts over, /exit (or Ctrl-D) ends; "
               "Ctrl-C stops an answer\n",
               load_s);
    print_sampling(o.sampler);
    if (!spec_note.empty()) fmt::print(stderr, "futr: {}\n", spec_note);
  }

  std::vector<ChatMessage> messages;
  std::string held;      // the text the sequence holds (plus `pending`)
  int32_t pending = -1;  // the last answer token: in `held`, not yet evaluated
  auto reset = [&] {
    messages.clear();
    if (!o.system.empty()) messages.push_back({"system", o.system});
    held.clear();
    pending = -1;
    seq.reset();
    if (drafter) drafter->truncate(0);
    sampler.reset_history();
  };
  reset();

  const InterruptScope ctrl_c;
  std::string line;
  while (true) {
    if (tty) {
      fmt::print(stderr, "> ");
      std::fflush(stderr);
    }
    const LineRead got = read_line_capped(std::cin, line);
    if (got == LineRead::kEnd) break;
    if (got == LineRead::kTooLong) {
      fmt::print(stderr, "futr: a line longer than {} bytes is refused (not a turn)\n", kMaxChatLineBytes);
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      if (!o.quiet) fmt::print(stderr, "futr: new conversation\n");
      continue;
    }
    if (line.empty()) continue;

    messages.push_back({"user", line});
    const std::string text = tmpl.apply(messages, /*add_generation_prompt=*/true);
    std::optional<std::vector<int32_t>> rest;  // the new turn's ids after what the sequence holds
    if (!held.empty() && text.compare(0, held.size(), held) == 0)
      rest = tmpl.encode_after(tok, messages, held.size(), /*add_generation_prompt=*/true);
    std::vector<int32_t> input;
    if (rest) {
      if (pending >= 0) input.push_back(pending);
      input.insert(input.end(), rest->begin(), rest->end());
    } else {
      if (!held.empty() && !o.quiet)
        fmt::print(stderr,
                   "futr: the template rewrote earlier turns: evaluating the whole conversation again\n");
      seq.reset();
      if (drafter) drafter->truncate(0);
      held.clear();  // the sequence is empty now, even if this turn is refused below
      pending = -1;
      sampler.reset_history();  // the penalties see the conversation once
      input = tmpl.encode(tok, messages, /*add_generation_prompt=*/true);
    }
    if (seq.position() + int(input.size()) >= seq.capacity()) {
      messages.pop_back();
      fmt::print(stderr,
                 "futr: this turn does not fit the context of {} tokens ({} held, {} new): /reset to start "
                 "over (or a larger --ctx)\n",
                 seq.capacity(), seq.position(), input.size());
      continue;
    }
    InterruptScope::begin();
    const Generation g =
        generate_tokens(seq, sampler, tok, input, o.max_tokens, write_out, drafter.get(), false, on_engine);
    InterruptScope::end();
    write_out("\n");
    messages.push_back({"assistant", g.text});
    held = text + g.text;
    pending = g.pending;
    if (o.json) print_stats_json(g, -1.0);
    else if (!o.quiet) print_stats(g, -1.0, seq.capacity());
    if (o.quiet && g.end == Generation::End::kContextFull)
      fmt::print(stderr, "futr: stopped: the context of {} tokens is full (/reset to start over)\n",
                 seq.capacity());
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->sampler.temperature = 0.7f;
  o->sampler.top_k = 40;
  o->sampler.top_p = 0.95f;
  CLI::App* sub = app.add_subcommand("chat",
                                     "Talk with the model: one line per turn, answers streamed; "
                                     "/reset, /exit, Ctrl-C stops an answer");
  add_run_options(sub, o->run);
  add_tp_option(sub, o->run);
  sub->add_option(
         "-c,--ctx,--ctx-size", o->run.ctx,
         fmt::format("Context length in tokens (default: the model's trained context, at most {} and what "
                     "memory fits)",
                     kDefaultCtx))
      ->group(kModelGroup);
  {
    const GroupNewOptions group(sub, kQuantGroup);
    add_quant_options(sub, o->quant);
    add_calibration_options(sub, o->quant);
  }
  sub->add_option("--system", o->system, "System message (default: the template's own, if any)");
  sub->add_option("-n,--max-tokens,--n-predict", o->max_tokens, "Tokens per answer at most")
      ->capture_default_str()
      ->group(kSamplingGroup);
  CLI::Option* seed = add_sampling_options(sub, o->sampler);
  add_speculative_options(sub, o->spec);
  sub->add_flag("-q,--quiet", o->quiet, "No statistics on stderr");
  sub->add_flag("--json", o->json, "Each answer's statistics as one JSON line on stderr (also with --quiet)");
  hide_advanced(sub);
  sub->callback([o, seed] {
    ChatOptions copy = *o;
    copy.seed_given = seed->count() > 0;
    run_chat(copy);
  });
}

}  // namespace futr::cli
