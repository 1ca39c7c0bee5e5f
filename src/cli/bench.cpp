// `futr bench`: the llama-bench idea for any engine and model (a loaded one,
// or `--synthetic NAME`: random weights of a real model's shapes, drawn on
// the GPU; model/synthetic.h). Every list flag is swept; each test runs one
// warm-up repetition (not counted) and then -r repetitions, reported as
// mean +- sample standard deviation.
//
//   ppP     (-p list)  --prompt-batch B sequences (default 1): B x P prompt
//                      tokens in as few step() calls as max_step_tokens
//                      allows (the GPU engine packs them into prefill chunks
//                      of --prefill-rows, or runs them through the decode
//                      step with --prefill=off), tokens/s = B x P / t.
//   tgN     (-n list)  one sequence from an empty cache: N steps of one row
//                      each, greedy, the token fed back; tokens/s = N / t and
//                      ms per token.
//   decode  (-b list x --ctx-list)  B sequences, each holding C positions
//                      (filled once by a prompt of random tokens, batched
//                      across the sequences; every repetition truncates back
//                      to C), then --steps steps of B rows (one per sequence,
//                      greedy): ms per step, tokens/s = B x steps / t.
//   --breakdown        after each prompt test on the GPU engine's prefill path,
//                      one more prompt with an event after each launch: us per
//                      chunk of each kind of launch (gpu_engine/prefill.h); and
//                      after each decode test, --steps more steps with the
//                      engine's per-kernel profiling on (GPU engine: the step
//                      in a graph with an event after each launch, no PDL;
//                      runtime::Engine::set_profiling):
//                      microseconds per step of each kind of launch, its %
//                      of their sum, and the sum against the measured step;
//                      then the step's plan, one line per launch
//                      (gpu_engine/step_plan.h; the JSON's profile.plan).
//
// Load time: reading the model (or drawing it) and building the engine.
// Tokens are random ids (seeded by --seed; results never depend on them).
// Output: a markdown table on stdout; --json FILE writes the same as JSON
// ("-": stdout instead of the table): {model, engine, describe, weights, kv,
// load_s, results: [{test, n_prompt, n_gen, batch, ctx, steps, reps,
// seconds: [...], tokens_per_s: {mean, stdev}, ms_per_step: {mean, stdev}}]}.
//
// Tests: tests/cli/bench_cli_test.cpp (--synthetic tiny on the CPU: seconds).
#include "cli/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "engines/factory.h"
#include "model/synthetic.h"
#include "runtime/engine.h"

namespace futr::cli {

namespace {

using runtime::BatchRow;
using runtime::RowOutput;

struct BenchOptions {
  RunOptions run;
  QuantCliOptions quant;            // --weights, --kv, ... (cli/engine_options.h)
  std::string synthetic;            // "" or a model/synthetic.h name
  std::vector<int> prompt = {512};  // -p
  std::vector<int> gen = {128};     // -n
  std::vector<int> batch = {1};     // -b
  std::vector<int> ctx_list = {0};  // --ctx-list
  int prompt_batch = 1;             // prompts of each -p length packed into the same steps
  int steps = 16;                   // decode steps per repetition
  int reps = 3;                     // -r
  std::string json;                 // --json FILE ("-": stdout)
  uint64_t seed = 1;
  int graphs = 1;          // GPU engine: CUDA graphs on (1) or off (0)
  int pdl = 1;             // GPU engine: programmatic dependent launch on (1) or off (0)
  int block_size = 0;      // paged KV cache: positions per block (0: contiguous)
  bool breakdown = false;  // per-kernel profile of each decode test
  bool quiet = false;
};

struct Measurement {
  std::string test;  // "pp512", "tg128", "decode"
  int n_prompt = 0, n_gen = 0, batch = 1, ctx = 0, steps = 0;
  double tokens = 0;            // tokens processed per repetition
  int steps_per_rep = 1;        // step() calls a repetition times (ms/step)
  std::vector<double> seconds;  // per repetition
  nlohmann::json profile;       // --breakdown: the engine's stats()["profile"] (decode tests)
};

struct MeanStd {
  double mean = 0, stdev = 0;
};

MeanStd mean_std(const std::vector<double>& v) {
  MeanStd r;
  if (v.empty()) return r;
  for (double x : v) r.mean += x / double(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - r.mean) * (x - r.mean);
    r.stdev = std::sqrt(ss / double(v.size() - 1));
  }
  return r;
}

// tokens/s and ms/step of each repetition, then their mean +- stdev.
MeanStd rate(const Measurement& m) {
  std::vector<double> v;
  for (double s : m.seconds) v.push_back(s > 0 ? m.tokens / s : 0.0);
  return mean_std(v);
}
MeanStd ms_per_step(const Measurement& m) {
  std::vector<double> v;
  for (double s : m.seconds) v.push_back(1e3 * s / double(m.steps_per_rep));
  return mean_std(v);
}

class Bench {
 public:
  Bench(runtime::Engine& e, uint64_t seed) : e_(e), rng_(seed) {}

  int32_t token() { return int32_t(rng_() % uint64_t(e_.info().vocab)); }

  // Appends `n` random prompt rows to each of `seqs` (batched across them, in
  // steps of at most max_step_tokens rows); the last row of each asks for a
  // token when `want_token`.
  void prompt(const std::vector<runtime::SeqId>& seqs, int n, bool want_token) {
    std::vector<BatchRow> rows;
    const size_t cap = size_t(std::max(1, e_.info().max_step_tokens));
    for (runtime::SeqId s : seqs) {
      const int pos0 = e_.length(s);
      for (int i = 0; i < n; ++i) {
        rows.push_back({token(), s, pos0 + i, want_token && i + 1 == n ? RowOutput::kToken : RowOutput::kNone,
                        -1, true});
        if (rows.size() == cap) flush(rows);
      }
    }
    flush(rows);
  }

  // nb prompts of n tokens (sequences 0..nb-1) in as few steps as the engine takes.
  double pp(int n, int nb = 1) {
    std::vector<runtime::SeqId> seqs;
    for (int s = 0; s < nb; ++s) {
      e_.truncate(s, 0);
      seqs.push_back(s);
    }
    const Stopwatch t;
    prompt(seqs, n, true);
    return t.seconds();
  }

  double tg(int n) {
    e_.truncate(0, 0);
    BatchRow row{token(), 0, 0, RowOutput::kToken, -1};
    const Stopwatch t;
    for (int i = 0; i < n; ++i) {
      const runtime::StepResult r = e_.step(std::span<const BatchRow>(&row, 1));
      row = {r.tokens.at(0), 0, i + 1, RowOutput::kToken, -1};
    }
    return t.seconds();
  }

  // Every sequence of `seqs` is at ctx positions; `steps` steps of one row each.
  double decode(const std::vector<runtime::SeqId>& seqs, int ctx, int steps) {
    for (runtime::SeqId s : seqs) e_.truncate(s, ctx);
    std::vector<BatchRow> rows;
    for (runtime::SeqId s : seqs) rows.push_back({token(), s, ctx, RowOutput::kToken, -1});
    const Stopwatch t;
    for (int k = 0; k < steps; ++k) {
      const runtime::StepResult r = e_.step(rows);
      for (size_t i = 0; i < rows.size(); ++i)
        rows[i] = {r.tokens.at(i), rows[i].seq, rows[i].pos + 1, RowOutput::kToken, -1};
    }
    return t.seconds();
  }

 private:
  void flush(std::vector<BatchRow>& rows) {
    if (!rows.empty()) e_.step(rows);
    rows.clear();
  }
  runtime::Engine& e_;
  std::mt19937_64 rng_;
};

std::string cell(const MeanStd& m, int digits) {
  return fmt::format("{:.{}f} ± {:.{}f}", m.mean, digits, m.stdev, digits);
}

void check_list(const std::vector<int>& v, const char* flag, int lo, int hi) {
  FUTR_CHECK(!v.empty(), "{}: the list is empty", flag);
  for (int x : v) FUTR_CHECK(x >= lo && x <= hi, "{}: {} is out of range ({}..{})", flag, x, lo, hi);
}

void run_bench(const BenchOptions& o) {
  check_list(o.prompt, "-p/--n-prompt", 0, 1 << 20);
  check_list(o.gen, "-n/--n-gen", 0, 1 << 20);
  check_list(o.batch, "-b/--batch", 1, 4096);
  check_list(o.ctx_list, "--ctx-list", 0, 1 << 22);
  FUTR_CHECK(o.prompt_batch >= 1 && o.prompt_batch <= 256, "--prompt-batch {} is out of range (1..256)",
             o.prompt_batch);
  FUTR_CHECK(o.steps >= 1 && o.steps <= 1 << 20, "--steps {} is out of range (1..1048576)", o.steps);
  FUTR_CHECK(o.reps >= 1 && o.reps <= 1000, "-r/--repetitions {} is out of range (1..1000)", o.reps);
  FUTR_CHECK(o.synthetic.empty() || o.run.model.empty(), "--synthetic and --model are exclusive");

  const int max_p = *std::max_element(o.prompt.begin(), o.prompt.end());
  const int max_n = *std::max_element(o.gen.begin(), o.gen.end());
  const int max_b = *std::max_element(o.batch.begin(), o.batch.end());
  const int max_c = *std::max_element(o.ctx_list.begin(), o.ctx_list.end());
  runtime::RuntimeConfig rc = runtime_config(o.run, o.quant);
  // The context every test fits in (or --ctx), the sequences and rows the largest test needs.
  const int need_ctx = std::max({max_p, max_n + 1, max_c + o.steps, 16});
  rc.ctx = o.run.ctx > 0 ? o.run.ctx : need_ctx;
  FUTR_CHECK(rc.ctx >= need_ctx,
             "--ctx {} is too small for these tests (they need {} positions: -p, -n + 1, "
             "--ctx-list + --steps)",
             rc.ctx, need_ctx);
  rc.max_seqs = std::max(max_b, o.prompt_batch);
  rc.max_step_tokens = std::max({max_p * o.prompt_batch, max_b * std::max(max_c, 1), 1});
  rc.max_step_tokens = std::min(rc.max_step_tokens, 1 << 16);
  rc.gpu_graphs = o.graphs != 0;
  rc.gpu_pdl = o.pdl != 0;
  rc.kv_block_size = o.block_size;

  const Stopwatch t_load;
  std::unique_ptr<Model> model;
  std::unique_ptr<runtime::Engine> engine;
  std::string model_name;
  if (!o.synthetic.empty()) {
    engine = engines::make_synthetic_engine(o.synthetic, rc, o.seed, model, stderr_log(o.quiet));
    model_name = "synthetic " + o.synthetic;
  } else {
    const runtime::EngineWarmup warmup(runtime::parse_engine_kind(o.run.backend));  // while the model is read
    model = std::make_unique<Model>(load_model_for_cli(o.run));
    check_ctx(*model, rc.ctx, rc.max_seqs, "--ctx");
    engine = runtime::make_engine(*model, rc, stderr_log(o.quiet));
    model_name = model->config.name.empty() ? model->path : model->config.name;
  }
  const double load_s = t_load.seconds();
  const runtime::EngineInfo& info = engine->info();
  if (!o.quiet)
    fmt::print(stderr, "futr: bench {} | {} | loaded in {:.2f} s\n", model_name, info.describe, load_s);
  warn_if_contended(o.run, info, o.quiet);

  Bench bench(*engine, o.seed);
  std::vector<Measurement> results;
  // The warm-up repetition also lets the GPU engine capture its graphs: a
  // bucket's first micro-step runs eagerly and its second captures, so every
  // timed repetition replays (decode warms up with at least two steps).
  // Progress on stderr as the tests run: one line per test with its result
  // (the table comes at the end).
  const int n_tests = int(std::count_if(o.prompt.begin(), o.prompt.end(), [](int p) { return p > 0; }) +
                          std::count_if(o.gen.begin(), o.gen.end(), [](int n) { return n > 0; }) +
                          o.batch.size() * o.ctx_list.size());
  if (!o.quiet)
    fmt::print(stderr, "futr: bench: {} test{}, each one warm-up + {} repetition{}\n", n_tests,
               n_tests == 1 ? "" : "s", o.reps, o.reps == 1 ? "" : "s");
  auto measure = [&](Measurement m, const auto& once, const auto& warm_up) {
    const Stopwatch t_test;
    warm_up();
    for (int r = 0; r < o.reps; ++r) m.seconds.push_back(once());
    if (!o.quiet)
      fmt::print(stderr, "futr: bench [{}/{}] {}{}: {} tokens/s, {} ms/step ({:.1f} s)\n", results.size() + 1,
                 n_tests, m.test, m.test == "decode" ? fmt::format(" batch {} ctx {}", m.batch, m.ctx) : "",
                 cell(rate(m), 1), cell(ms_per_step(m), 3), t_test.seconds());
    results.push_back(std::move(m));
  };
  const int pb = o.prompt_batch;
  for (int s = 0; s < pb; ++s) engine->open(s);
  for (int p : o.prompt) {
    if (p == 0) continue;
    Measurement m;
    m.test = fmt::format("pp{}", p);
    m.n_prompt = p;
    m.batch = pb;
    m.tokens = double(p) * pb;
    m.steps_per_rep = int((int64_t(p) * pb + info.max_step_tokens - 1) / info.max_step_tokens);
    measure(
        m, [&] { return bench.pp(p, pb); }, [&] { bench.pp(p, pb); });
    if (o.breakdown) {  // the prefill path's chunks, per kernel (GPU engine with --prefill)
      if (engine->set_profiling(true)) {
        bench.pp(p, pb);
        const nlohmann::json st = engine->stats();
        if (st.contains("prefill") && st["prefill"].is_object() && st["prefill"].contains("profile"))
          results.back().profile = st["prefill"]["profile"];
        engine->set_profiling(false);
      }
    }
  }
  for (int n : o.gen) {
    if (n == 0) continue;
    Measurement m;
    m.test = fmt::format("tg{}", n);
    m.n_gen = n;
    m.tokens = n;
    m.steps_per_rep = n;
    measure(
        m, [&] { return bench.tg(n); }, [&] { bench.tg(std::max(n, 2)); });
  }
  for (int s = 0; s < pb; ++s) engine->close(s);
  for (int b : o.batch)
    for (int c : o.ctx_list) {
      std::vector<runtime::SeqId> seqs;
      for (int s = 0; s < b; ++s) {
        engine->open(s);
        seqs.push_back(s);
      }
      bench.prompt(seqs, c, false);  // fill the cache once; each repetition truncates back to c
      Measurement m;
      m.test = "decode";
      m.batch = b;
      m.ctx = c;
      m.steps = o.steps;
      m.tokens = double(b) * o.steps;
      m.steps_per_rep = o.steps;
      measure(
          m, [&] { return bench.decode(seqs, c, o.steps); },
          [&] { bench.decode(seqs, c, std::min(std::max(o.steps, 2), rc.ctx - c)); });
      if (o.breakdown) {
        FUTR_CHECK(engine->set_profiling(true), "--breakdown: the {} engine has no per-kernel profiling",
                   info.name);
        bench.decode(seqs, c, 1);     // creates the profiler's events
        engine->set_profiling(true);  // new sums
        bench.decode(seqs, c, o.steps);
        results.back().profile = engine->stats().value("profile", nlohmann::json());
        engine->set_profiling(false);
      }
      for (runtime::SeqId s : seqs) engine->close(s);
    }

  // ---- output -------------------------------------------------------------------------
  nlohmann::json j;
  j["model"] = model_name;
  j["engine"] = info.name;
  j["describe"] = info.describe;
  j["weights"] = to_string(info.weights);
  j["kv"] = to_string(info.kv);
  j["load_s"] = load_s;
  j["reps"] = o.reps;
  j["stats"] = engine->stats();
  nlohmann::json rows = nlohmann::json::array();
  for (const Measurement& m : results) {
    const MeanStd r = rate(m), ms = ms_per_step(m);
    rows.push_back({{"test", m.test},
                    {"n_prompt", m.n_prompt},
                    {"n_gen", m.n_gen},
                    {"batch", m.batch},
                    {"ctx", m.ctx},
                    {"steps", m.steps},
                    {"reps", m.seconds.size()},
                    {"seconds", m.seconds},
                    {"tokens_per_s", {{"mean", r.mean}, {"stdev", r.stdev}}},
                    {"ms_per_step", {{"mean", ms.mean}, {"stdev", ms.stdev}}}});
    if (!m.profile.is_null()) rows.back()["profile"] = m.profile;
  }
  j["results"] = rows;
  if (!o.json.empty() && o.json != "-") {
    std::ofstream f(o.json);
    FUTR_CHECK(f.good(), "--json {}: cannot write the file", o.json);
    f << j.dump(2) << "\n";
    FUTR_CHECK(f.good(), "--json {}: writing failed", o.json);
  }
  if (o.json == "-") {
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("| model | engine | weights | kv | test | batch | ctx | t/s | ms/step |\n");
  fmt::print("|---|---|---|---|---|---:|---:|---:|---:|\n");
  for (const Measurement& m : results)
    fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", model_name, info.name,
               to_string(info.weights), to_string(info.kv), m.test, m.batch, m.ctx, cell(rate(m), 1),
               cell(ms_per_step(m), 3));
  fmt::print("\nload {:.2f} s; {} repetitions after one warm-up; {}\n", load_s, o.reps, info.describe);
  for (const Measurement& m : results) {
    if (m.profile.is_null() || m.n_prompt == 0) continue;
    double sum = 0;
    for (const auto& op : m.profile["ops"]) sum += op["us_per_chunk"].get<double>();
    const int64_t chunks = m.profile.value("chunks", int64_t(1));
    fmt::print(
        "\nbreakdown: prompt {} ({} chunks of <= {} rows; per chunk; eager launches, an interval is the "
        "kernel "
        "and any launch gap before it)\n\n",
        m.n_prompt, chunks,
        (m.profile.value("rows", int64_t(0)) + chunks - 1) / std::max<int64_t>(chunks, 1));
    fmt::print("| launch | per chunk | us | % of sum |\n|---|---:|---:|---:|\n");
    for (const auto& op : m.profile["ops"]) {
      const double us = op["us_per_chunk"].get<double>();
      fmt::print("| {} | {:.0f} | {:.1f} | {:.1f} |\n", op["op"].get<std::string>(),
                 op["launches_per_chunk"].get<double>(), us, sum > 0 ? 100.0 * us / sum : 0.0);
    }
    double prompt_s = 0;
    for (double s : m.seconds) prompt_s += s / double(m.seconds.size());
    fmt::print(
        "\nsum {:.1f} us per chunk; chunk (first to last event) {:.1f} us; the timed prompt {:.3f} ms\n", sum,
        m.profile.value("us_per_chunk", 0.0), 1e3 * prompt_s);
  }
  for (const Measurement& m : results) {
    if (m.profile.is_null() || m.n_prompt != 0) continue;
    const double step_us = 1e3 * ms_per_step(m).mean;
    double sum = 0;
    for (const auto& op : m.profile["ops"]) sum += op["us_per_micro_step"].get<double>();
    fmt::print(
        "\nbreakdown: decode batch {} ctx {} (bucket {}; per micro-step; launches timed one by one, no "
        "PDL overlap)\n\n",
        m.batch, m.ctx, m.profile.value("bucket", 0));
    fmt::print("| launch | per step | us | % of sum |\n|---|---:|---:|---:|\n");
    for (const auto& op : m.profile["ops"]) {
      const double us = op["us_per_micro_step"].get<double>();
      fmt::print("| {} | {:.0f} | {:.1f} | {:.1f} |\n", op["op"].get<std::string>(),
                 op["launches_per_micro_step"].get<double>(), us, sum > 0 ? 100.0 * us / sum : 0.0);
    }
    fmt::print("\nsum of the launches one by one {:.1f} us; measured step {:.1f} us ({:.2f}x the sum)\n", sum,
               step_us, sum > 0 ? step_us / sum : 0.0);
    if (m.profile.contains("plan") && m.profile["plan"].is_array()) {
      fmt::print("\n<details><summary>the step's plan: {} launches</summary>\n\n```text\n",
                 m.profile["plan"].size());
      for (const auto& line : m.profile["plan"]) fmt::print("{}\n", line.get<std::string>());
      fmt::print("```\n\n</details>\n");
    }
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Benchmark an engine: prompt and generation tokens/s, decode step time per batch and context "
      "(llama-bench style; markdown or JSON)");
  add_run_options(sub, o->run);
  add_tp_option(sub, o->run);
  sub->add_option("-c,--ctx,--ctx-size", o->run.ctx, "Context length (default: what the tests need)")
      ->group(kModelGroup);
  sub->add_option(
         "--synthetic", o->synthetic,
         "Random weights of a real model's shapes instead of --model (drawn on the GPU; the CPU has tiny "
         "only): " +
             fmt::format("{}", fmt::join(synthetic_model_names(), "|")))
      ->check(CLI::IsMember(synthetic_model_names()))
      ->group(kModelGroup);
  {
    const GroupNewOptions group(sub, kQuantGroup);
    add_quant_options(sub, o->quant);
  }
  sub->add_option("-p,--n-prompt", o->prompt, "Prompt lengths (list; 0 skips): tokens/s of one prompt")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("-n,--n-gen", o->gen, "Generation lengths (list; 0 skips): tokens/s from an empty cache")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option(
         "--prompt-batch", o->prompt_batch,
         "Prompt tests: this many prompts of each -p length packed into the same steps (1..256; with "
         "--prefill-rows >= their total, one prefill chunk: e.g. -p 2048 --prompt-batch 4 --prefill-rows "
         "8192 is M = 8192 as 4 x 2048 requests)")
      ->capture_default_str();
  sub->add_option("-b,--batch", o->batch, "Decode batch sizes (list): sequences stepped together")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--ctx-list", o->ctx_list,
                  "Decode context lengths (list): positions already in each sequence")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--steps", o->steps, "Decode steps timed per repetition")->capture_default_str();
  sub->add_option("-r,--repetitions", o->reps, "Repetitions of each test (after one warm-up)")
      ->capture_default_str();
  sub->add_option("--json", o->json, "Write the results as JSON to FILE (-: stdout, instead of the table)");
  sub->add_option("--seed", o->seed, "Seed of the random tokens (and of --synthetic weights)")
      ->capture_default_str();
  sub->add_option("--graphs", o->graphs,
                  "GPU engine: 1 replays a CUDA graph per batch bucket, 0 launches eagerly")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  sub->add_option("--pdl", o->pdl,
                  "GPU engine: 1 launches the step's kernels as programmatic dependents, 0 not")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  sub->add_option("--block-size", o->block_size,
                  "Paged KV cache of blocks of this many positions (0: a contiguous region per sequence): "
                  "what paging costs a step")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  sub->add_flag(
      "--breakdown", o->breakdown,
      "Per-kernel times (GPU engine): after each prompt test, one more prompt through the prefill path; "
      "after each decode test, --steps more steps launched one by one");
  sub->add_flag("-q,--quiet", o->quiet, "Nothing on stderr (no progress lines)");
  sub->callback([o] { run_bench(*o); });
}

}  // namespace futr::cli
