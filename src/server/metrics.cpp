// Prometheus metrics of `futr serve` (see metrics.h).
#include "server/metrics.h"

#include <map>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace futr::server {

namespace {
// Latency buckets in seconds: 1 ms .. 60 s, roughly x2.5 apart (CPU prefill
// of a long prompt takes seconds, a GPU decode step a few milliseconds).
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60};
const prometheus::Histogram::BucketBoundaries kTpotBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                              0.1,    0.25,  0.5,    1,     2.5,  5};
}  // namespace

struct Metrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Gauge* kv_used;
  prometheus::Gauge* kv_total;
  prometheus::Gauge* blocks_used;
  prometheus::Gauge* blocks_free;
  prometheus::Counter* preemptions;
  prometheus::Counter* prefix_hit;
  prometheus::Counter* prefix_query;
  prometheus::Gauge* prefix_rate;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generated_tokens;
  prometheus::Counter* spec_drafted;
  prometheus::Counter* spec_accepted;
  prometheus::Histogram* ttft;
  prometheus::Histogram* tpot;
  prometheus::Family<prometheus::Counter>* finished;
  prometheus::Family<prometheus::Counter>* rejected;

  Impl() {
    using namespace prometheus;
    auto gauge = [&](const char* name, const char* help) {
      return &BuildGauge().Name(name).Help(help).Register(*registry).Add({});
    };
    auto counter = [&](const char* name, const char* help) {
      return &BuildCounter().Name(name).Help(help).Register(*registry).Add({});
    };
    running = gauge("futr_requests_running", "Requests whose sequence is open in the engine");
    waiting = gauge("futr_requests_waiting", "Requests accepted and waiting for admission");
    kv_used = gauge("futr_kv_positions_used", "KV cache positions in use");
    kv_total = gauge("futr_kv_positions_total", "KV cache positions in all");
    blocks_used = gauge("futr_kv_blocks_used", "Paged KV cache: blocks held by sequences");
    blocks_free = gauge("futr_kv_blocks_free", "Paged KV cache: blocks free or cached with no owner");
    preemptions = counter("futr_preemptions_total",
                          "Requests that gave their KV blocks back (the cache was full) to resume later");
    prefix_hit =
        counter("futr_prefix_cache_hit_tokens_total", "Prompt tokens attached from the prefix cache");
    prefix_query = counter("futr_prefix_cache_query_tokens_total",
                           "Prompt tokens of the requests admitted into a paged KV cache");
    prefix_rate = gauge("futr_prefix_cache_hit_rate", "Prefix cache hit tokens / query tokens since start");
    prompt_tokens = counter("futr_prompt_tokens_total", "Prompt tokens prefilled");
    generated_tokens = counter("futr_generation_tokens_total", "Tokens generated");
    spec_drafted =
        counter("futr_speculative_draft_tokens_total",
                "Draft tokens run by speculative requests (prompt-lookup drafts verified in one step)");
    spec_accepted = counter("futr_speculative_accepted_tokens_total",
                            "Draft tokens kept (each one a token generated without a step of its own)");
    ttft = &BuildHistogram()
                .Name("futr_time_to_first_token_seconds")
                .Help("Time from accepting a request to its first generated token")
                .Register(*registry)
                .Add({}, kTtftBuckets);
    tpot = &BuildHistogram()
                .Name("futr_time_per_output_token_seconds")
                .Help("Mean time between generated tokens of a request (after the first)")
                .Register(*registry)
                .Add({}, kTpotBuckets);
    finished = &BuildCounter()
                    .Name("futr_requests_total")
                    .Help("Finished requests by finish reason")
                    .Register(*registry);
    rejected = &BuildCounter()
                    .Name("futr_requests_rejected_total")
                    .Help("Requests refused before admission, by HTTP status")
                    .Register(*registry);
    for (const char* r : {"stop", "length", "cancelled", "error"}) finished->Add({{"finish", r}});
  }
};

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

void Metrics::set_queue(int running, int waiting) {
  impl_->running->Set(running);
  impl_->waiting->Set(waiting);
}
void Metrics::set_kv(int64_t used, int64_t total) {
  impl_->kv_used->Set(double(used));
  impl_->kv_total->Set(double(total));
}
void Metrics::set_kv_blocks(int64_t used, int64_t free) {
  impl_->blocks_used->Set(double(used));
  impl_->blocks_free->Set(double(free));
}
void Metrics::preempted() { impl_->preemptions->Increment(); }
void Metrics::add_prefix_lookup(int64_t cached, int64_t prompt) {
  impl_->prefix_hit->Increment(double(cached));
  impl_->prefix_query->Increment(double(prompt));
  const double q = impl_->prefix_query->Value();
  impl_->prefix_rate->Set(q > 0 ? impl_->prefix_hit->Value() / q : 0.0);
}
void Metrics::add_prompt_tokens(int64_t n) { impl_->prompt_tokens->Increment(double(n)); }
void Metrics::add_generated_tokens(int64_t n) { impl_->generated_tokens->Increment(double(n)); }
void Metrics::add_speculative(int64_t drafted, int64_t accepted) {
  impl_->spec_drafted->Increment(double(drafted));
  impl_->spec_accepted->Increment(double(accepted));
}
void Metrics::observe_ttft(double s) { impl_->ttft->Observe(s); }
void Metrics::observe_tpot(double s) { impl_->tpot->Observe(s); }
void Metrics::finished(const std::string& reason) { impl_->finished->Add({{"finish", reason}}).Increment(); }
void Metrics::rejected(int status) { impl_->rejected->Add({{"status", std::to_string(status)}}).Increment(); }

std::string Metrics::serialize() const {
  return prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace futr::server
