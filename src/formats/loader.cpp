// load_model() dispatch: see loader.h.
#include "formats/loader.h"

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/io.h"
#include "formats/futr_file.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "tokenizer/hf_json.h"

namespace futr {

ModelFormat detect_model_format(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const std::string kind = file_kind(path);
  FUTR_CHECK(kind != "missing", "{}: no such file or directory", path.string());
  if (kind == "directory") {
    FUTR_CHECK(optional_regular_file(path / "config.json", "the config of a Hugging Face model directory"),
               "{}: a directory without config.json is not a Hugging Face model directory", path.string());
    return ModelFormat::kHfDirectory;
  }
  FUTR_CHECK(kind == "regular file", "{}: is a {}, expected a model file or directory", path.string(), kind);
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  FUTR_CHECK(in.good(), "{}: cannot open", path.string());
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return ModelFormat::kGguf;
  if (is_futr_file(path)) return ModelFormat::kFutr;
  if (path.extension() == ".safetensors")
    fail(
        "{}: a bare safetensors file has no model config; pass the directory that holds it and "
        "its config.json",
        path.string());
  if (path.filename() == "config.json")
    fail("{}: pass the model directory, not its config.json", path.string());
  fail(
      "{}: unrecognized model format (expected a GGUF file, a .futr file or a Hugging Face "
      "directory with config.json)",
      path.string());
}

Model load_model(const std::filesystem::path& path) {
  switch (detect_model_format(path)) {
    case ModelFormat::kGguf: return load_gguf_model(path, true);
    case ModelFormat::kHfDirectory: return load_hf_model(path, true);
    case ModelFormat::kFutr: return load_futr_model(path, true);
  }
  FUTR_ASSERT(false);
}

Model inspect_model(const std::filesystem::path& path) {
  switch (detect_model_format(path)) {
    case ModelFormat::kGguf: return load_gguf_model(path, false);
    case ModelFormat::kHfDirectory: return load_hf_model(path, false);
    case ModelFormat::kFutr: return load_futr_model(path, false);
  }
  FUTR_ASSERT(false);
}

TokenizerSpec load_tokenizer_spec(const std::filesystem::path& path) {
  switch (detect_model_format(path)) {
    case ModelFormat::kGguf: return gguf_tokenizer_spec(GgufFile(path));
    case ModelFormat::kHfDirectory: {
      if (optional_regular_file(path / "tokenizer.json", "the tokenizer of a Hugging Face checkpoint"))
        return tokenizer_spec_from_hf_json(path, read_hf_config(path).vocab);
      return TokenizerSpec{};
    }
    case ModelFormat::kFutr: return load_futr_model(path, false).tokenizer;
  }
  FUTR_ASSERT(false);
}

}  // namespace futr
