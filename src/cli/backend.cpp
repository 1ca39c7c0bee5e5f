// Backend selection (see backend.h) and the CPU backend adapter.
#include "cli/backend.h"

#include <fmt/format.h>

#include "core/error.h"
#include "cpu/forward.h"
#include "cpu/threads.h"

namespace futr {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, const BackendOptions& o)
      : threads_(cpu::set_num_threads(o.threads)), forward_(model, o.ctx) {}
  std::string name() const override { return "cpu"; }
  std::string describe() const override {
    const cpu::KvStorage& kv = forward_.cache().storage();
    return fmt::format("cpu (FP32 reference, {} threads, ctx {}, {} KV cache {:.1f} MiB)",
                       threads_, forward_.capacity(), kv.name(), double(kv.bytes()) / (1 << 20));
  }
  int capacity() const override { return forward_.capacity(); }
  int position() const override { return forward_.position(); }
  void reset() override { forward_.reset(); }
  Tensor eval(std::span<const int32_t> tokens, int first_logit) override {
    return forward_.eval(tokens, first_logit);
  }

 private:
  int threads_;
  cpu::Forward forward_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& options) {
  FUTR_CHECK(options.ctx >= 0, "--ctx must be positive (got {})", options.ctx);
  FUTR_CHECK(options.threads >= 0, "--threads must be positive (got {})", options.threads);
  // NOTE: "auto" will pick the GPU backend when one exists and a Hopper GPU
  // is present; until then it is the CPU reference.
  if (options.kind == "cpu" || options.kind == "auto") {
    return std::make_unique<CpuBackend>(model, options);
  }
  fail("unknown backend '{}' (choose {})", options.kind, kBackendChoices);
}

}  // namespace futr
