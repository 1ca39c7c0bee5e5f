// Shared CLI helpers (see common.h).
#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io.h"
#include "formats/loader.h"

#ifndef FUTR_DEFAULT_MODEL
#define FUTR_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace futr::cli {

void add_run_options(CLI::App* app, RunOptions& o) {
  app->add_option("-m,--model", o.model,
                  "Model file or directory (GGUF, Hugging Face safetensors directory); default: " +
                      default_model_path());
  // NOTE: CLI::NonNegativeNumber prints DBL_MAX's 309 digits in its message.
  app->add_option("-t,--threads", o.threads, fmt::format("CPU threads, 0..{} (default 0: all)", max_threads()))
      ->check(CLI::Range(0, max_threads()));
  app->add_option("--backend", o.backend,
                  "Engine: cpu|gpu|auto (auto: the GPU engine when it can run, else cpu; says "
                  "which on stderr)")
      ->check(CLI::IsMember(runtime::engine_kind_names()))
      ->capture_default_str();
}

std::string default_model_path() { return FUTR_DEFAULT_MODEL; }

Model load_model_for_cli(const RunOptions& o) {
  std::string path = o.model;
  if (path.empty()) {
    path = default_model_path();
    FUTR_CHECK(std::filesystem::exists(path),
               "the default model {} is missing: run scripts/fetch-model.sh (or pass --model PATH)",
               path);
  }
  FUTR_CHECK(std::filesystem::exists(path), "model {} does not exist", path);
  return load_model(path);
}

std::string read_file_bytes(const std::string& path) {
  return read_file_limited(path, kMaxTextBytes, "a text file");
}

int max_threads() { return int(std::max(64u, 4 * std::thread::hardware_concurrency())); }

void check_ctx(const Model& model, int64_t ctx, int seqs, const char* flag, int64_t min) {
  const ModelConfig& c = model.config;
  FUTR_CHECK(ctx >= min && ctx <= c.max_context, "{} {} is out of range ({}..{}, the model's trained context)",
             flag, ctx, min, c.max_context);
  // FP32 K and V for every layer, position and sequence: the largest KV format.
  const uint64_t kv = uint64_t(ctx) * uint64_t(std::max(seqs, 1)) * uint64_t(c.n_layers) * uint64_t(c.kv_dim()) * 8;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) {
    const uint64_t mem = uint64_t(pages) * uint64_t(page);
    FUTR_CHECK(kv <= mem, "{} {}: its KV cache ({}) is larger than this machine's memory ({})", flag, ctx,
               human_bytes(kv), human_bytes(mem));
  }
}

void mask_untokenizable(std::span<float> logits, int32_t tokenizer_size) {
  for (size_t i = size_t(std::max(tokenizer_size, 0)); i < logits.size(); ++i) logits[i] = -INFINITY;
}

void check_logits_finite(std::span<const float> logits, const std::string& what) {
  for (size_t i = 0; i < logits.size(); ++i)
    FUTR_CHECK(!std::isnan(logits[i]) && logits[i] != INFINITY,
               "{}: the logits are not finite (id {} = {}); the model or its weights produce NaN/Inf", what, i,
               logits[i]);
}

runtime::EngineLog stderr_log(bool quiet) {
  if (quiet) return {};
  return [](const std::string& s) { fmt::print(stderr, "futr: {}\n", s); };
}

std::string read_stdin_bytes() { return read_fd_limited(0, kMaxStdinBytes, "stdin"); }

}  // namespace futr::cli
