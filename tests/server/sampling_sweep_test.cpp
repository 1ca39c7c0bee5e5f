// Every sampling parameter of futr serve at the ends of its range, through the
// HTTP server, the scheduler and the real CPU engine on the default model:
// each value inside the range (the ends, the smallest positive floats, the
// extreme seeds, max_tokens up to the whole context) generates (200) and each
// just outside is refused (400 naming the parameter); no request ends with a
// 500 (a sampler or engine failure on an accepted value). All of it with 200
// slow connections holding the server open, and /health answering between
// the requests. Skips without the model (scripts/fetch-model.sh).
//
// Bounds are generous on purpose (a loaded 2-core machine): nothing here
// depends on timing except the client's 120 s read timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <thread>

#include "served_model.h"

namespace futr::server {
namespace {

using json = nlohmann::json;

constexpr int kCtx = 32;  // positions per request: max_tokens up to the rest of it

class SamplingSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    test::ServedModelOptions o;
    o.engine.engine = runtime::EngineKind::kCpu;
    o.engine.ctx = kCtx;
    o.engine.max_seqs = 2;
    o.http.request_timeout_s = 600;  // the slow connections stay open for the whole sweep
    o.http.read_timeout_s = 600;
    o.log = true;
    std::string why;
    served_ = test::ServedModel::start(o, &why);
    if (!served_) GTEST_SKIP() << why;
    port_ = served_->port();
  }
  void TearDown() override {
    served_.reset();
    for (int fd : slow_) close(fd);
  }

  // A loopback connection that has sent half a request head and waits.
  void open_slow(int n) {
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(port_));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      const char head[] = "POST /v1/completions HTTP/1.1\r\nHo";
      ASSERT_EQ(send(fd, head, sizeof head - 1, MSG_NOSIGNAL), ssize_t(sizeof head - 1));
      slow_.push_back(fd);
    }
  }

  // POSTs `extra` merged into a small request; the status (-1: no answer).
  int post(bool chat, const json& extra, std::string* body = nullptr) {
    httplib::Client cl("127.0.0.1", port_);
    cl.set_read_timeout(120, 0);
    json req = {{"model", "m"}, {"max_tokens", 2}};
    if (chat)
      req["messages"] =
          json::array({{{"role", "system"}, {"content", ""}}, {{"role", "user"}, {"content", "Hi"}}});
    else req["prompt"] = "The cat";
    for (auto it = extra.begin(); it != extra.end(); ++it) req[it.key()] = *it;
    auto r = cl.Post(chat ? "/v1/chat/completions" : "/v1/completions", req.dump(), "application/json");
    if (!r) return -1;
    if (body) *body = r->body;
    return r->status;
  }

  std::unique_ptr<test::ServedModel> served_;
  std::vector<int> slow_;
  int port_ = 0;
};

TEST_F(SamplingSweep, RangeEndsGenerateAndBeyondIs400NeverA500) {
  open_slow(200);
  const double tiny = std::numeric_limits<double>::denorm_min();              // 5e-324: 0 as a float
  const double min_float = double(std::numeric_limits<float>::denorm_min());  // 1.4e-45
  const int vocab = served_->tok().vocab_size();
  struct Case {
    json extra;
    int status;              // expected
    const char* param = "";  // the 400's "param"
  };
  const std::vector<Case> cases = {
      // temperature [0, 2]
      {{{"temperature", 0}}, 200},
      {{{"temperature", min_float}}, 200},
      {{{"temperature", 1e-30}}, 200},
      {{{"temperature", 2}}, 200},
      {{{"temperature", -1e-9}}, 400, "temperature"},
      {{{"temperature", 2.000001}}, 400, "temperature"},
      // top_p (0, 1]
      {{{"top_p", min_float}}, 200},
      {{{"top_p", 1e-30}}, 200},
      {{{"top_p", 1}}, 200},
      {{{"top_p", 0}}, 400, "top_p"},
      {{{"top_p", tiny}}, 400, "top_p"},
      {{{"top_p", 1.000001}}, 400, "top_p"},
      // top_k -1, 0 (off), [1, vocab]
      {{{"top_k", -1}}, 200},
      {{{"top_k", 0}}, 200},
      {{{"top_k", 1}}, 200},
      {{{"top_k", vocab}}, 200},
      {{{"top_k", -2}}, 400, "top_k"},
      {{{"top_k", vocab + 1}}, 400, "top_k"},
      {{{"top_k", INT64_MAX}}, 400, "top_k"},
      // min_p [0, 1]
      {{{"min_p", 0}}, 200},
      {{{"min_p", min_float}}, 200},
      {{{"min_p", 1}}, 200},
      {{{"min_p", -1e-9}}, 400, "min_p"},
      {{{"min_p", 1.000001}}, 400, "min_p"},
      // repetition_penalty (0, 10], over the prompt too
      {{{"repetition_penalty", min_float}}, 200},
      {{{"repetition_penalty", 1e-30}}, 200},
      {{{"repetition_penalty", 10}}, 200},
      {{{"repetition_penalty", 0}}, 400, "repetition_penalty"},
      {{{"repetition_penalty", tiny}}, 400, "repetition_penalty"},
      {{{"repetition_penalty", 10.000001}}, 400, "repetition_penalty"},
      // presence_penalty, frequency_penalty [-2, 2]
      {{{"presence_penalty", -2}, {"max_tokens", 4}}, 200},
      {{{"presence_penalty", 2}, {"max_tokens", 4}}, 200},
      {{{"frequency_penalty", -2}, {"max_tokens", 4}}, 200},
      {{{"frequency_penalty", 2}, {"max_tokens", 4}}, 200},
      {{{"presence_penalty", -2.000001}}, 400, "presence_penalty"},
      {{{"frequency_penalty", 2.000001}}, 400, "frequency_penalty"},
      // seed: any int64
      {{{"seed", 0}}, 200},
      {{{"seed", INT64_MAX}}, 200},
      {{{"seed", INT64_MIN}}, 200},
      {{{"seed", UINT64_MAX}}, 400, "seed"},
      {{{"seed", 1.5}}, 400, "seed"},
      // max_tokens [1, the rest of the context]
      {{{"max_tokens", 1}}, 200},
      {{{"max_tokens", 0}}, 400, "max_tokens"},
      {{{"max_tokens", kCtx}}, 400, "max_tokens"},
      {{{"max_tokens", INT64_MAX}}, 400, "max_tokens"},
      // stop: up to 4 non-empty valid UTF-8 strings, any length
      {{{"stop", json::array({"a", "\n", std::string(1000, 'z'), "\xe4\xbd\xa0"})}}, 200},
      {{{"stop", ""}}, 400, "stop"},
      {{{"stop", json::array({"a", "b", "c", "d", "e"})}}, 400, "stop"},
      // logit_bias: only its neutral value {}
      {{{"logit_bias", json::object()}}, 200},
      {{{"logit_bias", {{"5", 100}}}}, 400, "logit_bias"},
      // Every parameter at an end at once, greedy and sampled.
      {{{"temperature", 0},
        {"top_k", 1},
        {"top_p", min_float},
        {"min_p", 1},
        {"repetition_penalty", min_float},
        {"presence_penalty", -2},
        {"frequency_penalty", 2},
        {"seed", INT64_MIN},
        {"max_tokens", 4}},
       200},
      {{{"temperature", 2},
        {"top_k", vocab},
        {"top_p", 1},
        {"min_p", min_float},
        {"repetition_penalty", 10},
        {"presence_penalty", 2},
        {"frequency_penalty", -2},
        {"seed", INT64_MAX},
        {"max_tokens", 4}},
       200},
      {{{"temperature", min_float},
        {"repetition_penalty", min_float},
        {"frequency_penalty", 2},
        {"max_tokens", 4}},
       200},
  };
  // Every case on /v1/completions; on /v1/chat/completions (the same
  // sampling after a different prompt path) the ones that combine ends.
  for (bool chat : {false, true}) {
    for (const Case& c : cases) {
      if (chat && c.extra.size() < 3) continue;
      SCOPED_TRACE((chat ? "chat " : "completions ") + c.extra.dump());
      std::string body;
      const int status = post(chat, c.extra, &body);
      ASSERT_EQ(status, c.status) << body;
      const json j = json::parse(body);
      if (c.status == 400) {
        EXPECT_EQ(j["error"]["param"], c.param) << body;
        continue;
      }
      const int n = j["usage"]["completion_tokens"].get<int>();
      EXPECT_GE(n, 0);
      EXPECT_LE(n, c.extra.value("max_tokens", 2));
      const std::string finish = j["choices"][0]["finish_reason"].get<std::string>();
      EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
    }
    httplib::Client probe("127.0.0.1", port_);
    probe.set_read_timeout(60, 0);
    auto h = probe.Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
  }

  // max_tokens up to the whole rest of the context, and chat's default (the rest).
  std::string body;
  const int n_prompt = int(served_->tok().encode("The cat", served_->tok().add_bos(), false).size());
  ASSERT_EQ(post(false, {{"max_tokens", kCtx - n_prompt}, {"temperature", 0}}, &body), 200) << body;
  ASSERT_EQ(post(true, {{"max_tokens", nullptr}, {"temperature", 2}, {"seed", 3}}, &body), 200) << body;
  ASSERT_EQ(post(false, {{"max_tokens", kCtx - n_prompt + 1}}, &body), 400) << body;
  // Streaming at the ends too.
  ASSERT_EQ(
      post(true, {{"stream", true}, {"temperature", min_float}, {"repetition_penalty", min_float}}, &body),
      200)
      << body;
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
  EXPECT_EQ(body.find("\"error\""), std::string::npos) << body;
}

}  // namespace
}  // namespace futr::server
