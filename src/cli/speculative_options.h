// --speculative and --draft-max of `futr generate` and `futr chat`: decoding
// with prompt-lookup drafts verified in one engine step
// (runtime/speculative.h, runtime/ngram_drafter.h). The tokens are those of
// ordinary decoding; only the speed changes.
//
//   --speculative auto   (the default) ngram for greedy decoding
//                        (--temperature 0) where the engine can drop the rows
//                        of rejected drafts (else off, said on stderr unless
//                        quiet); off when sampling, where the drafts are
//                        accepted less often and it did not measure faster on
//                        the CPU engine (docs/PERF.md "Speculative decoding")
//   --speculative ngram  drafts from the longest recent match of the last 3,
//                        2 or 1 tokens in the prompt and the output; an error
//                        naming the reason where the engine cannot drop rows
//                        (Engine::rollback_unsupported_reason)
//   --speculative off    one row per decode step
//   --draft-max N        tokens per draft at most, 1..64 (the draft length
//                        adapts to the recent acceptance below that);
//                        default runtime::default_draft_max: 8, or 7 on the
//                        GPU engine (drafts sized to its buckets: 1, 3 or 7)
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace futr::cli {

struct SpeculativeCliOptions {
  std::string mode = "auto";     // auto | ngram | off
  std::optional<int> draft_max;  // absent: the engine's default (above); else 1..64
};

// Adds --speculative and --draft-max to `app` (in the sampling group).
void add_speculative_options(CLI::App* app, SpeculativeCliOptions& o);
// Checks the flags before the model loads (futr::Error naming the flag).
void check_speculative_options(const SpeculativeCliOptions& o);
// The drafter for the engine and sampler (null: off). `note` (may be null)
// receives why auto chose off for a greedy run, empty otherwise.
std::unique_ptr<runtime::Drafter> make_cli_drafter(const SpeculativeCliOptions& o,
                                                   const runtime::Engine& engine,
                                                   const runtime::SamplerConfig& sampling, std::string* note);

}  // namespace futr::cli
