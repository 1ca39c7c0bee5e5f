// Hostile command lines: flag values outside their range are
// refused with the range (never remapped), options that do not apply are
// refused, resource limits hold (threads, context, input files), and futr
// quantize never overwrites its input or a non-regular file. Each case runs
// the `futr` binary and expects exit status 1 with a message on stderr
// (never a crash: rc >= 128 fails). Library-level hostile inputs are in
// tests/formats/hostile_input_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/run_futr.h"

namespace {

namespace fs = std::filesystem;
using futr::test::run_futr;

bool have_model() { return fs::exists(FUTR_DEFAULT_MODEL); }

struct Case {
  std::vector<std::string> args;
  const char* error;  // substring of stderr
  bool needs_model;
};

void check(const Case& c) {
  std::string line;
  for (const auto& a : c.args) line += a + " ";
  SCOPED_TRACE(line);
  const futr::test::FutrRun r = run_futr(c.args);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find(c.error), std::string::npos) << "stderr: " << r.err;
  EXPECT_LT(r.err.size(), 400u) << "an unclear (long) message: " << r.err;
}

const char* kText = FUTR_TEST_TEXT;

}  // namespace

TEST(HostileCli, FlagsOutOfRangeAreRefused) {
  const std::vector<Case> cases = {
      {{"generate", "hi", "--threads", "100000"}, "100000 not in range 0 to", false},
      {{"generate", "hi", "--threads", "-1"}, "-1 not in range 0 to", false},
      {{"generate", "hi", "--ctx", "-5"}, "--ctx -5 is out of range", false},
      {{"generate", "hi", "--top-k", "-5"}, "-5 not in range 0 to 2147483647", false},
      {{"generate", "hi", "--seed", "-1"}, "the seed must be in 0..18446744073709551615", false},
      {{"generate", "hi", "--top-p", "1.5"}, "--top-p must be in (0, 1] (got 1.5)", false},
      {{"generate", "hi", "--temperature", "nan"}, "--temperature must be in [0, 100] (got nan)", false},
      {{"generate", "hi", "--max-tokens", "-2"}, "--max-tokens must be >= 0", false},
      {{"perplexity", kText, "--ctx", "-5"}, "--ctx -5 is out of range (2..", false},
      {{"perplexity", kText, "--ctx", "64", "--stride", "-3"}, "--stride -3 is out of range (1..--ctx 64", false},
      {{"generate", "hi", "--ctx", "1000000"}, "--ctx 1000000 is out of range (1..8192, the model's trained context)",
       true},
      {{"perplexity", kText, "--ctx", "100000"}, "--ctx 100000 is out of range (2..8192", true},
      {{"generate", "hi", "--kv-block", "32"}, "--kv-block applies to --kv int4-rot", true},
      {{"generate", "hi", "--tp", "0"}, "0 not in range 1 to 64", false},
      {{"bench", "--tp", "65"}, "65 not in range 1 to 64", false},
      // Tensor parallelism runs the GPU engine: on the CPU backend it is refused, naming why.
      {{"generate", "hi", "--tp", "2", "--backend", "cpu"}, "--tp 2: tensor parallelism runs the GPU engine", true},
      {{"bench", "--synthetic", "tiny", "--backend", "cpu", "--tp", "4", "-p", "0", "-n", "1"},
       "--tp 4: tensor parallelism runs the GPU engine", false},
      // The FP8 prefill path is the GPU engine's: asked for on the CPU, refused, naming the CPU's FP8 reference.
      {{"generate", "hi", "--prefill", "--backend", "cpu"}, "--prefill on: the FP8 prefill path is the GPU engine's",
       true},
      {{"generate", "hi", "--prefill=sometimes"}, "--prefill: sometimes not in {auto,on,off}", false},
      {{"perplexity", kText, "--fp8-numerics", "tpu"}, "--fp8-numerics: tpu not in {cpu,gpu}", false},
  };
  for (const Case& c : cases)
    if (!c.needs_model || have_model()) check(c);
}

TEST(HostileCli, InputFilesMustBeRegular) {
  const fs::path dir = fs::temp_directory_path() / ("futr_hostile_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  check({{"perplexity", "/dev/zero"}, "/dev/zero: is a character device, expected a regular file", false});
  check({{"perplexity", (dir / "fifo").string()}, "fifo: is a FIFO, expected a regular file", false});
  check({{"perplexity", dir.string()}, "is a directory, expected a regular file", false});
  check({{"generate", "hi", "--model", (dir / "fifo").string()}, "is a FIFO, expected a model file", false});
  fs::remove_all(dir);
}

TEST(HostileCli, QuantizeNeverOverwritesTheInput) {
  const fs::path dir = fs::temp_directory_path() / ("futr_hostile_q_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / "gqa_hd64_tied_bf16", dir, fs::copy_options::recursive);
  const auto before = fs::file_size(dir / "model.safetensors");
  check({{"quantize", "--model", dir.string(), "-o", (dir / "model.safetensors").string()},
         "is a file of the input model; choose another output file", false});
  EXPECT_EQ(fs::file_size(dir / "model.safetensors"), before);
  fs::create_symlink(dir / "model.safetensors", dir / "alias.futr");
  check({{"quantize", "--model", (dir / "model.safetensors").string(), "-o", (dir / "alias.futr").string()},
         "is the file of the input model", false});
  check({{"quantize", "--model", dir.string(), "-o", "/dev/null"}, "-o /dev/null: is a character device", false});
  check({{"quantize", "--model", dir.string(), "-o", dir.string()}, "is a directory", false});
  fs::remove_all(dir);
}
