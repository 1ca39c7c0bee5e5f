// load_model(): any supported model file or directory -> the one futr::Model.
//
// Dispatch is on content, not on the file name:
//   - a regular file starting with "GGUF"             -> formats/gguf.h
//   - a directory holding config.json                -> formats/hf_checkpoint.h
//   - a regular file starting with the .futr magic    -> formats/futr_file.h (projections
//     dequantized to FP32 from the file's preferred stored format)
// Anything else is a futr::Error naming the path and what was found.
//
// Every loader fills Model::sources, checks each tensor's shape against the
// config and calls ModelConfig::validate(). Weights are FP32 in canonical form
// (model/model.h).
//
// Tests: tests/formats/loader_test.cpp.
#pragma once

#include <filesystem>

#include "model/model.h"
#include "tokenizer/spec.h"

namespace futr {

enum class ModelFormat { kGguf, kHfDirectory, kFutr };

// Which reader handles `path`; throws futr::Error if none does.
ModelFormat detect_model_format(const std::filesystem::path& path);

// The whole model with FP32 weights.
Model load_model(const std::filesystem::path& path);

// Everything but the weights (config, tokenizer, sources): reads only metadata,
// never tensor data, so it is fast and small even for very large models.
Model inspect_model(const std::filesystem::path& path);

// Only the tokenizer description (GGUF metadata or tokenizer.json). A Hugging
// Face directory without tokenizer.json gives an empty spec (tokens empty).
TokenizerSpec load_tokenizer_spec(const std::filesystem::path& path);

}  // namespace futr
