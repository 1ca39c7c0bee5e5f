// TEMPORARY forwarder (server branch only, so that runtime/engine.h compiles
// before runtime stage A moves the sampler here): the merge of `runtime`
// replaces this file with the real one.
#pragma once

#include "cli/sampler.h"
