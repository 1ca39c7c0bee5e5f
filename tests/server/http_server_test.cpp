// The HTTP server (src/server/http_server.h) on the loopback over the fake
// engine: routes, OpenAI bodies, server-sent events, errors, the API key,
// a client leaving mid-stream, drain; hostile clients: compressed and
// chunked bodies beyond --max-body, slow clients (health still answers,
// stop and drain still end), the connection cap.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <zlib.h>

#include <atomic>
#include <future>
#include <thread>

#include "server/fake_engine.h"
#include "server/server_test_util.h"

namespace futr::server {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A raw loopback connection (-1 if it fails).
int connect_raw(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes (or `timeout_s` passes).
std::string read_all(int fd, double timeout_s = 10) {
  timeval tv{};
  tv.tv_sec = long(timeout_s);
  tv.tv_usec = long((timeout_s - double(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

std::string gzip(const std::string& s) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, uLong(s.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = uInt(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

class HttpTest : public ::testing::Test {
 protected:
  void start(test::FakeEngine::Options eo, HttpOptions ho = {}, SchedulerOptions so = {}) {
    tok_ = test::default_tokenizer();
    ASSERT_NE(tok_, nullptr);
    eo.vocab = tok_->vocab_size();
    eo.words = test::word_tokens(*tok_);
    eo.eos = tok_->eos();
    engine_ = std::make_unique<test::FakeEngine>(eo);
    scheduler_ = std::make_unique<Scheduler>(*engine_, *tok_, so, &metrics_);
    chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_tokenizer(*tok_));
    ho.port = 0;
    ho.model = "fake";
    server_ = std::make_unique<HttpServer>(*scheduler_, *tok_, chat_.get(), metrics_, ho);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(30, 0);
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  void SetUp() override {
    if (!test::default_tokenizer()) GTEST_SKIP() << FUTR_DEFAULT_MODEL << " is absent";
  }
  httplib::Result post(const std::string& path, const json& body, httplib::Headers h = {}) {
    return client_->Post(path.c_str(), h, body.dump(), "application/json");
  }
  // The SSE events ("data: ..." payloads) of a streaming response body.
  static std::vector<std::string> events(const std::string& body) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      const size_t end = body.find("\n\n", at);
      out.push_back(body.substr(at + 6, end - at - 6));
      at = end;
    }
    return out;
  }
  int metric(const std::string& name) {
    auto r = client_->Get("/metrics");
    const size_t at = r->body.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stoi(r->body.substr(at + name.size() + 2));
  }

  const Tokenizer* tok_ = nullptr;
  Metrics metrics_;
  std::unique_ptr<test::FakeEngine> engine_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
};

// A stop that comes before run() starts (futr serve's SIGTERM right after the
// bind, a test that skips once its server exists) still ends run(): it
// returns at once instead of accepting forever.
TEST_F(HttpTest, StopBeforeRunEndsRun) {
  tok_ = test::default_tokenizer();
  test::FakeEngine::Options eo;
  eo.vocab = tok_->vocab_size();
  eo.words = test::word_tokens(*tok_);
  engine_ = std::make_unique<test::FakeEngine>(eo);
  scheduler_ = std::make_unique<Scheduler>(*engine_, *tok_, SchedulerOptions{}, &metrics_);
  HttpOptions ho;
  ho.port = 0;
  ho.model = "fake";
  server_ = std::make_unique<HttpServer>(*scheduler_, *tok_, nullptr, metrics_, ho);
  server_->bind();
  server_->stop();
  std::promise<void> done;
  std::future<void> ended = done.get_future();
  thread_ = std::thread([&] {
    server_->run();
    done.set_value();
  });
  EXPECT_EQ(ended.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "run() did not return";
}

TEST_F(HttpTest, HealthModelsMetrics) {
  start({});
  auto h = client_->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = client_->Get("/v1/models");
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "fake");
  auto x = client_->Get("/metrics");
  for (const char* name : {"futr_requests_running", "futr_requests_waiting", "futr_prompt_tokens_total",
                           "futr_generation_tokens_total", "futr_time_to_first_token_seconds_bucket",
                           "futr_time_per_output_token_seconds_bucket", "futr_kv_positions_used"})
    EXPECT_NE(x->body.find(name), std::string::npos) << name;
  auto n = client_->Get("/nope");
  EXPECT_EQ(n->status, 404);
  EXPECT_TRUE(json::parse(n->body)["error"]["message"].is_string());
}

TEST_F(HttpTest, CompletionStreamedAndNotGiveTheSameText) {
  start({});
  const json body = {
      {"model", "fake"}, {"prompt", "The quick brown"}, {"max_tokens", 12}, {"temperature", 0}, {"seed", 5}};
  auto r = post("/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_FALSE(text.empty());
  json sb = body;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto s = post("/v1/completions", sb);
  ASSERT_EQ(s->status, 200);
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream");
  const auto ev = events(s->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string streamed;
  for (size_t i = 0; i + 2 < ev.size(); ++i)
    streamed += json::parse(ev[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(json::parse(ev[ev.size() - 3])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["usage"]["completion_tokens"], 12);
}

// Penalties and min_p run end to end (the scheduler draws from logits rows);
// out of range they are an OpenAI error naming the field and the range.
TEST_F(HttpTest, PenaltiesAndMinPRunOrAreRefused) {
  start({});
  json body = {{"model", "fake"},
               {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
               {"max_tokens", 12},
               {"temperature", 0},
               {"seed", 5},
               {"presence_penalty", 1.5},
               {"frequency_penalty", 0.5},
               {"repetition_penalty", 1.2},
               {"min_p", 0.05}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_FALSE(j["choices"][0]["message"]["content"].get<std::string>().empty());
  body["presence_penalty"] = 2.5;
  auto bad = post("/v1/chat/completions", body);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  const json e = json::parse(bad->body)["error"];
  EXPECT_EQ(e["param"], "presence_penalty");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("[-2, 2]"), std::string::npos) << e;
}

// n choices with logprobs and echo: choice i is what a single request with
// seed + i answers (text and logprobs), the streamed chunks (tagged with
// their index, each carrying its tokens' logprobs) add up to the whole
// answer, usage counts the prompt once and the completions summed.
TEST_F(HttpTest, ChoicesWithLogprobsStreamedAndNot) {
  start({});
  const json body = {{"model", "fake"}, {"prompt", "The quick brown"},
                     {"max_tokens", 8}, {"temperature", 0},
                     {"seed", 5},       {"n", 3},
                     {"logprobs", 2},   {"echo", true}};
  auto r = post("/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  int completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    const json& c = j["choices"][size_t(i)];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["text"].get<std::string>().rfind("The quick brown", 0), 0u) << c["text"];
    json one = body;
    one["n"] = 1;
    one["seed"] = 5 + i;
    auto r1 = post("/v1/completions", one);
    ASSERT_EQ(r1->status, 200);
    const json j1 = json::parse(r1->body);
    EXPECT_EQ(c["text"], j1["choices"][0]["text"]) << "choice " << i;
    EXPECT_EQ(c["logprobs"], j1["choices"][0]["logprobs"]) << "choice " << i;
    EXPECT_EQ(c["logprobs"]["tokens"].size(),
              size_t(j1["usage"]["prompt_tokens"].get<int>() + j1["usage"]["completion_tokens"].get<int>()));
    EXPECT_TRUE(c["logprobs"]["token_logprobs"][0].is_null());
    completion_tokens += j1["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_NE(j["choices"][0]["text"], j["choices"][1]["text"]);  // the fake engine's draws follow the seed
  EXPECT_EQ(j["usage"]["completion_tokens"], completion_tokens);
  EXPECT_EQ(j["usage"]["prompt_tokens"],
            json::parse(
                post("/v1/completions", {{"model", "fake"}, {"prompt", "The quick brown"}, {"max_tokens", 1}})
                    ->body)["usage"]["prompt_tokens"]);

  json sb = body;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto s = post("/v1/completions", sb);
  ASSERT_EQ(s->status, 200);
  const auto ev = events(s->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::vector<std::string> text(3);
  std::vector<json> lp(3, json{{"tokens", json::array()},
                               {"token_logprobs", json::array()},
                               {"top_logprobs", json::array()},
                               {"text_offset", json::array()}});
  std::vector<int> finishes(3, 0);
  for (size_t e = 0; e + 2 < ev.size(); ++e) {
    const json chunk = json::parse(ev[e]);
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const json& c = chunk["choices"][0];
    const size_t i = c["index"].get<size_t>();
    ASSERT_LT(i, 3u);
    text[i] += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes[i];
    if (c["logprobs"].is_null()) continue;
    for (const char* f : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const auto& x : c["logprobs"][f]) lp[i][f].push_back(x);
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], j["choices"][i]["text"]) << "choice " << i;
    EXPECT_EQ(lp[i], j["choices"][i]["logprobs"]) << "choice " << i;
    EXPECT_EQ(finishes[i], 1) << "choice " << i;
  }
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["usage"]["completion_tokens"], completion_tokens);
}

// Chat logprobs: content entries, streamed per chunk; each choice's stream
// starts with its role.
TEST_F(HttpTest, ChatLogprobsStreamedAndNot) {
  start({});
  const json body = {{"model", "fake"},  {"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                     {"max_tokens", 10}, {"temperature", 0},
                     {"seed", 9},        {"n", 2},
                     {"logprobs", true}, {"top_logprobs", 3}};
  auto r = post("/v1/chat/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (const auto& c : j["choices"]) {
    const json& content = c["logprobs"]["content"];
    ASSERT_EQ(content.size(), 10u);
    std::string joined;
    for (const auto& e : content) {
      joined += e["token"].get<std::string>();
      EXPECT_EQ(e["top_logprobs"].size(), 3u);
      EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);  // greedy: the drawn token is the most likely
      EXPECT_LT(e["logprob"].get<double>(), 0.0);
    }
    EXPECT_EQ(joined, c["message"]["content"]);
  }
  json sb = body;
  sb["stream"] = true;
  auto s = post("/v1/chat/completions", sb);
  ASSERT_EQ(s->status, 200);
  const auto ev = events(s->body);
  std::vector<json> content(2, json::array());
  std::vector<int> roles(2, 0);
  for (size_t e = 0; e + 1 < ev.size(); ++e) {
    const json c = json::parse(ev[e])["choices"][0];
    const size_t i = c["index"].get<size_t>();
    if (c["delta"].contains("role")) ++roles[i];
    if (!c["logprobs"].is_null())
      for (const auto& x : c["logprobs"]["content"]) content[i].push_back(x);
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1);
    EXPECT_EQ(content[i], j["choices"][i]["logprobs"]["content"]) << "choice " << i;
  }
}

// lm-evaluation-harness's loglikelihood request: echo, logprobs, max_tokens
// 0, the prompt as token ids: the prompt back with one entry per token.
TEST_F(HttpTest, EchoWithMaxTokensZeroScoresThePrompt) {
  start({});
  const auto ids = tok_->encode("The quick brown fox jumps", false, false);
  const json body = {{"model", "fake"}, {"prompt", ids}, {"max_tokens", 0},
                     {"echo", true},    {"logprobs", 1}, {"temperature", 0}};
  auto r = post("/v1/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  const json c = json::parse(r->body)["choices"][0];
  EXPECT_EQ(c["text"], "The quick brown fox jumps");
  EXPECT_EQ(c["finish_reason"], "length");
  ASSERT_EQ(c["logprobs"]["tokens"].size(), ids.size());
  EXPECT_TRUE(c["logprobs"]["token_logprobs"][0].is_null());
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_LT(c["logprobs"]["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(c["logprobs"]["top_logprobs"][i].size() >= 1, true);
  }
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 0);
  // Without logprobs: the text only.
  json plain = body;
  plain.erase("logprobs");
  auto p = post("/v1/completions", plain);
  ASSERT_EQ(p->status, 200) << p->body;
  EXPECT_EQ(json::parse(p->body)["choices"][0]["text"], "The quick brown fox jumps");
  EXPECT_TRUE(json::parse(p->body)["choices"][0]["logprobs"].is_null());
  // Streamed: the prompt's chunk, the finish, [DONE].
  json sb = body;
  sb["stream"] = true;
  const auto ev = events(post("/v1/completions", sb)->body);
  ASSERT_EQ(ev.size(), 3u);
  const json first = json::parse(ev[0])["choices"][0];
  EXPECT_EQ(first["text"], "The quick brown fox jumps");
  EXPECT_EQ(first["logprobs"]["tokens"].size(), ids.size());
  EXPECT_EQ(json::parse(ev[1])["choices"][0]["finish_reason"], "length");
}

TEST_F(HttpTest, ChatStreamStartsWithTheRole) {
  start({});
  const json body = {{"model", "fake"},
                     {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"max_tokens", 5},
                     {"stream", true}};
  auto s = post("/v1/chat/completions", body);
  ASSERT_EQ(s->status, 200);
  const auto ev = events(s->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(json::parse(ev[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(ev[0])["object"], "chat.completion.chunk");
  EXPECT_EQ(ev.back(), "[DONE]");
}

// 16 streams at once over HTTP: each gets exactly the text it gets alone,
// and, on an engine whose step costs about the same for 1 or 16 rows (a GPU,
// or any batched engine: here 3 ms per step), together take a fraction of the
// time one after another takes.
TEST_F(HttpTest, ConcurrentStreamsEqualAloneAndBatch) {
  auto eo = test::FakeEngine::Options{};
  eo.max_seqs = 16;
  eo.step_time = std::chrono::microseconds(3000);
  start(eo);
  auto run = [&](int i) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    const json body = {{"model", "fake"},  {"prompt", "story " + std::to_string(i)},
                       {"max_tokens", 20}, {"temperature", 0},
                       {"seed", 3},        {"stream", true}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    std::string text;
    if (!r) return text;
    for (const auto& e : events(r->body))
      if (e != "[DONE]") text += json::parse(e)["choices"][0]["text"].get<std::string>();
    return text;
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> alone;
  for (int i = 0; i < 16; ++i) alone.push_back(run(i));
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<std::string> together(16);
  std::vector<std::thread> ts;
  for (int i = 0; i < 16; ++i) ts.emplace_back([&, i] { together[size_t(i)] = run(i); });
  for (auto& t : ts) t.join();
  const auto t2 = std::chrono::steady_clock::now();
  for (int i = 0; i < 16; ++i) {
    EXPECT_FALSE(alone[size_t(i)].empty());
    EXPECT_EQ(together[size_t(i)], alone[size_t(i)]) << "request " << i;
  }
  EXPECT_GT(engine_->max_seqs_in_step(), 8);
  // >= 16 x 21 steps alone vs ~21 + a few together: a wide margin.
  EXPECT_LT(std::chrono::duration<double>(t2 - t1).count(),
            0.5 * std::chrono::duration<double>(t1 - t0).count());
}

TEST_F(HttpTest, BadRequestsAreOpenAiErrorsAndDisturbNothing) {
  HttpOptions ho;
  ho.max_body_bytes = 4096;
  auto eo = test::FakeEngine::Options{};
  eo.ctx = 64;
  start(eo, ho);
  // A long request runs while the bad ones come in; it must be unaffected.
  const json good = {{"model", "fake"}, {"prompt", "a"}, {"max_tokens", 40}, {"temperature", 0}, {"seed", 1}};
  const std::string alone = json::parse(post("/v1/completions", good)->body)["choices"][0]["text"];
  std::string together;
  std::thread t([&] { together = json::parse(post("/v1/completions", good)->body)["choices"][0]["text"]; });
  const std::vector<std::pair<std::string, int>> bad = {
      {"{oops", 400},
      {R"({"model": "fake", "prompt": "x", "max_tokens": -3})", 400},
      {R"({"model": "fake", "prompt": "x", "temperature": -1})", 400},
      {R"({"model": "fake", "prompt": "x", "unknown_field": 1})", 400},
      {R"({"model": "fake", "prompt": ")" + std::string(300, 'y') + R"("})", 400},
      {R"({"model": "fake", "prompt": ")" + std::string(5000, 'y') + R"("})", 413},
      {R"({"model": "gpt-4", "prompt": "x"})", 404},
  };
  for (const auto& [body, status] : bad) {
    auto r = client_->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.substr(0, 80);
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << r->body;
    EXPECT_TRUE(e["error"]["message"].is_string()) << r->body;
    EXPECT_TRUE(e["error"]["type"].is_string()) << r->body;
  }
  t.join();
  EXPECT_EQ(together, alone);
}

TEST_F(HttpTest, ApiKeyIsRequiredOnV1Routes) {
  HttpOptions ho;
  ho.api_key = "sekret";
  start({}, ho);
  const json body = {{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 2}};
  EXPECT_EQ(post("/v1/completions", body)->status, 401);
  EXPECT_EQ(post("/v1/completions", body, {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(post("/v1/completions", body, {{"Authorization", "Bearer sekret"}})->status, 200);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(HttpTest, QueueFullIs429) {
  auto eo = test::FakeEngine::Options{};
  eo.max_seqs = 1;
  eo.step_time = std::chrono::microseconds(2000);
  start(eo, {}, {.max_queue = 1});
  const json body = {{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 50}};
  int sa = 0, sb = 0;
  std::thread a([&] {
    sa = httplib::Client("127.0.0.1", port_).Post("/v1/completions", body.dump(), "application/json")->status;
  });
  while (scheduler_->running() == 0) std::this_thread::sleep_for(milliseconds(1));
  std::thread b([&] {
    sb = httplib::Client("127.0.0.1", port_).Post("/v1/completions", body.dump(), "application/json")->status;
  });
  while (scheduler_->waiting() == 0) std::this_thread::sleep_for(milliseconds(1));
  auto r = post("/v1/completions", body);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "rate_limit_exceeded");
  a.join();
  b.join();
  EXPECT_EQ(sa, 200);
  EXPECT_EQ(sb, 200);  // the one that waited was served
}

// A raw client sends a streaming request, reads the first event and hangs
// up: the server cancels the request and frees its sequence.
TEST_F(HttpTest, ClientLeavingMidStreamFreesItsSlot) {
  auto eo = test::FakeEngine::Options{};
  eo.step_time = std::chrono::microseconds(5000);
  start(eo);
  const std::string body =
      json{{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 250}, {"stream", true}}.dump();
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, size_t(n));
  }
  EXPECT_EQ(metric("futr_requests_running"), 1);
  close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  while (scheduler_->running() > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(scheduler_->running(), 0);
  EXPECT_EQ(metric("futr_requests_running"), 0);
  EXPECT_NE(client_->Get("/metrics")->body.find("futr_requests_total{finish=\"cancelled\"} 1"),
            std::string::npos);
}

TEST_F(HttpTest, DrainLetsInFlightFinishAndRefusesNew) {
  auto eo = test::FakeEngine::Options{};
  eo.step_time = std::chrono::microseconds(3000);
  start(eo);
  int status = 0;
  std::string inflight;
  std::thread t([&] {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Post("/v1/completions",
                    json{{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 60}, {"stream", true}}.dump(),
                    "application/json");
    if (r) {
      status = r->status;
      inflight = r->body;
    }
  });
  while (scheduler_->running() == 0) std::this_thread::sleep_for(milliseconds(1));
  std::thread d([&] { server_->drain(); });
  while (!scheduler_->draining()) std::this_thread::sleep_for(milliseconds(1));
  httplib::Client c2("127.0.0.1", port_);
  auto refused =
      c2.Post("/v1/completions", json{{"model", "fake"}, {"prompt", "x"}}.dump(), "application/json");
  if (refused) {  // (the listener may already be closed when the in-flight one is done)
    EXPECT_EQ(refused->status, 503);
    EXPECT_EQ(c2.Get("/health")->status, 503);
  }
  t.join();
  d.join();
  EXPECT_EQ(status, 200);
  const auto ev = events(inflight);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "length");
}

// --max-body counts the body after decompression and de-chunking: a small
// gzip body that inflates past it is a 413 (cpp-httplib 0.11 checks only the
// Content-Length); an encoding cpp-httplib cannot decode is a 415; bodies to
// routes that take none are refused before they are read.
TEST_F(HttpTest, CompressedAndChunkedBodiesCountAgainstMaxBody) {
  HttpOptions ho;
  ho.max_body_bytes = 64 << 10;
  start({}, ho);
  const json small = {{"model", "fake"}, {"prompt", "The quick"}, {"max_tokens", 3}};
  auto raw_post = [&](const std::string& headers, const std::string& body) {
    const int fd = connect_raw(port_);
    EXPECT_GE(fd, 0);
    const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                            headers + "\r\n" + body;
    EXPECT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
    const std::string got = read_all(fd);
    close(fd);
    return got;
  };
  auto status_of = [](const std::string& response) {
    return response.size() > 12 ? std::atoi(response.c_str() + 9) : 0;
  };
  // A gzip body within the limit works.
  const std::string zs = gzip(small.dump());
  EXPECT_EQ(status_of(raw_post("Content-Encoding: gzip\r\nConnection: close\r\nContent-Length: " +
                                   std::to_string(zs.size()) + "\r\n",
                               zs)),
            200);
  // 64 MB of JSON whitespace in ~64 KB of gzip: refused at 64 KB.
  const std::string bomb = gzip("{\"model\": \"fake\", \"prompt\": \"x\"" + std::string(64 << 20, ' ') + "}");
  ASSERT_LT(bomb.size(), size_t(ho.max_body_bytes));
  const std::string r413 =
      raw_post("Content-Encoding: gzip\r\nContent-Length: " + std::to_string(bomb.size()) + "\r\n", bomb);
  EXPECT_EQ(status_of(r413), 413) << r413.substr(0, 300);
  EXPECT_NE(r413.find("after decompression"), std::string::npos);
  // Chunked, 200 KB in 1 KB chunks: refused at the cap.
  std::string chunked;
  for (int i = 0; i < 200; ++i) chunked += "400\r\n" + std::string(1024, ' ') + "\r\n";
  chunked += "0\r\n\r\n";
  EXPECT_EQ(status_of(raw_post("Transfer-Encoding: chunked\r\n", chunked)), 413);
  EXPECT_EQ(status_of(raw_post("Content-Encoding: zstd\r\nContent-Length: 2\r\n", "{}")), 415);
  EXPECT_EQ(status_of(raw_post("Content-Length: 99999999999\r\n", "")), 413);
  // A body to a route that takes none: 404 before reading it, connection closed.
  const int fd = connect_raw(port_);
  const std::string req =
      "POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "100000\r\n" +
      std::string(1000, 'z');
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const std::string got = read_all(fd);
  close(fd);
  EXPECT_EQ(status_of(got), 404) << got.substr(0, 200);
  // The server is fine afterwards.
  EXPECT_EQ(post("/v1/completions", small)->status, 200);
}

// The request line and headers hold 64 KiB at most (cpp-httplib 0.11 would
// grow a header line, or the list of headers, for as long as the client
// sends): 1 MB of headers, or one 1 MB header line, get a 400 and the
// connection closes; a request with ordinary headers is unaffected.
TEST_F(HttpTest, HugeRequestHeadsAreRefused) {
  start({});
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 20000; ++i) many += "X-A" + std::to_string(i) + ": " + std::string(40, 'a') + "\r\n";
  many += "\r\n";
  const std::string one_line = "GET /health HTTP/1.1\r\nX-Big: " + std::string(1 << 20, 'b') + "\r\n\r\n";
  for (const std::string* req : std::initializer_list<const std::string*>{&many, &one_line}) {
    const int fd = connect_raw(port_);
    ASSERT_GE(fd, 0);
    const auto t0 = Clock::now();
    send(fd, req->data(), req->size(), MSG_NOSIGNAL);
    const std::string got = read_all(fd, 10);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got.substr(0, 100);
    EXPECT_LT(since(t0), 5.0);
  }
  std::string ok = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  for (int i = 0; i < 100; ++i) ok += "X-A" + std::to_string(i) + ": " + std::string(40, 'a') + "\r\n";
  ok += "\r\n";
  const int fd = connect_raw(port_);
  send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
  EXPECT_EQ(read_all(fd).rfind("HTTP/1.1 200", 0), 0u);
  close(fd);
}

// 200 clients that send their request a byte at a time (and stop) hold no
// worker the health probe needs: /health answers within 1 s while they are
// connected, a client too slow for request_timeout_s is cut off, and stop()
// ends within a bound although they are still connected.
TEST_F(HttpTest, SlowClientsNeitherStallHealthNorStop) {
  HttpOptions ho;
  ho.request_timeout_s = 3;
  ho.read_timeout_s = 2;
  start({}, ho);
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_raw(port_);
    ASSERT_GE(fd, 0);
    send(fd, "POST /v1/completions HTTP/1.1\r\nHo", 33, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  for (int round = 0; round < 3; ++round) {
    for (int fd : slow) send(fd, "s", 1, MSG_NOSIGNAL);
    httplib::Client probe("127.0.0.1", port_);
    probe.set_connection_timeout(1, 0);
    probe.set_read_timeout(1, 0);
    const auto t0 = Clock::now();
    auto h = probe.Get("/health");
    ASSERT_TRUE(h) << "round " << round;
    EXPECT_EQ(h->status, 200);
    EXPECT_LT(since(t0), 1.0);
    std::this_thread::sleep_for(milliseconds(500));
  }
  // One byte every 0.5 s never completes a request: cut off at ~3 s.
  const auto t0 = Clock::now();
  const std::string cut = read_all(slow[0], 8);
  EXPECT_LT(since(t0), 6.0);
  const auto t1 = Clock::now();
  server_->stop();
  thread_.join();
  EXPECT_LT(since(t1), 2.0);
  for (int fd : slow) close(fd);
}

// Beyond max_connections a connection gets 503 at once, while the ones
// already served are unaffected.
TEST_F(HttpTest, ConnectionCapAnswers503) {
  HttpOptions ho;
  ho.max_connections = 4;
  start({}, ho);
  EXPECT_EQ(server_->max_connections(), 4);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(connect_raw(port_));
    send(held.back(), "GET /hea", 8, MSG_NOSIGNAL);
  }
  std::this_thread::sleep_for(milliseconds(200));
  const int extra = connect_raw(port_);
  send(extra, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 33, MSG_NOSIGNAL);
  const std::string got = read_all(extra, 5);
  close(extra);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("too many open connections"), std::string::npos);
  send(held[0], "lth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 44, MSG_NOSIGNAL);
  EXPECT_EQ(read_all(held[0]).rfind("HTTP/1.1 200", 0), 0u);
  for (int fd : held) close(fd);
  EXPECT_EQ(HttpOptions{}.max_connections, 0);  // by the machine:
  EXPECT_GE(default_max_connections(), 16);
  EXPECT_LE(default_max_connections(), 512);
}

// drain() ends within drain_timeout_s although a request would run far longer
// and a slow client is connected: the request is cut off, everything closes.
TEST_F(HttpTest, DrainIsBoundedWithLongRequestsAndSlowClients) {
  auto eo = test::FakeEngine::Options{};
  eo.step_time = std::chrono::microseconds(20000);  // 200 tokens: 4 s
  eo.ctx = 256;
  HttpOptions ho;
  ho.drain_timeout_s = 1;
  start(eo, ho);
  const int slow = connect_raw(port_);
  send(slow, "POST /v1/comp", 13, MSG_NOSIGNAL);
  std::thread t([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    c.Post("/v1/completions", json{{"model", "fake"}, {"prompt", "x"}, {"max_tokens", 200}}.dump(),
           "application/json");
  });
  while (scheduler_->running() == 0) std::this_thread::sleep_for(milliseconds(1));
  const auto t0 = Clock::now();
  server_->drain();
  thread_.join();
  EXPECT_LT(since(t0), 3.0);
  t.join();
  close(slow);
}

// The worst bodies a client can send within --max-body (1 MiB): a prompt of
// a megabyte of text, of chat markers, tens of thousands of chat messages,
// stop strings or logit_bias entries, JSON nested beyond the depth cap in a
// field the server ignores. Each ends in an answer (never a 500), /health
// answers within 1 s while it is being handled and after it, and the
// server is idle again at the end (nothing left running or reserved).
TEST_F(HttpTest, HealthAnswersWhileAndAfterEveryWorstBodyWithinMaxBody) {
  HttpOptions ho;
  ho.max_body_bytes = 1 << 20;
  start({}, ho);
  const size_t cap = ho.max_body_bytes - 4096;  // room for the other fields
  auto repeat = [&](const std::string& piece) {
    std::string s;
    while (s.size() + piece.size() < cap) s += piece;
    return s;
  };
  std::vector<std::pair<std::string, std::string>> bodies;  // (route, body)
  bodies.push_back(
      {"/v1/completions", json{{"model", "fake"}, {"prompt", repeat("story ")}, {"max_tokens", 4}}.dump()});
  bodies.push_back(
      {"/v1/completions",
       json{{"model", "fake"}, {"prompt", repeat("<|im_start|>user <|im_end|>")}, {"max_tokens", 4}}.dump()});
  {
    json messages = json::array();
    const json one = {{"role", "user"}, {"content", "hi"}};
    for (size_t n = 0; n + one.dump().size() + 1 < cap - 64; n += one.dump().size() + 1)
      messages.push_back(one);
    bodies.push_back(
        {"/v1/chat/completions", json{{"model", "fake"}, {"messages", messages}, {"max_tokens", 4}}.dump()});
  }
  {
    json stops = json::array();
    for (size_t n = 0; n + 7 < cap - 64; n += 7) stops.push_back("stop");  // "stop", = 7 bytes
    bodies.push_back(
        {"/v1/completions",
         json{{"model", "fake"}, {"prompt", "story"}, {"stop", stops}, {"max_tokens", 4}}.dump()});
  }
  {
    json bias = json::object();
    size_t n = 0;
    for (int id = 0; n + 16 < cap - 64; ++id) {
      bias[std::to_string(id)] = 1;
      n += std::to_string(id).size() + 5;  // "id":1,
    }
    bodies.push_back(
        {"/v1/completions",
         json{{"model", "fake"}, {"prompt", "story"}, {"logit_bias", bias}, {"max_tokens", 4}}.dump()});
  }
  {
    const size_t depth = (cap - 200) / 2;
    bodies.push_back({"/v1/completions", R"({"model":"fake","prompt":"story","max_tokens":4,"user":)" +
                                             std::string(depth, '[') + std::string(depth, ']') + "}"});
  }
  auto health_within_1s = [&](const std::string& what) {
    httplib::Client probe("127.0.0.1", port_);
    probe.set_connection_timeout(1, 0);
    probe.set_read_timeout(1, 0);
    const auto t0 = Clock::now();
    auto h = probe.Get("/health");
    ASSERT_TRUE(h) << what;
    EXPECT_EQ(h->status, 200) << what;
    EXPECT_LT(since(t0), 1.0) << what;
  };
  for (size_t i = 0; i < bodies.size(); ++i) {
    const std::string& route = bodies[i].first;  // (not a structured binding: clang 14 cannot capture one)
    const std::string& body = bodies[i].second;
    ASSERT_LE(body.size(), ho.max_body_bytes) << "body " << i;
    const auto t0 = Clock::now();
    std::atomic<bool> done{false};
    int status = 0;
    std::thread sender([&] {
      httplib::Client c("127.0.0.1", port_);
      c.set_read_timeout(60, 0);
      auto r = c.Post(route.c_str(), body, "application/json");
      status = r ? r->status : -1;
      done = true;
    });
    for (int k = 0; k < 3 && !done; ++k) {
      health_within_1s("body " + std::to_string(i) + " in flight");
      std::this_thread::sleep_for(milliseconds(50));
    }
    sender.join();
    std::printf("body %zu (%zu bytes to %s): %d in %.2f s\n", i, body.size(), route.c_str(), status,
                since(t0));
    EXPECT_TRUE(status == 200 || (status >= 400 && status < 500)) << "body " << i << ": " << status;
    health_within_1s("body " + std::to_string(i) + " after");
  }
  scheduler_->wait_idle();
  EXPECT_EQ(engine_->open_now(), 0);
  EXPECT_EQ(metric("futr_requests_running"), 0);
}

}  // namespace
}  // namespace futr::server
