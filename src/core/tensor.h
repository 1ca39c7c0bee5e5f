// futr::Tensor: a named-shape FP32 host array, the currency of the CPU
// reference backend and of the model description after loading.
//
// Layout is row-major with the outermost dimension first. Weights of a linear
// layer are [out_features, in_features] (the Hugging Face convention), so
// y = x W^T; readers convert other conventions (GGUF's reversed ne[]) on load.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace futr {

struct Tensor {
  std::vector<int64_t> shape;  // row-major, outermost first
  std::vector<float> data;     // numel() values

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> s) : shape(std::move(s)), data(size_t(count(shape)), 0.0f) {}

  static int64_t count(const std::vector<int64_t>& s) {
    return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
  }
  int64_t numel() const { return count(shape); }
  int rank() const { return int(shape.size()); }
  int64_t dim(int i) const { return shape.at(size_t(i < 0 ? i + rank() : i)); }
  bool empty() const { return data.empty(); }

  float* ptr() { return data.data(); }
  const float* ptr() const { return data.data(); }
  // Row r of a rank-2 tensor.
  float* row(int64_t r) { return data.data() + r * shape.back(); }
  const float* row(int64_t r) const { return data.data() + r * shape.back(); }

  std::string shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace futr
