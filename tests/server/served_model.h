// The fixture of the server tests that run a real model: the default model
// (SmolLM2) or another file or directory, an engine of the given configuration, the scheduler and the HTTP
// server on a loopback port, the server's thread; stopped and joined on
// destruction. Tests that need it skip with the reason start() gives when the
// model file is absent.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "formats/loader.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace futr::test {

struct ServedModelOptions {
  runtime::RuntimeConfig engine;           // the engine (make_engine's configuration)
  server::SchedulerOptions scheduler;      // the scheduler behind the server
  server::HttpOptions http;                // port 0 (any free one) and model "m" are set by start()
  bool log = false;                        // the engine's log lines on stdout ("futr: ...")
  std::string model = FUTR_DEFAULT_MODEL;  // the model file or directory served
  // Not empty: http's default of requests without "speculative" is that of
  // futr serve --speculative MODE --draft-max draft_max on the engine
  // (server::set_speculative_default).
  std::string speculative_mode;
  int draft_max = 8;
};

class ServedModel {
 public:
  // Loads the model and starts everything; null, with the reason in
  // *why, when the model file is absent.
  static std::unique_ptr<ServedModel> start(ServedModelOptions o, std::string* why) {
    std::error_code ec;
    if (!std::filesystem::exists(o.model, ec)) {
      *why = o.model + " is absent (scripts/fetch-model.sh)";
      return nullptr;
    }
    return std::unique_ptr<ServedModel>(new ServedModel(std::move(o)));
  }
  ~ServedModel() {
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  const Model& model() const { return *model_; }
  const Tokenizer& tok() const { return *tok_; }
  runtime::Engine& engine() { return *engine_; }
  server::Scheduler& scheduler() { return *scheduler_; }
  server::Metrics& metrics() { return metrics_; }
  int port() const { return port_; }
  // Why speculative_mode "auto" drafts nothing on this engine ("" where it drafts).
  const std::string& speculative_note() const { return speculative_note_; }

  // POSTs `body` (its "model" set to the served name) and returns the reply's
  // JSON; a failed request is a test failure and gives an empty object.
  nlohmann::json post(const std::string& path, nlohmann::json body) const {
    body["model"] = "m";
    httplib::Client cl("127.0.0.1", port_);
    cl.set_read_timeout(300, 0);
    auto r = cl.Post(path.c_str(), body.dump(), "application/json");
    if (!r || r->status != 200) {
      ADD_FAILURE() << "request failed: " << (r ? r->body : std::string("no response"));
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(r->body);
  }
  // The reply's body as it came (any status; empty without a reply).
  std::string raw_post(const std::string& path, nlohmann::json body) const {
    body["model"] = "m";
    httplib::Client cl("127.0.0.1", port_);
    cl.set_read_timeout(300, 0);
    auto r = cl.Post(path.c_str(), body.dump(), "application/json");
    return r ? r->body : "";
  }

 private:
  explicit ServedModel(ServedModelOptions o) {
    model_ = std::make_unique<Model>(load_model(o.model));
    tok_ = std::make_unique<Tokenizer>(model_->tokenizer);
    chat_ = std::make_unique<ChatTemplate>(ChatTemplate::for_tokenizer(*tok_));
    runtime::EngineLog log;
    if (o.log) log = [](const std::string& s) { std::printf("futr: %s\n", s.c_str()); };
    engine_ = runtime::make_engine(*model_, o.engine, log);
    if (!o.speculative_mode.empty())
      speculative_note_ = server::set_speculative_default(o.http, o.speculative_mode, o.draft_max, *engine_);
    scheduler_ = std::make_unique<server::Scheduler>(*engine_, *tok_, o.scheduler, &metrics_);
    o.http.port = 0;
    o.http.model = "m";
    server_ = std::make_unique<server::HttpServer>(*scheduler_, *tok_, chat_.get(), metrics_, o.http);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<runtime::Engine> engine_;
  server::Metrics metrics_;
  std::unique_ptr<server::Scheduler> scheduler_;
  std::unique_ptr<server::HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::string speculative_note_;
};

}  // namespace futr::test
