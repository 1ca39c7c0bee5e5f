// Shared CLI helpers (see common.h).
#include "cli/common.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "cpu/threads.h"
#include "formats/loader.h"

#ifndef FUTR_DEFAULT_MODEL
#define FUTR_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace futr::cli {

void add_run_options(CLI::App* app, RunOptions& o) {
  app->add_option("-m,--model", o.model,
                  "Model file or directory (GGUF, Hugging Face safetensors directory); default: " +
                      default_model_path());
  app->add_option("-t,--threads", o.threads,
                  fmt::format("CPU threads (default: the physical cores, {} here; more warns)", cpu::physical_cores()))
      ->check(CLI::NonNegativeNumber);
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
  std::error_code ec;
  FUTR_CHECK(std::filesystem::exists(path, ec), "{}: no such file", path);
  FUTR_CHECK(!std::filesystem::is_directory(path, ec), "{}: is a directory, not a text file", path);
  std::ifstream f(path, std::ios::binary);
  FUTR_CHECK(f.good(), "{}: cannot open for reading", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  FUTR_CHECK(!f.bad(), "{}: read error", path);
  return ss.str();
}

runtime::EngineLog stderr_log(bool quiet) {
  if (quiet) return {};
  return [](const std::string& s) { fmt::print(stderr, "futr: {}\n", s); };
}

std::string read_stdin_bytes() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

}  // namespace futr::cli
