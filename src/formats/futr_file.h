// The FuTransformer model file (.futr): a model with its projections already
// quantized and packed in the layouts the kernels read, written by
// `futr quantize` and read by every command (formats/loader.h dispatches on
// the magic). docs/QUANTIZATION.md ".futr file" is the byte-level spec.
//
//   offset  size  field
//   0       8     magic "FUTR\0\r\n\x1a" (the \r\n and ^Z catch text-mode mangling)
//   8       4     u32 format version (kFutrFormatVersion)
//   12      4     u32 oldest reader version that can read the file (forward
//                 compatibility: a newer writer that only ADDS fields keeps
//                 this at 1, so older readers still load it)
//   16      8     u64 header bytes J
//   24      J     header: UTF-8 JSON (config, tokenizer, tensors, quantization)
//   ...           zero padding to a multiple of 64
//   D       ...   data: every blob at a 64-byte aligned offset relative to D
// All integers little-endian. Tensor kinds (header "tensors" entries):
//   "f32" / "bf16"  [dims] row-major     (norms, embedding, LM head; version 2: the q/k/v
//                                         biases blk.L.attn_{q,k,v}.bias in FP32, config qkv_bias)
//   "int4"  N*K/2 nibble bytes in the decode kernels' fragment order
//           + N*K/G FP16 group scales in fragment order (quant/int4_pack.h,
//           kernels/layout/int4_fragment.cuh); fields group, method
//   "e4m3"  [N, K] row-major E4M3 (the FP8 GEMM's K-major B operand) + N FP32
//           per-channel scales; field folded_gain (RMSNorm gain folded in)
// A projection may be stored in several formats (e.g. int4 for decode and e4m3
// for prefill); each entry names its projection and format.
//
// Readers check everything against the file size and the config before
// touching data (hostile files get a futr::Error naming the file, never a
// crash or an absurd allocation): the header is nested at most 64 deep
// (core/json.h); every number must fit its field's range (no wrapping, no
// 1e300 -> inf); blobs lie inside the data section, 64-byte aligned, and never
// overlap; no tensor appears twice; every tensor is one the model uses (a
// dense tensor of the config's layers or a projection of them in a format of
// "weight_sets"; anything else is refused by name, as GGUF and Hugging Face
// readers do); scales and weights are finite (checked at load, naming the
// tensor); FP8 weight scales lie in [2^-64, 2^16] and calibrated amax values
// in [2^-24, 2^24] (quant/fp8_weights.h, quant/delayed_scaling.h: what weights
// and activations can be; the message names the tensor or site and the
// value); folded_gain is allowed only on projections whose input is the hidden
// state (q, k, v, gate, up). A version newer than this reader whose
// "oldest reader" field is still <= kFutrFormatVersion is read, otherwise the
// error says which futr version is needed.
//
// Tests: tests/quant/futr_file_test.cpp (round trip, hostile files, versions).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/mapped_file.h"
#include "model/model.h"
#include "quant/quantized_model.h"

namespace futr {

inline constexpr uint32_t kFutrFormatVersion = 2;
inline constexpr char kFutrMagic[8] = {'F', 'U', 'T', 'R', '\0', '\r', '\n', '\x1a'};

// True if the file starts with the .futr magic.
bool is_futr_file(const std::filesystem::path& path);

struct FutrWriteOptions {
  nlohmann::json provenance;              // free-form: source model, command line, calibration, time
  uint32_t version = kFutrFormatVersion;  // tests write other versions
  uint32_t min_reader_version = 0;  // 0: the oldest reader that reads what is written (1, or 2 with what
                                    // version 2 added: q/k/v biases, SentencePiece scores); tests set others
  std::function<void(int64_t done, int64_t total)> progress;  // bytes written
};

// Writes `model` (config, tokenizer, embedding / norms / LM head as BF16) and
// the projections of every set in `sets` (one per format; at least one).
// The file is written to path + ".tmp" and renamed, so a crash never leaves a
// truncated .futr behind.
void write_futr(const std::filesystem::path& path, const Model& model,
                const std::vector<const quant::QuantizedWeights*>& sets, const FutrWriteOptions& o = {});

// The serialized bytes (for tests).
std::vector<uint8_t> futr_bytes(const Model& model, const std::vector<const quant::QuantizedWeights*>& sets,
                                const FutrWriteOptions& o = {});

class FutrFile {
 public:
  explicit FutrFile(const std::filesystem::path& path);
  // Parses bytes held by the caller (they must outlive the object); `name` for messages.
  FutrFile(std::span<const uint8_t> bytes, std::string name);

  uint32_t version() const { return version_; }
  const nlohmann::json& header() const { return header_; }
  // Projection formats stored, in preference order int4, fp8, bf16.
  std::vector<WeightFormat> formats() const;
  // All projections of one stored format, unpacked to their logical forms.
  quant::QuantizedWeights read_weights(WeightFormat f) const;
  // The model: config, tokenizer, sources, and (with_weights) FP32 weights
  // whose projections are dequantized from the preferred stored format (an
  // FP8 folded gain is divided back out).
  Model to_model(bool with_weights) const;

 private:
  void parse();
  void check_blobs() const;
  void check_tensors_used(const ModelConfig& cfg) const;
  std::span<const uint8_t> blob(const nlohmann::json& t, const char* off_key, const char* size_key,
                                uint64_t expect) const;
  std::string name_;
  std::shared_ptr<MappedFile> file_;  // when opened from a path
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  nlohmann::json header_;
  uint64_t data_ = 0;  // data section offset
};

// load_model / inspect_model of a .futr file.
Model load_futr_model(const std::filesystem::path& path, bool with_weights);

}  // namespace futr
