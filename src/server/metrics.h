// The server's Prometheus metrics (prometheus-cpp's registry and text
// serializer; nothing hand-written about the exposition format).
//
//   futr_requests_running            gauge      sequences open in the engine
//   futr_requests_waiting            gauge      accepted, waiting for admission
//   futr_requests_total{finish}      counter    finished requests by finish reason
//                                               (stop | length | cancelled | error)
//   futr_requests_rejected_total{status} counter refused before admission (400/429/503)
//   futr_prompt_tokens_total         counter    prompt tokens prefilled
//   futr_generation_tokens_total     counter    tokens generated
//   futr_time_to_first_token_seconds histogram  submit -> first generated token
//   futr_time_per_output_token_seconds histogram (last - first token) / (n - 1), n >= 2
//   futr_kv_positions_used           gauge      engine KV positions in use
//   futr_kv_positions_total          gauge      engine KV positions in all
//   futr_kv_blocks_used              gauge      paged KV cache: blocks held by sequences
//   futr_kv_blocks_free              gauge      paged KV cache: blocks free or cached unreferenced
//   futr_preemptions_total           counter    requests that gave their blocks back to be resumed later
//   futr_prefix_cache_hit_tokens_total counter  prompt tokens attached from the prefix cache
//   futr_prefix_cache_query_tokens_total counter prompt tokens of the requests admitted (paged)
//   futr_prefix_cache_hit_rate       gauge      hit tokens / query tokens since start
//
// All methods are thread-safe (prometheus-cpp metrics are atomic).
// Tests: tests/server/http_server_test.cpp (scraped over HTTP).
#pragma once

#include <memory>
#include <string>

namespace futr::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  void set_queue(int running, int waiting);
  void set_kv(int64_t used, int64_t total);
  void set_kv_blocks(int64_t used, int64_t free);
  void preempted();
  // An admitted request's prompt of `prompt` tokens, `cached` of them attached from the prefix cache.
  void add_prefix_lookup(int64_t cached, int64_t prompt);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  // A verification step of a speculative request: `drafted` draft tokens run, `accepted` of them kept.
  void add_speculative(int64_t drafted, int64_t accepted);
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  void finished(const std::string& reason);  // "stop" | "length" | "cancelled" | "error"
  void rejected(int status);

  // The Prometheus text exposition (version 0.0.4) of every metric.
  std::string serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace futr::server
