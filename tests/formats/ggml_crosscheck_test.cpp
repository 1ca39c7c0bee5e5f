// futr's ggml block decoders (formats/ggml_types.h) against the Python `gguf`
// package's dequantization (gguf.quants.dequantize; 0.19.0 in the test venv),
// through tests/formats/ggml_reference.py run with $FUTR_PYTHON (scripts/test.sh
// points it at its venv), else python3:
//   RandomBlocks  every quantized type futr reads (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1,
//                 Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K): random blocks (random bytes,
//                 finite scales, plus zero / subnormal / largest-fp16 scales),
//                 a fresh seed every run (printed);
//   WrittenModel  a one-layer llama GGUF written by gguf.GGUFWriter whose
//                 matrices use the eight newer GGML types: GgufFile reads
//                 every tensor, load_gguf_model loads the model, `futr info`'s
//                 report lists the types.
// Both compare bit for bit: the decoders form their products in the reference's
// order (ggml_types.h). Q8_K's reference is numpy, gguf has no dequantizer for it.
// Skips (with the reason) when the script's packages (numpy, gguf) are missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/info_command.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/loader.h"

namespace futr {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<float> read_f32(const fs::path& p) {
  const std::string b = read_bytes(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("futr_ggmlref_" + std::to_string(getpid()) + "_" + tag)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Runs ggml_reference.py with `args`; "" on success, else the reason to skip
// (missing packages; a failure of the script is also a test failure).
std::string run_reference(const std::string& args, const fs::path& dir) {
  const char* env = std::getenv("FUTR_PYTHON");
  const std::string python = env && *env ? env : "python3";
  const std::string err = (dir / "stderr.txt").string();
  const std::string cmd =
      "'" + python + "' '" FUTR_SOURCE_DIR "/tests/formats/ggml_reference.py' " + args + " 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 3 || rc == 127) return "reference script cannot run with " + python + ": " + read_bytes(err);
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_bytes(err);
  return rc == 0 ? "" : "reference script failed";
}

// Index of the first element whose bits differ, or -1.
int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return int64_t(i);
  return -1;
}

const GgmlTypeInfo& type_named(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id)
    if (const GgmlTypeInfo* t = ggml_type_info(id); t && name == t->name) return *t;
  throw std::runtime_error("no ggml type " + name);
}

TEST(GgmlCrosscheck, RandomBlocks) {
  const TempDir dir("blocks");
  const uint32_t seed = std::random_device{}();
  constexpr int kBlocks = 64;
  std::printf("[ seed ] %u\n", seed);
  const std::string skip = run_reference(
      "blocks '" + dir.path.string() + "' " + std::to_string(seed) + " " + std::to_string(kBlocks), dir.path);
  if (!skip.empty()) {
    if (::testing::Test::HasFailure()) return;
    GTEST_SKIP() << skip;
  }
  const std::vector<std::string> kinds = {"Q4_0", "Q4_1", "Q8_0", "Q5_0", "Q5_1", "Q2_K",
                                          "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  for (const std::string& kind : kinds) {
    const GgmlTypeInfo& t = type_named(kind);
    ASSERT_TRUE(t.supported) << kind;
    const std::string raw = read_bytes(dir.path / (kind + ".bin"));
    ASSERT_EQ(raw.size(), size_t(kBlocks) * t.block_bytes) << kind << ": block size differs from gguf's";
    const std::vector<float> want = read_f32(dir.path / (kind + ".f32"));
    ASSERT_EQ(want.size(), size_t(kBlocks) * t.block) << kind;
    std::vector<float> got(want.size(), -1234.5f);  // poisoned
    dequantize_ggml(t, {reinterpret_cast<const uint8_t*>(raw.data()), raw.size()}, got);
    const int64_t i = first_bit_difference(got, want);
    EXPECT_EQ(i, -1) << kind << " (seed " << seed << "): element " << i << " (block " << i / t.block
                     << "): futr " << got[size_t(std::max<int64_t>(i, 0))] << ", gguf "
                     << want[size_t(std::max<int64_t>(i, 0))];
  }
  std::printf("[ reference ] %s\n", read_bytes(dir.path / "reference.json").c_str());
}

TEST(GgmlCrosscheck, WrittenModel) {
  const TempDir dir("model");
  const fs::path file = dir.path / "ktypes.gguf";
  const uint32_t seed = std::random_device{}();
  std::printf("[ seed ] %u\n", seed);
  const std::string skip = run_reference(
      "model '" + file.string() + "' '" + dir.path.string() + "' " + std::to_string(seed), dir.path);
  if (!skip.empty()) {
    if (::testing::Test::HasFailure()) return;
    GTEST_SKIP() << skip;
  }
  const GgufFile f(file);
  std::set<std::string> seen;
  for (const GgufTensorInfo& t : f.tensors()) {
    seen.insert(t.type_info().name);
    const Tensor x = f.read_tensor(t);
    const std::vector<float> want = read_f32(dir.path / (t.name + ".f32"));
    const int64_t i = first_bit_difference(x.data, want);
    EXPECT_EQ(i, -1) << t.name << " (" << t.type_info().name << ", seed " << seed << "): element " << i;
  }
  for (const char* kind : {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "Q5_0", "Q5_1"})
    EXPECT_TRUE(seen.count(kind)) << kind << " missing from the written file";

  // The whole model loads (dequantized on load), and `futr info` names the types.
  const Model m = load_gguf_model(file, true);
  EXPECT_EQ(m.config.hidden, 256);
  const std::vector<float> down = read_f32(dir.path / "blk.0.ffn_down.weight.f32");
  EXPECT_EQ(first_bit_difference(m.weights.layers[0].w_down.data, down), -1);
  const std::string report = cli::info_text(inspect_model(file.string()), false);
  for (const char* line :
       {"Q2_K        1 tensors", "Q3_K        1 tensors", "Q4_K        1 tensors", "Q5_K        1 tensors",
        "Q6_K        1 tensors", "Q8_K        1 tensors", "Q5_0        1 tensors", "Q5_1        1 tensors"})
    EXPECT_NE(report.find(line), std::string::npos) << line << "\n" << report;
}

}  // namespace
}  // namespace futr
