// The OpenAI-compatible HTTP routes over the Scheduler (see http_server.h).
#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

namespace futr::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// What the one log line of a request says beyond method, path and status;
// filled by the handler and printed by httplib's logger, which runs on the
// same worker thread after the response is written (streams included).
struct LogInfo {
  Clock::time_point start{};
  bool counted = false;        // counted in in_flight_
  int prompt_tokens = -1;      // -1: no generation
  int completion_tokens = 0;
  std::string finish;
  std::string error;           // the error message of a 4xx/5xx
};
thread_local LogInfo t_log;

void send_error(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
  t_log.error = body["error"].value("message", "");
}

void send_error(httplib::Response& res, const ApiError& e) { send_error(res, e.status(), e.body()); }

std::string sse(const json& chunk) { return "data: " + chunk.dump() + "\n\n"; }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// httplib::Server with a deeper accept queue.
// NOTE: Debian's libcpp-httplib is compiled with CPPHTTPLIB_LISTEN_BACKLOG 5:
// a burst of more simultaneous connections than that overflows the queue and
// the kernel drops SYNs, which clients resend only after a second. Linux lets
// listen() be called again on a listening socket to change its backlog.
class BacklogServer : public httplib::Server {
 public:
  void deepen_backlog(int n) {
    FUTR_CHECK(::listen(svr_sock_, n) == 0, "listen(): cannot set the accept queue to {}", n);
  }
};

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tok, const ChatTemplate* chat,
                       Metrics& metrics, HttpOptions options)
    : scheduler_(scheduler), tok_(tok), metrics_(metrics), options_(std::move(options)),
      http_(std::make_unique<BacklogServer>()), started_(unix_now()) {
  FUTR_CHECK(!options_.model.empty(), "the served model needs a name");
  api_.tok = &tok_;
  api_.chat = chat;
  api_.model = options_.model;
  api_.max_request_positions = scheduler_.max_request_positions();
  const int threads = options_.threads > 0
                          ? options_.threads
                          : 2 * (scheduler_.engine_info().max_seqs + options_.max_queue) + 8;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_tcp_nodelay(true);  // one SSE chunk per token: no Nagle delay
  routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    FUTR_CHECK(port > 0, "cannot bind {} to a free port", options_.host);
  } else {
    FUTR_CHECK(port > 0 && port < 65536, "--port must be in [0, 65535] (got {})", port);
    FUTR_CHECK(http_->bind_to_port(options_.host, port),
               "cannot bind {}:{} (in use, or not an address of this machine)", options_.host, port);
  }
  static_cast<BacklogServer&>(*http_).deepen_backlog(1024);
  return port;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::drain() {
  fmt::print(stderr, "futr serve: draining: {} running, {} waiting; new requests get 503\n",
             scheduler_.running(), scheduler_.waiting());
  scheduler_.begin_drain();
  scheduler_.wait_idle();
  // The answers of the last requests are still being written.
  const auto t0 = Clock::now();
  while (in_flight_.load() > 0 &&
         std::chrono::duration<double>(Clock::now() - t0).count() < options_.drain_timeout_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fmt::print(stderr, "futr serve: drained; stopping\n");
  stop();
}

void HttpServer::routes() {
  auto& s = *http_;

  // Timing, accounting and authentication before any route.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_log = LogInfo{};
    t_log.start = Clock::now();
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (api) {
      in_flight_.fetch_add(1);
      t_log.counted = true;
    }
    if (api && !options_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      send_error(res, 401,
                 error_body("Incorrect API key provided. Pass it as 'Authorization: Bearer KEY'.",
                            "invalid_request_error", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double dt = t_log.start == Clock::time_point{}
                          ? 0.0
                          : std::chrono::duration<double>(Clock::now() - t_log.start).count();
    std::string extra;
    if (t_log.prompt_tokens >= 0)
      extra = fmt::format(" prompt={} completion={} finish={}", t_log.prompt_tokens,
                          t_log.completion_tokens, t_log.finish);
    if (!t_log.error.empty()) extra += fmt::format(" error=\"{}\"", t_log.error);
    fmt::print(stderr, "futr serve: {}:{} {} {} {} {:.3f}s{}\n", req.remote_addr, req.remote_port,
               req.method, req.path, res.status, dt, extra);
    if (t_log.counted) in_flight_.fetch_sub(1);
    t_log = LogInfo{};
  });

  // OpenAI error bodies for what httplib answers itself (404, 413, 400 ...).
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                             httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = fmt::format("HTTP error {}", res.status);
    if (res.status == 400) msg = "malformed HTTP request";
    if (res.status == 404) msg = fmt::format("no route {} {}", req.method, req.path);
    if (res.status == 413) msg = "the request body is too large";
    if (res.status == 414) msg = "the request URI is too long";
    send_error(res, res.status,
               error_body(msg, res.status == 404 ? "not_found_error" : "invalid_request_error"));
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    send_error(res, 500, error_body(msg, "server_error"));
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler_.draining()) {
      res.status = 503;
      res.set_content(json{{"status", "draining"}}.dump(), "application/json");
      return;
    }
    res.set_content(json{{"status", "ok"},
                         {"running", scheduler_.running()},
                         {"waiting", scheduler_.waiting()}}
                        .dump(),
                    "application/json");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_response(options_.model, started_).dump(), "application/json");
  });

  auto generate = [this](Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    ApiRequest r;
    std::shared_ptr<Request> handle;
    try {
      if (scheduler_.draining()) {
        metrics_.rejected(503);
        throw ApiError(503, "server_shutting_down", "the server is shutting down; no new requests");
      }
      r = parse_request(endpoint, req.body, api_);
      handle = scheduler_.submit(r.gen);
    } catch (const ApiError& e) {
      if (e.status() == 400 || e.status() == 404) metrics_.rejected(e.status());
      send_error(res, e);
      return;
    } catch (const AdmissionError& e) {
      send_error(res, e.status(), error_body(e.what(), e.type()));
      return;
    } catch (const Error& e) {
      // A model-side refusal of the input (e.g. the chat template).
      metrics_.rejected(400);
      send_error(res, 400, error_body(e.what(), "invalid_request_error"));
      return;
    }
    t_log.prompt_tokens = handle->prompt_tokens();
    ResponseMeta meta;
    meta.id = fmt::format("{}-{:016x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                          next_id_.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    meta.created = unix_now();
    meta.model = options_.model;

    if (!r.stream) {
      std::string text;
      Request::Update u;
      while (!u.done) {
        Request::Update next;
        if (!handle->wait(next, std::chrono::milliseconds(1000))) continue;
        text += next.text;
        u = std::move(next);
      }
      t_log.completion_tokens = u.completion_tokens;
      t_log.finish = to_string(u.finish);
      if (u.finish == Finish::kError) {
        send_error(res, 500, error_body("generation failed: " + u.error, "server_error"));
        return;
      }
      res.set_content(full_response(endpoint, meta, text, u.finish, u.prompt_tokens,
                                    u.completion_tokens)
                          .dump(),
                      "application/json");
      return;
    }

    // Streaming: the provider runs on this worker thread after the handler
    // returns, until it calls sink.done() or a write fails.
    struct Stream {
      bool role_sent = false;
      bool finished = false;
    };
    auto st = std::make_shared<Stream>();
    const bool include_usage = r.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [handle, st, meta, endpoint, include_usage](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            handle->cancel();  // the client went away
            t_log.finish = "cancelled";
            return false;
          };
          if (endpoint == Endpoint::kChat && !st->role_sent) {
            st->role_sent = true;
            if (!write(sse(stream_chunk(endpoint, meta, "", Finish::kNone, true)))) return false;
          }
          Request::Update u;
          if (!handle->wait(u, std::chrono::milliseconds(1000)))
            return write(": keep-alive\n\n");
          if (!u.text.empty() && !write(sse(stream_chunk(endpoint, meta, u.text, Finish::kNone))))
            return false;
          if (!u.done) return true;
          t_log.completion_tokens = u.completion_tokens;
          t_log.finish = to_string(u.finish);
          if (u.finish == Finish::kError) {
            t_log.error = u.error;
            if (!write(sse(error_body("generation failed: " + u.error, "server_error"))))
              return false;
          } else {
            if (!write(sse(stream_chunk(endpoint, meta, "", u.finish)))) return false;
            if (include_usage &&
                !write(sse(usage_chunk(endpoint, meta, u.prompt_tokens, u.completion_tokens))))
              return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          st->finished = true;
          sink.done();
          return true;
        },
        [handle](bool) { handle->cancel(); });  // no-op for a finished request
  };

  s.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kChat, req, res);
  });
}

}  // namespace futr::server
