// The seam between the command-line tool and the engines that run a model.
//
// A Backend runs one sequence: eval() appends tokens at the next positions
// (keeping their K/V) and returns logits for the rows asked for; reset()
// starts a new sequence. `futr generate` and `futr perplexity` only talk to
// this interface, so the GPU backend plugs in by implementing it and adding
// its name to make_backend(); "--backend auto" then prefers it when a GPU is
// present. Today the only backend is "cpu" (cpu::Forward, the FP32 reference).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "model/model.h"

namespace futr {

struct BackendOptions {
  std::string kind = "auto";  // "cpu" | "auto" (auto = cpu until the GPU backend exists)
  int ctx = 0;                // context length (KV-cache capacity); <= 0: the model's
  int threads = 0;            // CPU threads; <= 0: all hardware threads
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;      // "cpu"
  virtual std::string describe() const = 0;  // one line: threads, cache, ...
  virtual int capacity() const = 0;          // context length
  virtual int position() const = 0;          // tokens in the current sequence
  virtual void reset() = 0;                  // new sequence
  // Runs `tokens` at positions [position(), position() + n) and returns the
  // logits of rows [first_logit, n) as [n - first_logit, vocab]. futr::Error
  // (nothing changed) when they do not fit in the context.
  virtual Tensor eval(std::span<const int32_t> tokens, int first_logit) = 0;
};

// The backend names accepted by --backend, for help texts.
inline constexpr const char* kBackendChoices = "cpu|auto";

// Builds the backend `options.kind` for `model` (which must outlive it);
// futr::Error for an unknown or unavailable kind.
std::unique_ptr<Backend> make_backend(const Model& model, const BackendOptions& options);

}  // namespace futr
