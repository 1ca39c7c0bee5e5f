// `futr generate [PROMPT]`: continue a prompt (argument or stdin), streaming
// the text to stdout token by token.
//
//   1. tokenize the prompt (with --chat: first format it as one user turn
//      with the model's chat template, then special tokens in it are parsed);
//   2. prefill: the whole prompt through the engine (runtime::SequenceRunner:
//      steps of at most max_step_tokens rows), logits of the last position;
//   3. the token loop of cli/generation.h: sample (runtime/sampler.h: top-k,
//      top-p, min-p, penalties), stop at EOS/EOT, --max-tokens, a --stop
//      string or Ctrl-C; print the text through a StreamDecoder (UTF-8
//      sequences split across tokens are held back until complete) and flush;
//      evaluate the token alone (decode step).
//      With --speculative (cli/speculative_options.h) a decode step also
//      runs a draft of the next tokens looked up in the prompt and output;
//      the text is the same.
//   4. stderr: load time, prompt tokens and rate, time to first token,
//      generation tokens and rate, drafts accepted (also after Ctrl-C); with
//      --json one JSON line instead (cli/generation.h print_stats_json).
//
// A prompt longer than the context is an error; reaching the context during
// generation stops it with a note. With no prompt argument the prompt is read
// from stdin; on a terminal futr says so first.
#include "cli/commands.h"

#include <unistd.h>

#include <cstdio>
#include <memory>
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

struct GenerateOptions {
  RunOptions run;
  QuantCliOptions quant;  // --weights, --kv, ... (cli/engine_options.h)
  std::string prompt;
  bool prompt_given = false;
  std::string prompt_opt;  // -p/--prompt (llama.cpp's spelling of the argument)
  bool prompt_opt_given = false;
  std::string file;         // -f/--file: the prompt from a file
  bool ignore_eos = false;  // --ignore-eos: end-of-generation tokens are never drawn
  bool chat = false;
  std::string system;  // --system (chat only)
  int max_tokens = 256;
  runtime::SamplerConfig sampler;
  bool seed_given = false;
  bool quiet = false;          // no statistics on stderr
  bool json = false;           // the statistics as one JSON line on stderr
  SpeculativeCliOptions spec;  // --speculative, --draft-max
};

void write_out(const std::string& s) { write_stdout(s); }

void run_generate(GenerateOptions o) {
  FUTR_CHECK(int(o.prompt_given) + int(o.prompt_opt_given) + int(!o.file.empty()) <= 1,
             "give the prompt once: as an argument, with -p/--prompt or with -f/--file");
  if (o.prompt_opt_given) {
    o.prompt = o.prompt_opt;
    o.prompt_given = true;
  } else if (!o.file.empty()) {
    o.prompt = read_file_bytes(o.file);
    o.prompt_given = true;
  }
  if (!o.prompt_given) {
    if (isatty(STDIN_FILENO))
      fmt::print(stderr,
                 "futr: reading the prompt from stdin (end it with Ctrl-D; or give it as an argument)\n");
    o.prompt = read_stdin_bytes();
  }
  FUTR_CHECK(o.max_tokens >= 0, "--max-tokens must be >= 0 (got {})", o.max_tokens);
  FUTR_CHECK(o.run.ctx >= 0,
             "--ctx {} is out of range (1..the model's trained context; default: that, at most 4096)",
             o.run.ctx);
  if (!o.seed_given) o.sampler.seed = std::random_device{}();
  runtime::Sampler sampler(o.sampler);  // validates every sampling flag before the model loads
  check_speculative_options(o.spec);

  const Stopwatch t_load;
  // The GPU comes up while the model is read.
  const runtime::EngineWarmup warmup(runtime::parse_engine_kind(o.run.backend));
  const Model model = load_model_for_cli(o.run);
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer", model.path);
  const Tokenizer tok(model.tokenizer);

  std::vector<int32_t> prompt;
  if (o.chat) {
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    const ChatTemplate tmpl = ChatTemplate::for_tokenizer(tok);
    // The template's markers are special tokens; the user's text never is
    // (a typed "<|im_end|>" stays text). BOS as the template wants it.
    prompt = tmpl.encode(tok, messages, /*add_generation_prompt=*/true);
  } else {
    FUTR_CHECK(o.system.empty(), "--system needs --chat");
    prompt = tok.encode(o.prompt, tok.add_bos(), /*parse_special=*/false);
  }
  FUTR_CHECK(!prompt.empty(), "the prompt is empty (give it as an argument or on stdin)");

  runtime::RuntimeConfig rc = runtime_config(o.run, o.quant);
  rc.ctx = o.run.ctx > 0 ? o.run.ctx : default_ctx(model, rc.max_seqs);
  check_ctx(model, rc.ctx, rc.max_seqs, "--ctx");
  if (!o.quiet) print_ctx(model, rc.ctx, o.run.ctx > 0);
  FUTR_CHECK(int64_t(prompt.size()) <= rc.ctx,
             "the prompt has {} tokens, more than the context of {} (use a larger --ctx)", prompt.size(),
             rc.ctx);
  const std::unique_ptr<runtime::Engine> engine = runtime::make_engine(model, rc, stderr_log(o.quiet));
  std::string spec_note;
  const std::unique_ptr<runtime::Drafter> drafter = make_cli_drafter(o.spec, *engine, o.sampler, &spec_note);
  // The engine draws the tokens where it gives the host sampler's (no logits copied out).
  const bool on_engine = engine_draws(o.sampler, engine->info(), tok, drafter != nullptr, o.ignore_eos);
  runtime::SequenceRunner seq(*engine, 0, on_engine ? o.sampler : runtime::SamplerConfig{});
  if (!spec_note.empty() && !o.quiet) fmt::print(stderr, "futr: {}\n", spec_note);
  const double load_s = t_load.seconds();
  warn_if_contended(o.run, engine->info(), o.quiet);

  const InterruptScope ctrl_c;
  InterruptScope::begin();
  const Generation g = generate_tokens(seq, sampler, tok, prompt, o.max_tokens, write_out, drafter.get(),
                                       o.ignore_eos, on_engine);
  InterruptScope::end();
  write_out("\n");

  if (o.json) {
    if (g.end == Generation::End::kContextFull && o.quiet)
      fmt::print(stderr, "futr: stopped: the context of {} tokens is full (use a larger --ctx)\n",
                 seq.capacity());
    print_stats_json(g, load_s);
    return;
  }
  if (o.quiet) {
    if (g.end == Generation::End::kContextFull)
      fmt::print(stderr, "futr: stopped: the context of {} tokens is full (use a larger --ctx)\n",
                 seq.capacity());
  } else {
    fmt::print(stderr, "futr: {} | {}\n", model.path, engine->info().describe);
    print_stats(g, load_s, seq.capacity());
    print_sampling(o.sampler);
  }
  if (g.end == Generation::End::kInterrupted) throw ExitStatus{130};  // the shell's status for Ctrl-C
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  // Defaults: sampled at temperature 0.7 (greedy decoding of small models
  // tends to loop); the seed is printed on stderr so a run can be repeated.
  o->sampler.temperature = 0.7f;
  o->sampler.top_k = 40;
  o->sampler.top_p = 0.95f;
  CLI::App* sub = app.add_subcommand("generate", "Continue a prompt, streaming tokens to stdout");
  CLI::Option* prompt = sub->add_option("prompt", o->prompt, "Prompt text (default: read stdin)");
  CLI::Option* prompt_opt =
      sub->add_option("-p,--prompt", o->prompt_opt, "Prompt text (same as the argument)");
  sub->add_option("-f,--file", o->file, "Read the prompt from this file (bytes, as given)");
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
  sub->add_flag("--chat", o->chat, "Format the prompt as a user message with the chat template");
  sub->add_option("--system", o->system, "System message (with --chat)");
  sub->add_option("-n,--max-tokens,--n-predict", o->max_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->group(kSamplingGroup);
  sub->add_flag("--ignore-eos", o->ignore_eos, "Never draw an end-of-generation token (run to --max-tokens)")
      ->group(kSamplingGroup);
  CLI::Option* seed = add_sampling_options(sub, o->sampler);
  add_speculative_options(sub, o->spec);
  sub->add_flag("-q,--quiet", o->quiet, "No statistics on stderr");
  sub->add_flag("--json", o->json, "The statistics as one JSON line on stderr (also with --quiet)");
  hide_advanced(sub);
  sub->callback([o, prompt, prompt_opt, seed] {
    GenerateOptions copy = *o;
    copy.prompt_given = prompt->count() > 0;
    copy.prompt_opt_given = prompt_opt->count() > 0;
    copy.seed_given = seed->count() > 0;
    run_generate(copy);
  });
}

}  // namespace futr::cli
