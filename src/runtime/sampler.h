// TEMPORARY forwarder (server branch only, so that runtime/engine.h compiles
// before runtime stage A moves the sampler here as runtime::SamplerConfig):
// the merge of `runtime` replaces this file with the real one.
#pragma once

#include "cli/sampler.h"

namespace futr::runtime {
using ::futr::SamplerConfig;
}  // namespace futr::runtime
