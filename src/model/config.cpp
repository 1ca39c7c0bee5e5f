#include "model/config.h"

#include <cmath>

#include "core/error.h"
#include "core/text.h"

namespace futr {

void ModelConfig::validate(const std::string& source) const {
  FUTR_CHECK(arch == "llama" || arch == "qwen2", "{}: unsupported architecture '{}' ({})", source,
             printable(arch, 100), kSupportedArchitectures);
  FUTR_CHECK(qkv_bias == (arch == "qwen2"), "{}: architecture {} {} q/k/v biases", source, arch,
             qkv_bias ? "does not have" : "has");
  auto positive = [&](const char* field, int v, int limit) {
    FUTR_CHECK(v > 0 && v <= limit, "{}: {} = {} is out of range (1..{})", source, field, v, limit);
  };
  positive("hidden", hidden, 1 << 16);
  positive("n_layers", n_layers, 1024);
  positive("n_heads", n_heads, 1024);
  positive("n_kv_heads", n_kv_heads, 1024);
  positive("head_dim", head_dim, 1024);
  positive("intermediate", intermediate, 1 << 18);
  positive("vocab", vocab, 1 << 22);
  positive("max_context", max_context, 1 << 24);
  FUTR_CHECK(n_heads % n_kv_heads == 0, "{}: n_heads {} is not a multiple of n_kv_heads {}", source, n_heads,
             n_kv_heads);
  FUTR_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even for RoPE", source, head_dim);
  // NOTE: a double such as 1e300 read into a float is inf, which compares > 0.
  // Physically meaningful bounds: RoPE's base is >= 1 (real models: 1e4 to
  // 5e5; a denormal base turns every angle into inf/NaN), the norm epsilon at
  // least 1e-12 (real: 1e-6 to 1e-5; a denormal one lets a zero row divide by
  // ~0 and changes the text with exit 0).
  FUTR_CHECK(std::isfinite(rope_theta) && rope_theta >= 1.0f && rope_theta <= 1e12f,
             "{}: rope_theta {} is out of range [1, 1e12]", source, rope_theta);
  FUTR_CHECK(std::isfinite(rms_eps) && rms_eps >= 1e-12f && rms_eps < 1.0f,
             "{}: rms_eps {} is out of range [1e-12, 1)", source, rms_eps);
  FUTR_CHECK(rope_scaling.type == "none" || rope_scaling.type == "llama3",
             "{}: unsupported rope_scaling type '{}' (supported: none, llama3)", source,
             printable(rope_scaling.type, 100));
  if (rope_scaling.type == "llama3") {
    const RopeScaling& r = rope_scaling;
    FUTR_CHECK(std::isfinite(r.factor) && r.factor >= 1.0f && r.factor <= 1024.0f,
               "{}: rope_scaling factor {} is out of range [1, 1024]", source, r.factor);
    FUTR_CHECK(std::isfinite(r.low_freq_factor) && std::isfinite(r.high_freq_factor) &&
                   r.low_freq_factor > 0.0f && r.high_freq_factor > r.low_freq_factor &&
                   r.high_freq_factor <= 1e6f,
               "{}: rope_scaling needs 0 < low_freq_factor ({}) < high_freq_factor ({}) <= 1e6", source,
               r.low_freq_factor, r.high_freq_factor);
    FUTR_CHECK(r.original_max_position > 0 && r.original_max_position <= (1 << 24),
               "{}: rope_scaling original_max_position {} is out of range (1..16777216)", source,
               r.original_max_position);
  }
}

}  // namespace futr
