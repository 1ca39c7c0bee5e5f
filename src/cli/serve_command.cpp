// `futr serve`: loads the model, builds the engine with the options every
// command takes (--backend, --weights, --kv, ... cli/engine_options.h), and
// serves the OpenAI-compatible API (src/server/http_server.h) with continuous
// batching (src/server/scheduler.h) until SIGTERM/SIGINT.
//
//   futr serve [--host 127.0.0.1] [--port 8080] [--max-seqs 8|32] [--ctx 4096]
//              [--api-key KEY] [--max-queue 64] [--max-step-tokens 256]
//              [--served-model-name NAME] [--speculative auto|ngram|off]
//              [--draft-max N] [engine options]
//
// Prints "futr serve: listening on http://HOST:PORT" on stderr once it
// accepts connections (--port 0 picks a free port; the line says which).
// The first SIGTERM/SIGINT drains (in-flight requests finish, new ones get
// 503, then exit 0) within --drain-timeout seconds (default 30; then the
// requests still running are cut off); a second one stops at once (exit 1).
// Slow clients cannot hold either
// up: every connection's reads and writes have deadlines (http_server.h).
//
// Speculative decoding (prompt-lookup drafts verified in one step: the same
// tokens, fewer steps where the answer repeats its context) of requests that
// do not set "speculative": --speculative auto (the default) drafts up to
// --draft-max tokens per step (default 8, 7 on the GPU engine) for greedy
// requests (temperature 0) where the engine can drop the rows of rejected
// drafts (else none, said at start-up; a request asking for drafts is then
// refused naming why), ngram for every request (refused at start-up on such
// an engine), off for none; drafts run only while at most
// --speculative-max-batch requests run.
//
// --max-seqs sequences are decoded at once: by default 8 on the CPU engine
// (it computes a step's sequences one after another), 32 on the GPU engine
// (one decode micro-step's rows).
//
// Start-up refuses what cannot work: --ctx beyond the model's trained context
// or --max-seqs x --ctx whose KV cache exceeds the machine's memory (and on
// the GPU engine, the GPU's; the message says what fits), --max-queue above
// 65536, --max-connections above 4096, --max-body above 1 GiB.
//
// Tests: tests/server/serve_openai_test.py (the openai client against it).
#include "cli/serve_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/common.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::cli {

namespace {

// SIGTERM/SIGINT -> one byte on a pipe that a thread of run_serve() reads.
// NOTE: a handler rather than sigwait(): OpenBLAS and OpenMP start threads
// before main(), with the default signal mask, so a blocked-signal scheme
// would let them take the signal and die with it.
int g_signal_pipe[2] = {-1, -1};
extern "C" void on_signal(int sig) {
  const char c = char(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &c, 1);
}

struct ServeOptions {
  RunOptions run;
  QuantCliOptions quant;
  std::string host = "127.0.0.1";
  int port = 8080;
  int max_seqs = 0;  // 0: by engine (runtime::kDefaultServeSeqsCpu / kDefaultServeSeqsGpu)
  int max_queue = 64;
  int max_step_tokens = 256;
  std::string api_key;
  std::string model_name;     // "" = the model file's name without extension
  size_t max_body = 1 << 20;  // bytes
  int max_connections = 0;    // 0: by the machine
  double drain_timeout = 30;  // seconds
  int block_size = -1;        // paged KV cache: positions per block; -1: the engine's default; 0: no paging
  int64_t kv_blocks = 0;      // paged: blocks in all; 0: --max-seqs x ceil(ctx / block)
  double gpu_memory_fraction = 0;  // GPU engine, paged: the share of GPU memory that sizes the cache
  bool no_prefix_cache = false;
  double admission_reserve =
      server::SchedulerOptions{}.admission_reserve;           // paged: growth reserve at admission
  std::string speculative = server::kDefaultSpeculativeMode;  // auto | ngram | off: requests that do not say
  std::optional<int> draft_max;   // tokens per draft at most (absent: runtime::default_draft_max)
  int speculative_max_batch = 4;  // drafts only while at most this many requests run
};

constexpr int kMaxQueue = 65536;

void run_serve(const ServeOptions& o) {
  FUTR_CHECK(o.max_seqs >= 0, "--max-seqs must be >= 1 (got {})", o.max_seqs);
  FUTR_CHECK(o.max_step_tokens >= 1, "--max-step-tokens must be >= 1 (got {})", o.max_step_tokens);
  FUTR_CHECK(o.port >= 0 && o.port < 65536, "--port must be in [0, 65535] (got {})", o.port);
  FUTR_CHECK(o.max_queue >= 0 && o.max_queue <= kMaxQueue, "--max-queue must be in [0, {}] (got {})",
             kMaxQueue, o.max_queue);
  FUTR_CHECK(o.max_connections >= 0 && o.max_connections <= server::kMaxHttpConnections,
             "--max-connections must be in [0, {}] (0: by the machine; got {})", server::kMaxHttpConnections,
             o.max_connections);
  FUTR_CHECK(o.max_body >= 1 && o.max_body <= server::kMaxBodyBytes,
             "--max-body must be in [1, {}] bytes (got {})", server::kMaxBodyBytes, o.max_body);
  FUTR_CHECK(o.drain_timeout > 0 && o.drain_timeout <= 3600,
             "--drain-timeout must be in (0, 3600] seconds (got {})", o.drain_timeout);
  // Signals: a client that hangs up must not kill the process with SIGPIPE.
  FUTR_CHECK(pipe(g_signal_pipe) == 0, "cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The GPU comes up while the model is read.
  const runtime::EngineWarmup warmup(runtime::parse_engine_kind(o.run.backend));
  const Model model = load_model_for_cli(o.run);
  FUTR_CHECK(!model.tokenizer.tokens.empty(), "{}: the model has no tokenizer", model.path);
  const Tokenizer tok(model.tokenizer);
  std::optional<ChatTemplate> chat;
  try {
    chat = ChatTemplate::for_tokenizer(tok);
  } catch (const Error& e) {
    fmt::print(stderr, "futr serve: /v1/chat/completions is disabled: {}\n", e.what());
  }

  RunOptions run = o.run;
  runtime::RuntimeConfig cfg = runtime_config(run, o.quant);
  const bool gpu = runtime::engine_for(cfg) == runtime::EngineKind::kGpu;
  const int max_seqs =
      o.max_seqs > 0 ? o.max_seqs : (gpu ? runtime::kDefaultServeSeqsGpu : runtime::kDefaultServeSeqsCpu);
  if (run.ctx == 0) run.ctx = default_ctx(model, max_seqs);
  check_ctx(model, run.ctx, max_seqs, "--ctx");
  print_ctx(model, run.ctx, o.run.ctx > 0);
  cfg.ctx = run.ctx;
  cfg.max_seqs = max_seqs;
  cfg.max_step_tokens = o.max_step_tokens;
  cfg.kv_block_size = o.block_size;
  cfg.kv_blocks = o.kv_blocks;
  cfg.gpu_memory_fraction = o.gpu_memory_fraction;
  auto engine =
      runtime::make_engine(model, cfg, [](const std::string& s) { fmt::print(stderr, "futr: {}\n", s); });
  warn_if_contended(run, engine->info(), /*quiet=*/false);

  server::Metrics metrics;
  server::SchedulerOptions so;
  so.max_queue = o.max_queue;
  so.max_step_tokens = o.max_step_tokens;
  so.prefix_cache = !o.no_prefix_cache;
  so.admission_reserve = o.admission_reserve;
  so.speculative_max_batch = o.speculative_max_batch;
  server::Scheduler scheduler(*engine, tok, so, &metrics);

  server::HttpOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.api_key = o.api_key;
  ho.model = !o.model_name.empty()
                 ? o.model_name
                 : std::filesystem::path(model.path).filename().replace_extension().string();
  ho.max_body_bytes = o.max_body;
  ho.max_connections = o.max_connections;
  ho.drain_timeout_s = o.drain_timeout;
  const std::string no_drafts = server::set_speculative_default(ho, o.speculative, o.draft_max, *engine);
  server::HttpServer http(scheduler, tok, chat ? &*chat : nullptr, metrics, ho);
  const int port = http.bind();

  std::thread drainer;
  std::thread sig([&] {
    int n = 0;
    for (;;) {
      char c = 0;
      if (read(g_signal_pipe[0], &c, 1) != 1 || c == 0) return;  // 0: exit
      if (++n == 1) {
        fmt::print(stderr, "futr serve: {} received\n", c == SIGTERM ? "SIGTERM" : "SIGINT");
        drainer = std::thread([&] {
          http.drain();
          // drain() has stopped every connection; the process ends unless
          // something else holds it, which this bounds too.
          std::thread([] {
            std::this_thread::sleep_for(std::chrono::seconds(5));
            fmt::print(stderr, "futr serve: still running 5 s after the drain: exiting\n");
            _exit(1);
          }).detach();
        });
      } else {
        // At once: the requests still running are cut off either way, and
        // waiting for the engine's current step (seconds on a loaded CPU)
        // is what a second signal asks not to do.
        fmt::print(stderr, "futr serve: second signal: stopping now\n");
        _exit(1);
      }
    }
  });

  const auto& info = scheduler.engine_info();
  fmt::print(stderr, "futr serve: {} as '{}' | {}\n", model.path, ho.model, info.describe);
  fmt::print(stderr,
             "futr serve: {} sequences x {} positions, {} rows per step, queue {}, {} connections{}\n",
             info.max_seqs, info.ctx, std::min(info.max_step_tokens, o.max_step_tokens), o.max_queue,
             http.max_connections(), o.api_key.empty() ? "" : ", API key required");
  if (info.kv_block_size > 0)
    fmt::print(stderr,
               "futr serve: KV cache: {} tokens, paged: {} blocks of {} positions, admission by blocks with "
               "preemption, prefix cache {}\n",
               info.kv_blocks * info.kv_block_size, info.kv_blocks, info.kv_block_size,
               o.no_prefix_cache ? "off" : "on");
  else
    fmt::print(stderr,
               "futr serve: KV cache: {} tokens ({} sequences x {} positions, a region per sequence; "
               "admission reserves prompt + max_tokens)\n",
               int64_t(info.max_seqs) * info.ctx, info.max_seqs, info.ctx);
  if (!no_drafts.empty())  // --speculative auto on an engine that cannot drop rows
    fmt::print(stderr, "futr serve: speculative decoding off by default: {}\n", no_drafts);
  fmt::print(stderr, "futr serve: listening on http://{}:{}\n", o.host, port);
  http.run();  // until drain() or stop()
  const char zero = 0;
  [[maybe_unused]] ssize_t w = write(g_signal_pipe[1], &zero, 1);
  sig.join();
  if (drainer.joinable()) drainer.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub =
      app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API (continuous batching)");
  add_run_options(sub, o->run);
  add_tp_option(sub, o->run);
  add_quant_options(sub, o->quant);
  sub->add_option("--host", o->host,
                  "Address to bind (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  sub->add_option("--port", o->port, "TCP port (0: any free port, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option(
         "-c,--ctx,--ctx-size", o->run.ctx,
         fmt::format("Positions per sequence (default: the model's trained context, at most {} and what "
                     "memory fits for --max-seqs sequences)",
                     kDefaultCtx))
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-seqs", o->max_seqs,
                  fmt::format("Requests decoded at once (sequences in the engine; default {} on the CPU "
                              "engine, {} on the GPU engine: one decode step's rows)",
                              runtime::kDefaultServeSeqsCpu, runtime::kDefaultServeSeqsGpu))
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-queue", o->max_queue, "Requests waiting at most (more get 429; at most 65536)")
      ->capture_default_str();
  sub->add_option("--max-step-tokens", o->max_step_tokens,
                  "Rows per engine step (prompt chunks + decode rows)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on /v1/ routes");
  sub->add_option("--served-model-name", o->model_name,
                  "The model id clients send (default: the model file's name)");
  sub->add_option("--max-body", o->max_body,
                  "Largest request body in bytes, after decompression (more get 413; at most 1 GiB)")
      ->capture_default_str();
  sub->add_option("--max-connections,--http-threads", o->max_connections,
                  "Connections served at once, one worker thread each (more get 503; 0: by the machine, "
                  "at most 512; at most 4096)");
  sub->add_option("--drain-timeout", o->drain_timeout,
                  "Seconds the first SIGTERM/SIGINT waits for running requests")
      ->capture_default_str();
  sub->add_option(
         "--block-size", o->block_size,
         fmt::format("Paged KV cache: positions per block (0: a contiguous region per sequence; default: "
                     "{} on the CPU engine, {} on the GPU engine, whose blocks are 16, 32, 64 or 128)",
                     runtime::kDefaultKvBlockSize, runtime::kDefaultGpuKvBlockSize))
      ->check(CLI::Range(-1, 65536));
  sub->add_option(
         "--kv-blocks", o->kv_blocks,
         "Paged KV cache: blocks in all (default: --max-seqs x ctx / block, the memory of one region per "
         "sequence); the start-up line says the cache size in tokens")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--gpu-memory-fraction", o->gpu_memory_fraction,
                  "GPU engine, paged: size the KV cache so that the engine fills this share of the GPU's "
                  "memory (weights, workspaces and cache; e.g. 0.9); default: --max-seqs x ctx positions")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--admission-reserve", o->admission_reserve,
                  "Paged KV cache: admit a request while others run only if the free blocks also cover this "
                  "share of the blocks they may still grow into (doubled after a preemption, decaying back; "
                  "0: admit on the prompt's blocks alone)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  sub->add_flag("--no-prefix-cache", o->no_prefix_cache,
                "Paged KV cache: compute every prompt in full (no reuse of cached prefixes)");
  sub->add_option(
         "--speculative", o->speculative,
         "Speculative decoding of requests that do not set \"speculative\": auto (ngram for greedy "
         "requests, temperature 0, where the engine can drop the rows of rejected drafts; off for sampled "
         "ones), ngram (prompt-lookup drafts verified in one step: the same tokens, fewer steps on text "
         "that repeats its context) or off")
      ->check(CLI::IsMember({"auto", "ngram", "off"}))
      ->capture_default_str();
  sub->add_option(
         "--draft-max", o->draft_max,
         fmt::format("Speculative decoding: draft tokens per step at most (default {}, {} on the GPU "
                     "engine, whose multi-row steps are padded to buckets)",
                     runtime::kDraftMaxDefault, runtime::kDraftMaxPaddedDefault))
      ->check(CLI::Range(1, server::kMaxSpeculative));
  sub->add_option("--speculative-max-batch", o->speculative_max_batch,
                  "Speculative decoding: drafts run only while at most this many requests run")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  hide_advanced(sub);
  sub->callback([o] { run_serve(*o); });
}

}  // namespace futr::cli
