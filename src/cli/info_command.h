// `futr info [MODEL]`: what a model file holds, read from its metadata only
// (formats/loader.h inspect_model: no tensor data is read, so it is instant
// even for large models).
//
// Prints: the config; tensors per stored type (count, parameters, bytes); the
// parameter count split into embedding / layers / LM head; memory: the files'
// size, FP32 as loaded by futr, and estimates for BF16, FP8 and INT4 g128
// (see model_memory() for the exact assumptions); the tokenizer summary.
// --tensors lists every tensor; --metadata (GGUF) every metadata key; --json
// prints the report as one JSON object.
//
// Tests: tests/formats/info_command_test.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include "model/model.h"

namespace futr::cli {

// Bytes of the model's weights in each representation. Quantized estimates
// quantize the seven projection matrices of every layer and an untied LM head;
// the token embedding (also serving as a tied head) and the norm gains stay BF16.
//   fp8:  1 byte per weight + one FP32 scale per output channel;
//   int4: 4 bits per weight + one FP16 scale per group of `int4_group` inputs
//         per output channel, group 128, or 64 when K is not a multiple of 128
//         (K padded up to the group if neither divides it).
struct ModelMemory {
  uint64_t params = 0;     // all weights
  uint64_t quantized = 0;  // weights in the quantized matrices
  uint64_t fp32 = 0;       // as futr loads it (CPU reference)
  uint64_t bf16 = 0;
  uint64_t fp8 = 0;
  uint64_t int4 = 0;
  int int4_group = 128;  // the group size used for the hidden-size inputs
};
ModelMemory model_memory(const ModelConfig& c);

// Total size of the files the model was read from (the GGUF file, or the
// safetensors files of a Hugging Face directory).
uint64_t model_file_bytes(const Model& m);

// The report for an inspected model (weights need not be loaded).
std::string info_text(const Model& m, bool list_tensors);
std::string info_json(const Model& m);

// Registers the `info` subcommand on `app`.
void add_info_command(CLI::App& app);

}  // namespace futr::cli

// main.cpp calls add_info_command(app) unqualified.
using futr::cli::add_info_command;
