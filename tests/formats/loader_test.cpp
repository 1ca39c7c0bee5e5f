// load_model() dispatch (formats/loader.h): content-based detection and the
// errors for paths no reader handles.
#include "formats/loader.h"

#include <gtest/gtest.h>

#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"
#include "support/expect_error.h"

using namespace futr;
using namespace futr::test;
namespace fs = std::filesystem;

TEST(Loader, DetectsByContent) {
  TempDir t("loader");
  TinyLlama m;
  m.make();
  // A GGUF file with an unrelated extension is still a GGUF file.
  m.writer().write(t.path / "model.bin");
  EXPECT_EQ(detect_model_format(t.path / "model.bin"), ModelFormat::kGguf);
  const Model g = load_model(t.path / "model.bin");
  EXPECT_EQ(g.format, "gguf");
  EXPECT_EQ(g.path, (t.path / "model.bin").string());
  EXPECT_EQ(inspect_model(t.path / "model.bin").sources.size(), g.sources.size());
  EXPECT_EQ(detect_model_format(fs::path(FUTR_TEST_DATA) / "hf_tiny/gqa_hd64_tied_bf16"),
            ModelFormat::kHfDirectory);
}

TEST(Loader, Unrecognized) {
  TempDir t("loader");
  EXPECT_FUTR_ERROR(load_model(t.path / "nope"), "nope: no such file or directory");
  EXPECT_FUTR_ERROR(load_model(t.path), "a directory without config.json");
  write_text(t.path / "x.txt", "hello world");
  EXPECT_FUTR_ERROR(load_model(t.path / "x.txt"), "x.txt: unrecognized model format");
  write_text(t.path / "empty", "");
  EXPECT_FUTR_ERROR(load_model(t.path / "empty"), "empty: unrecognized model format");
  write_file(t.path / "w.safetensors", st_bytes({}));
  EXPECT_FUTR_ERROR(load_model(t.path / "w.safetensors"), "a bare safetensors file has no model config");
  write_text(t.path / "config.json", "{}");
  EXPECT_FUTR_ERROR(load_model(t.path / "config.json"), "pass the model directory, not its config.json");
  EXPECT_FUTR_ERROR(load_tokenizer_spec(t.path / "x.txt"), "unrecognized model format");
  // "GGUF" magic but nothing else.
  write_text(t.path / "short.gguf", "GGUF");
  EXPECT_FUTR_ERROR(load_model(t.path / "short.gguf"), "short.gguf: truncated: version");
}
