// The HTTP side of `futr serve` (cpp-httplib): the OpenAI-compatible routes
// over a Scheduler.
//
//   POST /v1/completions, /v1/chat/completions   api.h; stream: true answers
//        with server-sent events, one "data: {chunk}\n\n" per piece of text,
//        the finish chunk, the usage chunk (stream_options.include_usage),
//        then "data: [DONE]\n\n". While nothing is produced (queued, long
//        prefill) a ": keep-alive" comment goes out every second: a write
//        that fails means the client left, and the request is cancelled (its
//        sequence closed at the next step). The n choices of a request are
//        n Scheduler requests (seeds seed + i) sharing a RequestSignal: the
//        answer collects them in order; a stream writes each choice's
//        chunks (tagged with its index, with their tokens' logprobs) as they
//        come, then one usage chunk and [DONE] after the last choice ends.
//   GET /v1/models, /health (503 while draining), /metrics (Prometheus text).
//
// --api-key: every /v1/ route needs "Authorization: Bearer KEY" (401
// otherwise); /health and /metrics stay open (as in vLLM).
// Bodies over max_body_bytes: 413, counted after decompression
// (Content-Encoding gzip, deflate, br; any other encoding: 415) and for
// chunked bodies too; the /v1 POST routes read their body themselves through
// cpp-httplib's content reader and stop reading at the cap. A body sent to any
// other route is refused (404) before it is read, and the connection closed.
// Unknown routes: 404. Every error is an OpenAI error body. Every request is logged in one line on stderr:
//   futr serve: 127.0.0.1:50312 POST /v1/completions 200 0.512s prompt=5 completion=16 finish=length
//
// Connections (bounded whatever the other options say): one worker thread
// per open connection, started on demand, at most max_connections of them
// (0: by the machine, min(512, open-file limit / 2, process limit / 4));
// a connection beyond that is answered 503 at once and closed. Each
// connection reads through a stream of our own (cpp-httplib 0.11's
// per-recv timeout lets a client that sends one byte every few seconds hold
// a worker for ever, and grows a request's header lines and list without a
// bound): the request line and headers may hold 64 KiB in all (more: 400 and
// the connection closes), a request must arrive whole within request_timeout_s,
// no read waits longer than read_timeout_s, no write longer than
// write_timeout_s, an idle keep-alive connection is closed after
// keep_alive_timeout_s, and every wait ends within 0.1 s of stop().
//
// Drain (SIGTERM/SIGINT in `futr serve`): drain() refuses new requests (503),
// lets the accepted ones finish and their responses be written, then stops;
// all within drain_timeout_s, after which the requests still running are
// cancelled and every connection closed. A non-streaming request's
// disconnect is noticed only when its answer is written (cpp-httplib exposes
// no socket state to handlers); its work is bounded by max_tokens.
//
// Tests: tests/server/http_server_test.cpp (fake engine, real loopback HTTP),
// tests/server/serve_openai_test.py (futr serve + the openai client).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace futr::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (bind() returns it)
  std::string api_key;              // "": no authentication
  std::string model;                // the served model id (/v1/models, "model")
  size_t max_body_bytes = 1 << 20;  // after decompression
  int max_connections = 0;          // = worker threads; 0: default_max_connections()
  double request_timeout_s = 30;    // a request's line, headers and body must arrive within this
  double read_timeout_s = 10;       // longest wait for the client's next bytes
  double write_timeout_s = 10;      // longest wait for the client to take our bytes
  double keep_alive_timeout_s = 5;  // an idle connection is closed after this
  double drain_timeout_s = 30;      // drain(): everything ends within this
  int speculative = 0;              // draft tokens per step of requests without "speculative" (0: off)
  // Those drafts only for the greedy ones (temperature 0): --speculative auto.
  bool speculative_greedy_only = false;
  // Why the engine cannot run drafts (Engine::rollback_unsupported_reason;
  // empty: it can): a request asking for them is refused naming it.
  std::string speculative_unsupported;
};

// futr serve --speculative: the default of requests without "speculative".
inline constexpr const char* kDefaultSpeculativeMode = "auto";
// Sets o.speculative, o.speculative_greedy_only and o.speculative_unsupported
// for `mode` with `draft_max` tokens per draft (absent: the engine's,
// runtime::default_draft_max) on `engine`: "auto" drafts greedy requests
// where the engine can drop the rows of rejected drafts
// (Engine::rollback_unsupported_reason empty), else none, and returns why
// (one line; empty otherwise); "ngram" drafts every request (a futr::Error
// naming the reason where the engine cannot); "off" none.
std::string set_speculative_default(HttpOptions& o, const std::string& mode, std::optional<int> draft_max,
                                    const runtime::Engine& engine);

inline constexpr int kMaxHttpConnections = 4096;
inline constexpr size_t kMaxBodyBytes = size_t(1) << 30;
// min(512, open-file limit / 2, process limit / 4), at least 16.
int default_max_connections();

class HttpConnections;  // http_server.cpp

class HttpServer {
 public:
  // `scheduler`, `tok`, `chat` (may be null) and `metrics` must outlive it.
  HttpServer(Scheduler& scheduler, const Tokenizer& tok, const ChatTemplate* chat, Metrics& metrics,
             HttpOptions options);
  ~HttpServer();

  int bind();   // binds host:port; returns the port; futr::Error if it cannot
  void run();   // serves until stop() (call after bind())
  void stop();  // stops listening and closes connections
  // Graceful shutdown: 503 for new requests, in-flight ones finish, then stop().
  void drain();

  int in_flight() const { return in_flight_.load(); }
  int max_connections() const { return max_connections_; }

 private:
  void routes();
  Scheduler& scheduler_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  HttpOptions options_;
  ApiContext api_;
  int max_connections_ = 0;
  std::unique_ptr<HttpConnections> http_;
  std::atomic<int> in_flight_{0};  // /v1 requests whose response is not written yet
  std::atomic<uint64_t> next_id_{1};
  int64_t started_ = 0;  // Unix seconds at construction
};

}  // namespace futr::server
