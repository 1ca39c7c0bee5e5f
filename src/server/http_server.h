// The HTTP side of `futr serve` (cpp-httplib): the OpenAI-compatible routes
// over a Scheduler.
//
//   POST /v1/completions, /v1/chat/completions   api.h; stream: true answers
//        with server-sent events, one "data: {chunk}\n\n" per piece of text,
//        the finish chunk, the usage chunk (stream_options.include_usage),
//        then "data: [DONE]\n\n". While nothing is produced (queued, long
//        prefill) a ": keep-alive" comment goes out every second: a write
//        that fails means the client left, and the request is cancelled (its
//        sequence closed at the next step).
//   GET /v1/models, /health (503 while draining), /metrics (Prometheus text).
//
// --api-key: every /v1/ route needs "Authorization: Bearer KEY" (401
// otherwise); /health and /metrics stay open (as in vLLM).
// Bodies over max_body_bytes: 413. Unknown routes: 404. Every error is an
// OpenAI error body. Every request is logged in one line on stderr:
//   futr serve: 127.0.0.1:50312 POST /v1/completions 200 0.512s prompt=5 completion=16 finish=length
//
// Drain (SIGTERM/SIGINT in `futr serve`): drain() refuses new requests (503),
// lets the accepted ones finish and their responses be written, then stops.
// A non-streaming request's disconnect is noticed only when its answer is
// written (cpp-httplib exposes no socket state to handlers); its work is
// bounded by max_tokens.
//
// Tests: tests/server/http_server_test.cpp (fake engine, real loopback HTTP),
// tests/server/serve_openai_test.py (futr serve + the openai client).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
}

namespace futr::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                // 0: any free port (bind() returns it)
  std::string api_key;            // "": no authentication
  std::string model;              // the served model id (/v1/models, "model")
  size_t max_body_bytes = 1 << 20;
  int threads = 0;                // HTTP worker threads; 0: 2 * (max_seqs + max_queue) + 8
  int max_queue = 64;             // for the default thread count
  double drain_timeout_s = 30;    // drain(): answers still being written after the last request ended
};

class HttpServer {
 public:
  // `scheduler`, `tok`, `chat` (may be null) and `metrics` must outlive it.
  HttpServer(Scheduler& scheduler, const Tokenizer& tok, const ChatTemplate* chat,
             Metrics& metrics, HttpOptions options);
  ~HttpServer();

  int bind();    // binds host:port; returns the port; futr::Error if it cannot
  void run();    // serves until stop() (call after bind())
  void stop();   // stops listening and closes connections
  // Graceful shutdown: 503 for new requests, in-flight ones finish, then stop().
  void drain();

  int in_flight() const { return in_flight_.load(); }

 private:
  void routes();
  Scheduler& scheduler_;
  const Tokenizer& tok_;
  Metrics& metrics_;
  HttpOptions options_;
  ApiContext api_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<int> in_flight_{0};  // /v1 requests whose response is not written yet
  std::atomic<uint64_t> next_id_{1};
  int64_t started_ = 0;            // Unix seconds at construction
};

}  // namespace futr::server
