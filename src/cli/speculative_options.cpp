// --speculative and --draft-max (see speculative_options.h).
#include "cli/speculative_options.h"

#include "cli/common.h"
#include "core/error.h"

namespace futr::cli {

void add_speculative_options(CLI::App* app, SpeculativeCliOptions& o) {
  const GroupNewOptions group(app, kSamplingGroup);
  app->add_option(
         "--speculative", o.mode,
         "Speculative decoding: auto (ngram when greedy, where the engine supports it), ngram (drafts "
         "looked up in the prompt and output, verified in one step; the same tokens), off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "ngram", "off"}));
  app->add_option("--draft-max", o.draft_max,
                  fmt::format("Tokens per draft at most (1..64; adapts below that; default {}, {} on the GPU "
                              "engine, whose multi-row steps are padded to buckets)",
                              runtime::kDraftMaxDefault, runtime::kDraftMaxPaddedDefault));
}

void check_speculative_options(const SpeculativeCliOptions& o) {
  FUTR_CHECK(o.mode == "auto" || o.mode == "ngram" || o.mode == "off",
             "--speculative: unknown mode '{}' (auto | ngram | off)", o.mode);
  FUTR_CHECK(!o.draft_max || (*o.draft_max >= 1 && *o.draft_max <= runtime::NgramDrafter::kMaxDraft),
             "--draft-max must be in [1, {}] (got {})", runtime::NgramDrafter::kMaxDraft,
             o.draft_max.value_or(0));
}

std::unique_ptr<runtime::Drafter> make_cli_drafter(const SpeculativeCliOptions& o,
                                                   const runtime::Engine& engine,
                                                   const runtime::SamplerConfig& sampling,
                                                   std::string* note) {
  check_speculative_options(o);
  if (note) note->clear();
  if (o.mode == "off" || (o.mode == "auto" && sampling.temperature > 0.0f)) return nullptr;
  const std::string why = engine.rollback_unsupported_reason();
  if (!why.empty()) {
    FUTR_CHECK(o.mode != "ngram", "--speculative ngram: not with this engine ({}); use --speculative off",
               why);
    if (note) *note = "speculative decoding off: " + why;
    return nullptr;
  }
  runtime::SpeculativeConfig c;
  c.mode = runtime::SpeculativeMode::kNgram;
  c.draft_max = o.draft_max ? *o.draft_max : runtime::default_draft_max(engine);
  return runtime::make_drafter(c);
}

}  // namespace futr::cli
