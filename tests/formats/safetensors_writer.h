// Test support: a small safetensors writer (header JSON + data buffer), so that
// tests make valid and broken files themselves without Python, and a Hugging
// Face directory writer for a tiny llama (config.json + model.safetensors or
// shards + index).
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/numeric.h"

namespace futr::test {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw bytes as stored
};

inline StTensor st_from_floats(const std::string& name, const std::string& dtype,
                               const std::vector<int64_t>& shape, const std::vector<float>& v) {
  StTensor t{name, dtype, shape, {}};
  for (float f : v) {
    if (dtype == "F32") {
      uint8_t b[4];
      std::memcpy(b, &f, 4);
      t.data.insert(t.data.end(), b, b + 4);
    } else {
      const uint16_t h = dtype == "F16" ? float_to_fp16(f) : float_to_bf16(f);
      t.data.push_back(uint8_t(h & 0xff));
      t.data.push_back(uint8_t(h >> 8));
    }
  }
  return t;
}

// The file for `header` (raw JSON text) followed by `data`.
inline std::vector<uint8_t> st_raw(const std::string& header, const std::vector<uint8_t>& data) {
  const uint64_t n = header.size();
  std::vector<uint8_t> b(8 + header.size() + data.size());
  std::memcpy(b.data(), &n, 8);
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
  return b;
}

// The header JSON for tensors laid out back to back.
inline std::string st_header(const std::vector<StTensor>& ts,
                             const std::map<std::string, std::string>& meta = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!meta.empty()) h["__metadata__"] = meta;
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  return h.dump();
}

inline std::vector<uint8_t> st_bytes(const std::vector<StTensor>& ts,
                                     const std::map<std::string, std::string>& meta = {}) {
  std::vector<uint8_t> data;
  for (const auto& t : ts) data.insert(data.end(), t.data.begin(), t.data.end());
  return st_raw(st_header(ts, meta), data);
}

inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& b) {
  std::ofstream o(p, std::ios::binary);
  o.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream o(p, std::ios::binary);
  o << s;
}

}  // namespace futr::test
