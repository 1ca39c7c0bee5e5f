#include "model/config.h"

#include "core/error.h"

namespace futr {

void ModelConfig::validate(const std::string& source) const {
  FUTR_CHECK(arch == "llama", "{}: unsupported architecture '{}' (supported: llama)", source, arch);
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
  FUTR_CHECK(n_heads % n_kv_heads == 0, "{}: n_heads {} is not a multiple of n_kv_heads {}", source,
             n_heads, n_kv_heads);
  FUTR_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even for RoPE", source, head_dim);
  FUTR_CHECK(rope_theta > 0.0f, "{}: rope_theta {} must be positive", source, rope_theta);
  FUTR_CHECK(rms_eps > 0.0f && rms_eps < 1.0f, "{}: rms_eps {} out of range", source, rms_eps);
  FUTR_CHECK(rope_scaling.type == "none" || rope_scaling.type == "llama3",
             "{}: unsupported rope_scaling type '{}' (supported: none, llama3)", source,
             rope_scaling.type);
}

}  // namespace futr
