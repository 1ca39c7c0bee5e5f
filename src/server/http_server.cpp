// The OpenAI-compatible HTTP routes over the Scheduler (see http_server.h).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/text.h"

namespace futr::server {

namespace {

// The largest declared body over --max-body that is still read (and dropped)
// before its 413: 16 times the limit, at least 16 MiB.
uint64_t drain_limit(size_t max_body) {
  return std::max<uint64_t>(uint64_t(max_body) * 16, uint64_t(16) << 20);
}

}  // namespace

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// What the one log line of a request says beyond method, path and status;
// filled by the handler and printed by httplib's logger, which runs on the
// same worker thread after the response is written (streams included).
struct LogInfo {
  Clock::time_point start{};
  bool counted = false;    // counted in in_flight_
  int prompt_tokens = -1;  // -1: no generation
  int completion_tokens = 0;
  std::string finish;
  std::string error;  // the error message of a 4xx/5xx
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
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

namespace {

// Set per connection / per request on the worker thread that serves it.
thread_local bool t_refuse = false;       // the pool is full: answer 503 without reading
thread_local bool t_close_after = false;  // close the connection after this response

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr size_t kMaxHeadBytes = 64 << 10;  // request line and headers

// One worker thread per open connection, started when a connection arrives
// and no worker is free, at most `max` of them; a connection beyond that is
// run on the accepting thread with t_refuse set (a 503 written without
// blocking). cpp-httplib's own ThreadPool starts all its threads at once and
// queues connections without a bound.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(size_t max) : max_(max) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lk(mu_);
    if (busy_ + jobs_.size() >= max_) {
      lk.unlock();
      refuse(fn);
      return;
    }
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size()) {
      try {
        threads_.emplace_back([this] { work(); });
        ++idle_;
      } catch (const std::system_error&) {  // the machine's thread limit
        if (threads_.empty() || busy_ == 0) {
          auto job = std::move(jobs_.back());
          jobs_.pop_back();
          lk.unlock();
          refuse(job);
          return;
        }
      }
    }
    lk.unlock();
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard lk(mu_);
      if (shutdown_) return;
      shutdown_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  static void refuse(const std::function<void()>& fn) {
    t_refuse = true;
    fn();
    t_refuse = false;
  }
  void work() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return shutdown_ || !jobs_.empty(); });
      if (jobs_.empty()) {
        --idle_;
        return;
      }
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      --idle_;
      ++busy_;
      lk.unlock();
      fn();
      lk.lock();
      --busy_;
      ++idle_;
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // guarded by mu_ until shutdown
  size_t idle_ = 0, busy_ = 0;
  bool shutdown_ = false;
};

// A connection's socket as a cpp-httplib Stream, with the limits of
// HttpOptions: a deadline for the whole request (start_request()), a
// longest wait per read and per write, and every wait cut short by `stop`.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int sock, const HttpOptions& o, const std::atomic<bool>& stop)
      : sock_(sock), o_(o), stop_(stop) {}

  // Waits for the first byte of a request (keep_alive_timeout_s at most), then
  // starts its deadline. False: none came, or the server stops.
  bool next_request() {
    if (pos_ == end_ && !wait(POLLIN, Clock::now() + to_duration(o_.keep_alive_timeout_s))) return false;
    deadline_ = Clock::now() + to_duration(o_.request_timeout_s);
    reading_request_ = true;
    in_head_ = true;
    head_bytes_ = 0;
    return true;
  }
  // The request line and headers are parsed (the pre-routing handler runs):
  // from here on the body's limits apply.
  void head_read() { in_head_ = false; }
  void request_read() { reading_request_ = false; }  // the handler has the body: no deadline now
  // True when the connection must close: a deadline passed or the head was too large.
  bool timed_out() const { return timed_out_ || head_too_large_; }

  bool is_readable() const override { return pos_ < end_; }
  bool is_writable() const override { return !stop_.load(); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == end_) {
      auto until = Clock::now() + to_duration(o_.read_timeout_s);
      if (reading_request_ && deadline_ < until) until = deadline_;
      if (!wait(POLLIN, until)) return -1;
      const ssize_t n = ::recv(sock_, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      pos_ = 0;
      end_ = size_t(n);
    }
    size_t n = std::min(size, end_ - pos_);
    if (in_head_) {
      // cpp-httplib 0.11 grows a header line and the header list without a
      // bound: the request line and headers get kMaxHeadBytes in all.
      if (head_bytes_ >= kMaxHeadBytes) {
        head_too_large_ = true;
        return -1;
      }
      n = std::min(n, kMaxHeadBytes - head_bytes_);
      head_bytes_ += n;
    }
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!wait(POLLOUT, Clock::now() + to_duration(o_.write_timeout_s))) return -1;
    return ::send(sock_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  static Clock::duration to_duration(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  // poll() in slices of 100 ms until `events`, the deadline or stop.
  bool wait(short events, Clock::time_point until) {
    for (;;) {
      if (stop_.load()) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        return false;
      }
      pollfd p{sock_, events, 0};
      const int r = ::poll(&p, 1, int(std::min<int64_t>(left, 100)));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }
  void address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    const int r = remote ? getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &len)
                         : getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len);
    if (r != 0) return;
    char host[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
      port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
      inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
      port = ntohs(in->sin6_port);
    }
    ip = host;
  }

  int sock_;
  const HttpOptions& o_;
  const std::atomic<bool>& stop_;
  char buf_[16384];
  size_t pos_ = 0, end_ = 0;
  Clock::time_point deadline_{};
  bool reading_request_ = false;
  bool timed_out_ = false;
  bool in_head_ = false;
  size_t head_bytes_ = 0;
  bool head_too_large_ = false;
};

thread_local ConnectionStream* t_stream = nullptr;

}  // namespace

std::string set_speculative_default(HttpOptions& o, const std::string& mode, std::optional<int> draft_max,
                                    const runtime::Engine& engine) {
  FUTR_CHECK(mode == "auto" || mode == "ngram" || mode == "off",
             "--speculative: unknown mode '{}' (auto | ngram | off)", mode);
  FUTR_CHECK(!draft_max || (*draft_max >= 1 && *draft_max <= kMaxSpeculative),
             "--draft-max must be in [1, {}] (got {})", kMaxSpeculative, draft_max.value_or(0));
  const std::string why = engine.rollback_unsupported_reason();
  FUTR_CHECK(mode != "ngram" || why.empty(),
             "--speculative ngram: not with this engine ({}); use --speculative auto or off", why);
  o.speculative = mode == "off" || !why.empty() ? 0 : draft_max.value_or(runtime::default_draft_max(engine));
  o.speculative_greedy_only = mode == "auto";
  o.speculative_unsupported = why;
  return mode == "auto" ? why : std::string();
}

int default_max_connections() {
  int64_t n = 512;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    n = std::min<int64_t>(n, r.rlim_cur / 2);
  if (getrlimit(RLIMIT_NPROC, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
    n = std::min<int64_t>(n, r.rlim_cur / 4);
  return int(std::max<int64_t>(n, 16));
}

// httplib::Server with our connection loop (a private virtual of
// cpp-httplib 0.11, overridable), a deeper accept queue and a stop flag.
class HttpConnections : public httplib::Server {
 public:
  explicit HttpConnections(const HttpOptions& o) : o_(o) {}

  // NOTE: Debian's libcpp-httplib is compiled with CPPHTTPLIB_LISTEN_BACKLOG 5:
  // a burst of more simultaneous connections than that overflows the queue and
  // the kernel drops SYNs, which clients resend only after a second. Linux lets
  // listen() be called again on a listening socket to change its backlog.
  void deepen_backlog(int n) {
    FUTR_CHECK(::listen(svr_sock_, n) == 0, "listen(): cannot set the accept queue to {}", n);
  }
  // Every connection's waits end (within 0.1 s) and the listener closes,
  // also when run() has not started yet: httplib's stop() does nothing until
  // the accept loop runs (a stop right after bind() then left run() waiting
  // forever), while the loop ends as soon as it finds the socket closed.
  void stop_all() {
    stopping_.store(true);
    const socket_t s = svr_sock_.exchange(INVALID_SOCKET);
    if (s != INVALID_SOCKET) {
      ::shutdown(s, SHUT_RDWR);
      ::close(s);
    }
  }
  bool stopping() const { return stopping_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool ret = false;
    if (t_refuse || sock >= FD_SETSIZE) {
      static const std::string body =
          error_body("the server has too many open connections; retry later", "server_busy").dump();
      const std::string msg = fmt::format(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
          "Retry-After: 1\r\nConnection: close\r\n\r\n{}",
          body.size(), body);
      [[maybe_unused]] ssize_t n = ::send(sock, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      // What the client has sent already is read (without waiting), so the
      // close is a FIN after the 503, not a reset that could discard it.
      ::shutdown(sock, SHUT_WR);
      char sink[4096];
      for (int i = 0; i < 16 && ::recv(sock, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {}
    } else {
      ConnectionStream strm(sock, o_, stopping_);
      t_stream = &strm;
      for (size_t n = 0; n < keep_alive_max_count_ && !stopping_.load(); ++n) {
        if (!strm.next_request()) break;
        t_close_after = false;
        bool closed = false;
        const bool last = n + 1 == keep_alive_max_count_;
        ret = process_request(strm, last, closed, nullptr);
        if (!ret || closed || t_close_after || strm.timed_out()) break;
      }
      t_stream = nullptr;
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  const HttpOptions& o_;
  std::atomic<bool> stopping_{false};
};

HttpServer::HttpServer(Scheduler& scheduler, const Tokenizer& tok, const ChatTemplate* chat, Metrics& metrics,
                       HttpOptions options)
    : scheduler_(scheduler),
      tok_(tok),
      metrics_(metrics),
      options_(std::move(options)),
      started_(unix_now()) {
  FUTR_CHECK(!options_.model.empty(), "the served model needs a name");
  FUTR_CHECK(options_.max_connections >= 0 && options_.max_connections <= kMaxHttpConnections,
             "--max-connections must be in [0, {}] (0: by the machine; got {})", kMaxHttpConnections,
             options_.max_connections);
  FUTR_CHECK(options_.max_body_bytes >= 1 && options_.max_body_bytes <= kMaxBodyBytes,
             "--max-body must be in [1, {}] bytes (got {})", kMaxBodyBytes, options_.max_body_bytes);
  for (const auto& [name, v] : {std::pair{"request", options_.request_timeout_s},
                                {"read", options_.read_timeout_s},
                                {"write", options_.write_timeout_s},
                                {"keep-alive", options_.keep_alive_timeout_s},
                                {"drain", options_.drain_timeout_s}})
    FUTR_CHECK(v > 0 && v <= 3600, "the {} timeout must be in (0, 3600] seconds (got {})", name, v);
  http_ = std::make_unique<HttpConnections>(options_);
  api_.tok = &tok_;
  api_.chat = chat;
  api_.model = options_.model;
  api_.max_request_positions = scheduler_.max_request_positions();
  FUTR_CHECK(options_.speculative >= 0 && options_.speculative <= kMaxSpeculative,
             "--draft-max must be in [0, {}] (got {})", kMaxSpeculative, options_.speculative);
  api_.speculative = options_.speculative;
  api_.speculative_greedy_only = options_.speculative_greedy_only;
  api_.speculative_unsupported = options_.speculative_unsupported;
  max_connections_ = options_.max_connections > 0 ? options_.max_connections : default_max_connections();
  const size_t pool = size_t(max_connections_);
  http_->new_task_queue = [pool] { return new ConnectionPool(pool); };
  http_->set_payload_max_length(
      size_t(drain_limit(options_.max_body_bytes)));  // read_body keeps at most --max-body
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
  http_->deepen_backlog(1024);
  return port;
}

void HttpServer::run() { http_->listen_after_bind(); }

void HttpServer::stop() {
  if (http_) http_->stop_all();
}

void HttpServer::drain() {
  fmt::print(stderr, "futr serve: draining: {} running, {} waiting; new requests get 503\n",
             scheduler_.running(), scheduler_.waiting());
  const auto t0 = Clock::now();
  scheduler_.begin_drain();
  const bool idle = scheduler_.wait_idle_for(std::chrono::duration<double>(options_.drain_timeout_s));
  // The answers of the last requests are still being written.
  while (in_flight_.load() > 0 && seconds_since(t0) < options_.drain_timeout_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!idle || in_flight_.load() > 0)
    fmt::print(stderr, "futr serve: drain timeout ({} s): {} requests cut off; stopping\n",
               options_.drain_timeout_s, in_flight_.load());
  else fmt::print(stderr, "futr serve: drained; stopping\n");
  stop();
}

void HttpServer::routes() {
  auto& s = *http_;

  // Timing, accounting and authentication before any route.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (t_stream) t_stream->head_read();
    t_log = LogInfo{};
    t_log.start = Clock::now();
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (api) {
      in_flight_.fetch_add(1);
      t_log.counted = true;
    }
    // A request that carries a body is answered before the body is read only
    // with the connection closed (the unread body would be taken for the
    // next request).
    const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH" ||
                          req.method == "DELETE" || req.method == "PRI";
    auto refuse = [&](int status, const std::string& msg, const char* type = "invalid_request_error") {
      if (has_body) {
        t_close_after = true;
        res.set_header("Connection", "close");
      }
      send_error(res, status, error_body(msg, type));
      return httplib::Server::HandlerResponse::Handled;
    };
    const bool body_route =
        req.method == "POST" && (req.path == "/v1/completions" || req.path == "/v1/chat/completions");
    if (has_body && !body_route)
      return refuse(404, fmt::format("no route {} {}", req.method, printable(req.path, 100)),
                    "not_found_error");
    if (api && !options_.api_key.empty() &&
        req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      if (has_body) {
        t_close_after = true;
        res.set_header("Connection", "close");
      }
      send_error(res, 401,
                 error_body("Incorrect API key provided. Pass it as 'Authorization: Bearer KEY'.",
                            "invalid_request_error", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (body_route) {
      // What cpp-httplib decompresses (its check for "br" is a substring
      // match; anything else would reach the JSON parser as bytes).
      const std::string enc = req.get_header_value("Content-Encoding");
      if (!enc.empty() && enc != "identity" && enc != "gzip" && enc != "deflate" && enc != "br")
        return refuse(415, fmt::format("Content-Encoding '{}' is not supported (gzip, deflate, br or none)",
                                       printable(enc, 40)));
      const bool chunked = req.get_header_value("Transfer-Encoding") == "chunked";
      if (!chunked && !req.has_header("Content-Length"))
        return refuse(411, "the request body needs a Content-Length or chunked Transfer-Encoding");
      if (!chunked) {
        const std::string& cl = req.get_header_value("Content-Length");
        uint64_t n = 0;
        bool digits = !cl.empty() && cl.size() <= 19;
        for (char c : cl) digits = digits && c >= '0' && c <= '9';
        if (digits) n = std::stoull(cl);
        if (!digits) return refuse(400, "malformed Content-Length");
        // A body a little over the limit is read and dropped before the 413
        // (read_body), so that the client, still sending, gets the answer
        // instead of a reset connection; a far larger one is refused at once.
        if (n > options_.max_body_bytes && n > drain_limit(options_.max_body_bytes))
          return refuse(413, fmt::format("the request body is too large ({} bytes; --max-body is {})", n,
                                         options_.max_body_bytes));
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double dt = t_log.start == Clock::time_point{}
                          ? 0.0
                          : std::chrono::duration<double>(Clock::now() - t_log.start).count();
    std::string extra;
    if (t_log.prompt_tokens >= 0)
      extra = fmt::format(" prompt={} completion={} finish={}", t_log.prompt_tokens, t_log.completion_tokens,
                          t_log.finish);
    if (!t_log.error.empty()) extra += fmt::format(" error=\"{}\"", t_log.error);
    std::string addr = req.remote_addr;
    int port = req.remote_port;
    if (addr.empty() && t_stream) t_stream->get_remote_ip_and_port(addr, port);  // a request cut short
    fmt::print(stderr, "futr serve: {}:{} {} {} {} {:.3f}s{}\n", addr, port, printable(req.method, 16),
               printable(req.path, 200), res.status, dt, extra);
    if (t_log.counted) in_flight_.fetch_sub(1);
    t_log = LogInfo{};
  });

  // OpenAI error bodies for what httplib answers itself (404, 413, 400 ...).
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                  httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = fmt::format("HTTP error {}", res.status);
    if (res.status == 400) msg = "malformed HTTP request";
    if (res.status == 404) msg = fmt::format("no route {} {}", req.method, printable(req.path, 100));
    if (res.status == 413)
      msg = fmt::format("the request body is too large (--max-body is {} bytes)", options_.max_body_bytes);
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
    } catch (...) {}
    send_error(res, 500, error_body(msg, "server_error"));
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler_.draining()) {
      res.status = 503;
      res.set_content(json{{"status", "draining"}}.dump(), "application/json");
      return;
    }
    res.set_content(
        json{{"status", "ok"}, {"running", scheduler_.running()}, {"waiting", scheduler_.waiting()}}.dump(),
        "application/json");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_response(options_.model, started_).dump(), "application/json");
  });

  // The body through cpp-httplib's content reader: decompressed, de-chunked,
  // and never more than --max-body bytes of it kept.
  // An uncompressed body over the limit whose declared length is at most
  // drain_limit() is read to its end and dropped (nothing kept), then answered
  // 413 (the client sees the answer, not a reset); any other stops at the limit.
  auto read_body = [this](const httplib::Request& req, const httplib::ContentReader& reader,
                          httplib::Response& res, std::string& body) {
    const std::string enc = req.get_header_value("Content-Encoding");
    const bool drain = (enc.empty() || enc == "identity") && req.has_header("Content-Length");
    bool too_big = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (too_big) return drain;  // dropped
      if (n > options_.max_body_bytes - body.size()) {
        too_big = true;
        body.clear();
        return drain;
      }
      body.append(data, n);
      return true;
    });
    if (t_stream) t_stream->request_read();
    if (ok && !too_big) return true;
    t_close_after = true;
    res.set_header("Connection", "close");
    if (too_big)
      send_error(res, 413,
                 error_body(fmt::format("the request body is larger than --max-body ({} bytes) after "
                                        "decompression",
                                        options_.max_body_bytes),
                            "invalid_request_error"));
    else
      send_error(res, res.status == 415 ? 415 : 400,
                 error_body("the request body could not be read (malformed encoding, cut short, or "
                            "not sent within the request timeout)",
                            "invalid_request_error"));
    return false;
  };

  auto generate = [this](Endpoint endpoint, const std::string& body, httplib::Response& res) {
    ApiRequest r;
    std::vector<std::shared_ptr<Request>> handles;  // one per choice
    try {
      if (scheduler_.draining()) {
        metrics_.rejected(503);
        throw ApiError(503, "server_shutting_down", "the server is shutting down; no new requests");
      }
      r = parse_request(endpoint, body, api_);
      handles = scheduler_.submit(choice_params(r));
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
    t_log.prompt_tokens = handles.front()->prompt_tokens();
    ResponseMeta meta;
    meta.id = fmt::format("{}-{:016x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                          next_id_.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    meta.created = unix_now();
    meta.model = options_.model;
    auto cancel_all = [handles] {
      for (const auto& h : handles) h->cancel();  // no-op for a finished request
    };

    if (!r.stream) {
      std::vector<ChoiceOutput> choices(handles.size());
      std::string error;
      for (size_t i = 0; i < handles.size(); ++i) {
        Request::Update u;
        ChoiceOutput& c = choices[i];
        while (!u.done) {
          Request::Update next;
          if (http_->stopping()) cancel_all();  // drain timeout or a second signal
          if (!handles[i]->wait(next, std::chrono::milliseconds(1000))) continue;
          c.text += next.text;
          c.logprobs.insert(c.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
          if (!next.prompt_logprobs.empty()) c.prompt_logprobs = std::move(next.prompt_logprobs);
          u = std::move(next);
        }
        c.finish = u.finish;
        c.completion_tokens = u.completion_tokens;
        t_log.completion_tokens += u.completion_tokens;
        t_log.finish = to_string(u.finish);
        if (u.finish == Finish::kError && error.empty()) {
          error = u.error;
          cancel_all();  // the answer is an error: the other choices stop
        }
      }
      if (!error.empty()) {
        t_log.finish = to_string(Finish::kError);
        send_error(res, 500, error_body("generation failed: " + error, "server_error"));
        return;
      }
      res.set_content(full_response(r, &tok_, meta, choices).dump(), "application/json");
      return;
    }

    // Streaming: the provider runs on this worker thread after the handler
    // returns, until it calls sink.done() or a write fails. Each call waits
    // (at most a second) for any choice to change, then writes what every
    // choice has: a chunk per choice and update, in choice order.
    struct Choice {
      bool started = false;  // its role chunk (chat) or echo chunk (completions) is written
      bool done = false;
      int completion_tokens = 0;
      LogprobsWriter logprobs;
    };
    struct Stream {
      std::vector<Choice> choices;
      bool failed = false;
    };
    auto st = std::make_shared<Stream>();
    for (size_t i = 0; i < handles.size(); ++i)
      st->choices.push_back(
          {false, false, 0, LogprobsWriter(tok_, endpoint == Endpoint::kChat, std::max(r.logprobs, 0))});
    auto req = std::make_shared<const ApiRequest>(std::move(r));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [handles, st, meta, req, cancel_all](size_t, httplib::DataSink& sink) {
          const Endpoint endpoint = req->endpoint;
          const bool lp = req->logprobs >= 0;
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            cancel_all();  // the client went away
            t_log.finish = "cancelled";
            return false;
          };
          if (endpoint == Endpoint::kChat)
            for (size_t i = 0; i < handles.size(); ++i)
              if (!st->choices[i].started) {
                st->choices[i].started = true;
                if (!write(sse(stream_chunk(endpoint, meta, "", Finish::kNone, true, int(i))))) return false;
              }
          const auto& signal = handles.front()->signal();
          const uint64_t seen = signal->version();
          bool any = false;
          for (size_t i = 0; i < handles.size(); ++i) {
            Choice& c = st->choices[i];
            Request::Update u;
            if (c.done || !handles[i]->wait(u, std::chrono::milliseconds(0))) continue;
            any = true;
            if (u.finish == Finish::kError) {
              c.done = true;
              if (!st->failed) {
                st->failed = true;
                t_log.error = u.error;
                t_log.finish = to_string(u.finish);
                cancel_all();
                if (!write(sse(error_body("generation failed: " + u.error, "server_error")))) return false;
              }
              continue;
            }
            if (st->failed) continue;
            // Completions with echo: the prompt first (the scheduler sends its
            // logprobs before any token of the choice).
            if (endpoint == Endpoint::kCompletions && req->echo && !c.started) {
              c.started = true;
              json plp = lp ? c.logprobs.add(u.prompt_logprobs) : json(nullptr);
              if (!write(sse(stream_chunk(endpoint, meta, req->echo_text, Finish::kNone, false, int(i),
                                          std::move(plp)))))
                return false;
            }
            if (!u.text.empty() || !u.logprobs.empty()) {
              json tlp = lp ? c.logprobs.add(u.logprobs) : json(nullptr);
              if (!write(sse(
                      stream_chunk(endpoint, meta, u.text, Finish::kNone, false, int(i), std::move(tlp)))))
                return false;
            }
            if (!u.done) continue;
            c.done = true;
            c.completion_tokens = u.completion_tokens;
            t_log.finish = to_string(u.finish);
            if (!write(sse(stream_chunk(endpoint, meta, "", u.finish, false, int(i))))) return false;
          }
          const bool all_done =
              std::all_of(st->choices.begin(), st->choices.end(), [](const Choice& c) { return c.done; });
          if (!all_done) {
            if (any || signal->wait_change(seen, std::chrono::milliseconds(1000))) return true;
            return write(": keep-alive\n\n");
          }
          int completion_tokens = 0;
          for (const Choice& c : st->choices) completion_tokens += c.completion_tokens;
          t_log.completion_tokens = completion_tokens;
          if (!st->failed && req->include_usage &&
              !write(sse(usage_chunk(endpoint, meta, handles.front()->prompt_tokens(), completion_tokens))))
            return false;
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        [cancel_all](bool) { cancel_all(); });  // no-op for finished requests
  };

  for (const auto& [path, endpoint] : {std::pair{"/v1/completions", Endpoint::kCompletions},
                                       std::pair{"/v1/chat/completions", Endpoint::kChat}}) {
    const Endpoint e = endpoint;
    s.Post(path, [generate, read_body, e](const httplib::Request& req, httplib::Response& res,
                                          const httplib::ContentReader& reader) {
      std::string body;
      if (read_body(req, reader, res, body)) generate(e, body, res);
    });
  }
}

}  // namespace futr::server
