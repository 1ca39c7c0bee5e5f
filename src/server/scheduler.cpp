// Continuous batching over the Engine (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "server/metrics.h"
#include "server/text_stream.h"

namespace futr::server {

using Clock = std::chrono::steady_clock;

const char* to_string(Finish f) {
  switch (f) {
    case Finish::kNone: return "";
    case Finish::kStop: return "stop";
    case Finish::kLength: return "length";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
  }
  return "";
}

// --- Request ---

bool Request::wait(Update& u, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return changed_; })) return false;
  changed_ = false;
  u.text = std::move(text_);
  text_.clear();
  u.done = done_;
  u.finish = finish_;
  u.prompt_tokens = int(params_.prompt.size());
  u.completion_tokens = completion_tokens_;
  u.error = error_;
  return true;
}

void Request::emit(const std::string& text, int completion_tokens) {
  {
    std::lock_guard lk(mu_);
    text_ += text;
    completion_tokens_ = completion_tokens;
    changed_ = true;
  }
  cv_.notify_all();
}

void Request::end(Finish f, int completion_tokens, std::string error) {
  {
    std::lock_guard lk(mu_);
    done_ = true;
    finish_ = f;
    completion_tokens_ = completion_tokens;
    error_ = std::move(error);
    changed_ = true;
  }
  cv_.notify_all();
}

// --- Scheduler ---

namespace {

// Penalties look at the sequence's history, which the scheduler holds and the
// engine's sampler does not (see scheduler.h, step 3).
bool needs_history(const SamplerConfig& c) {
  return c.repetition_penalty != 1.0f || c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f;
}

}  // namespace

// A request admitted into the engine (scheduler thread only).
struct Scheduler::Active {
  std::shared_ptr<Request> req;
  runtime::SeqId id = 0;
  int prefilled = 0;           // prompt tokens stored in the engine
  int stored = 0;              // positions stored (== engine.length(id))
  int generated = 0;           // tokens sampled (EOS/EOT not counted)
  int32_t last = -1;           // the token to feed next (decode phase)
  bool decoding = false;       // the prompt is done
  std::optional<runtime::Sampler> sampler;  // penalties: drawn here from kLogits rows (else the engine draws)
  TextStream text;
  Clock::time_point first_token{}, last_token{};

  Active(std::shared_ptr<Request> r, runtime::SeqId i, const Tokenizer& tok)
      : req(std::move(r)), id(i), text(tok, req->params_.stop) {}
  int64_t reserve() const {
    return int64_t(req->params_.prompt.size()) + req->params_.max_tokens;
  }
};

Scheduler::Scheduler(runtime::Engine& engine, const Tokenizer& tok, SchedulerOptions options,
                     Metrics* metrics)
    : engine_(engine), tok_(tok), options_(options), metrics_(metrics), info_(engine.info()) {
  FUTR_CHECK(options_.max_queue >= 0, "--max-queue must be >= 0 (got {})", options_.max_queue);
  FUTR_CHECK(options_.max_step_tokens >= 0, "--max-step-tokens must be >= 0 (got {})",
             options_.max_step_tokens);
  step_budget_ = options_.max_step_tokens > 0
                     ? std::min(options_.max_step_tokens, info_.max_step_tokens)
                     : info_.max_step_tokens;
  FUTR_CHECK(step_budget_ > 0, "the engine takes no rows per step (max_step_tokens {})",
             info_.max_step_tokens);
  total_positions_ = engine_.free_positions();
  max_request_ = std::min<int64_t>(info_.ctx, total_positions_);
  publish();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& a : running_) {
    try {
      engine_.close(a->id);
    } catch (const std::exception&) {
    }
    a->req->end(Finish::kCancelled, a->generated);
  }
  for (auto& r : waiting_) r->end(Finish::kCancelled, 0);
}

std::shared_ptr<Request> Scheduler::submit(GenerationParams p) {
  auto reject = [&](int status, const char* type, const std::string& msg) {
    if (metrics_) metrics_->rejected(status);
    throw AdmissionError(status, type, msg);
  };
  if (p.prompt.empty()) reject(400, "invalid_request_error", "the prompt is empty");
  if (p.max_tokens < 1)
    reject(400, "invalid_request_error", fmt::format("max_tokens must be >= 1 (got {})", p.max_tokens));
  const int64_t need = int64_t(p.prompt.size()) + p.max_tokens;
  if (need > max_request_)
    reject(400, "invalid_request_error",
           fmt::format("this model's maximum context length is {} tokens; the request has {} "
                       "prompt tokens + max_tokens {} = {}",
                       max_request_, p.prompt.size(), p.max_tokens, need));
  for (int32_t t : p.prompt)
    if (t < 0 || t >= info_.vocab)
      reject(400, "invalid_request_error",
             fmt::format("prompt token {} is outside the vocabulary [0, {})", t, info_.vocab));
  auto req = std::shared_ptr<Request>(new Request(std::move(p)));
  {
    std::lock_guard lk(mu_);
    if (draining_.load())
      reject(503, "server_shutting_down", "the server is shutting down; no new requests");
    if (int(waiting_.size()) >= options_.max_queue)
      reject(429, "rate_limit_exceeded",
             fmt::format("the queue is full ({} requests waiting); retry later", waiting_.size()));
    waiting_.push_back(req);
    n_waiting_.store(int(waiting_.size()));
  }
  cv_.notify_all();
  return req;
}

void Scheduler::begin_drain() {
  {
    std::lock_guard lk(mu_);
    draining_.store(true);
  }
  cv_.notify_all();
}

void Scheduler::wait_idle() {
  std::unique_lock lk(mu_);
  idle_cv_.wait(lk, [&] { return (waiting_.empty() && n_running_.load() == 0) || stop_; });
}

bool Scheduler::wait_idle_for(std::chrono::duration<double> timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return (waiting_.empty() && n_running_.load() == 0) || stop_; });
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      // Idle: sleep until a request arrives (the timeout only bounds how late
      // a cancelled waiting request is noticed).
      cv_.wait_for(lk, std::chrono::milliseconds(100),
                   [&] { return stop_ || !waiting_.empty() || !running_.empty(); });
      if (stop_) return;
    }
    drop_cancelled();
    admit();
    publish();  // before the step: a client that sees its first token sees itself running
    run_step();
    publish();
    bool idle;
    {
      std::lock_guard lk(mu_);
      idle = waiting_.empty() && running_.empty();
    }
    if (idle) idle_cv_.notify_all();
  }
}

void Scheduler::drop_cancelled() {
  {
    std::lock_guard lk(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->cancelled()) {
        (*it)->end(Finish::kCancelled, 0);
        if (metrics_) metrics_->finished("cancelled");
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    n_waiting_.store(int(waiting_.size()));
  }
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->req->cancelled()) {
      finish(*running_[i], Finish::kCancelled);  // erases running_[i]
    } else {
      ++i;
    }
  }
}

void Scheduler::admit() {
  for (;;) {
    std::shared_ptr<Request> head;
    {
      std::lock_guard lk(mu_);
      if (waiting_.empty()) return;
      head = waiting_.front();
    }
    if (engine_.free_sequences() <= 0) return;
    int64_t committed = 0;  // positions the running requests may still take
    for (const auto& a : running_) committed += a->reserve() - a->stored;
    const int64_t need = int64_t(head->params_.prompt.size()) + head->params_.max_tokens;
    if (engine_.free_positions() - committed < need) return;  // waits for a finish
    const runtime::SeqId id = next_id_++;
    std::optional<runtime::Sampler> sampler;
    try {
      const SamplerConfig& sc = head->params_.sampling;
      if (needs_history(sc)) {
        sampler.emplace(sc);
        sampler->limit_vocab(tok_.vocab_size());  // as futr generate: ids without a token are never drawn
        for (int32_t t : head->params_.prompt) sampler->accept(t, /*generated=*/false);
      }
      engine_.open(id, sc);
    } catch (const std::exception& e) {
      // A sampler setting the engine refuses: this request fails, no other.
      {
        std::lock_guard lk(mu_);
        waiting_.pop_front();
        n_waiting_.store(int(waiting_.size()));
      }
      head->end(Finish::kError, 0, e.what());
      if (metrics_) metrics_->finished("error");
      continue;
    }
    {
      std::lock_guard lk(mu_);
      waiting_.pop_front();
      n_waiting_.store(int(waiting_.size()));
    }
    running_.push_back(std::make_unique<Active>(std::move(head), id, tok_));
    running_.back()->sampler = std::move(sampler);
    n_running_.store(int(running_.size()));
  }
}

void Scheduler::run_step() {
  if (running_.empty()) return;
  std::vector<runtime::BatchRow> rows;
  std::vector<Active*> asked;  // the Active of each kToken row, in batch order
  int budget = step_budget_;

  // 1. Decode rows: one per sequence whose prompt is done.
  std::vector<Active*> decoding;
  for (auto& a : running_)
    if (a->decoding) decoding.push_back(a.get());
  const size_t nd = decoding.size();
  auto ask_out = [](const Active* a) { return a->sampler ? runtime::RowOutput::kLogits : runtime::RowOutput::kToken; };
  for (size_t k = 0; k < nd && budget > 0; ++k) {
    Active* a = decoding[(decode_rr_ + k) % nd];
    rows.push_back({a->last, a->id, a->stored, ask_out(a), -1});
    asked.push_back(a);
    --budget;
  }
  if (nd > 0) decode_rr_ = (decode_rr_ + size_t(std::min<int>(int(nd), step_budget_))) % nd;

  // 2. Prompt chunks, in admission order, in what is left of the budget.
  std::vector<std::pair<Active*, int>> chunks;  // (request, rows)
  for (auto& a : running_) {
    if (a->decoding || budget <= 0) continue;
    const auto& prompt = a->req->params_.prompt;
    const int n = std::min<int>(budget, int(prompt.size()) - a->prefilled);
    const bool last = a->prefilled + n == int(prompt.size());
    for (int j = 0; j < n; ++j) {
      const bool ask = last && j == n - 1;
      rows.push_back({prompt[size_t(a->prefilled + j)], a->id, a->stored + j,
                      ask ? ask_out(a.get()) : runtime::RowOutput::kNone, -1, true});
    }
    if (last) asked.push_back(a.get());
    chunks.emplace_back(a.get(), n);
    budget -= n;
  }
  if (rows.empty()) return;

  runtime::StepResult result;
  try {
    result = engine_.step(rows);
  } catch (const std::exception& e) {
    // Requests are validated before admission, so this is an engine failure:
    // the requests of this batch end with the error, the server goes on.
    fmt::print(stderr, "futr serve: engine step failed ({} rows): {}\n", rows.size(), e.what());
    std::vector<runtime::SeqId> ids;
    for (const auto& r : rows)
      if (ids.empty() || ids.back() != r.seq) ids.push_back(r.seq);
    for (runtime::SeqId id : ids)
      for (auto& a : running_)
        if (a->id == id) {
          finish(*a, Finish::kError, e.what());
          break;
        }
    return;
  }

  // 3. Bookkeeping: decode rows stored their token, chunks their prompt rows.
  for (Active* a : asked)
    if (a->decoding) a->stored += 1;
  for (auto& [a, n] : chunks) {
    a->prefilled += n;
    a->stored += n;
    if (metrics_) metrics_->add_prompt_tokens(n);
  }

  // 4. The sampled tokens: the engine's (kToken rows), or drawn here from the
  // logits (kLogits rows: requests with penalties), both in batch order.
  size_t n_logits = 0;
  for (const Active* a : asked) n_logits += a->sampler ? 1 : 0;
  FUTR_CHECK(result.tokens.size() == asked.size() - n_logits, "the engine returned {} tokens for {} rows",
             result.tokens.size(), asked.size() - n_logits);
  FUTR_CHECK(n_logits == 0 || (result.logits.rank() == 2 && result.logits.dim(0) == int64_t(n_logits) &&
                               result.logits.dim(1) == info_.vocab),
             "the engine returned no [{}, {}] logits", n_logits, info_.vocab);
  const auto now = Clock::now();
  struct Done {
    Active* a;
    Finish f;
    std::string error;
  };
  std::vector<Done> done;
  size_t next_token = 0, next_logits = 0;
  for (size_t k = 0; k < asked.size(); ++k) {
    Active* a = asked[k];
    int32_t t = -1;
    if (a->sampler) {
      const std::span<const float> z(result.logits.row(int64_t(next_logits++)), size_t(info_.vocab));
      try {
        t = a->sampler->sample(z);  // checks the logits (NaN, +inf) and names the id
      } catch (const std::exception& e) {
        done.push_back({a, Finish::kError, e.what()});
        continue;
      }
      if (!tok_.is_eog(t)) a->sampler->accept(t, /*generated=*/true);
    } else {
      t = result.tokens[next_token++];
    }
    a->decoding = true;
    if (a->generated == 0) {
      a->first_token = now;
      if (metrics_) metrics_->observe_ttft(std::chrono::duration<double>(now - a->req->submitted_).count());
    }
    a->last_token = now;
    if (tok_.is_eog(t)) {
      done.push_back({a, Finish::kStop, {}});
      continue;
    }
    ++a->generated;
    if (metrics_) metrics_->add_generated_tokens(1);
    a->last = t;
    std::string text = a->text.push(t);
    if (a->text.stopped()) {
      if (!text.empty()) a->req->emit(text, a->generated);
      done.push_back({a, Finish::kStop, {}});
    } else if (a->generated >= a->req->params_.max_tokens) {
      a->req->emit(text + a->text.finish(), a->generated);
      done.push_back({a, Finish::kLength, {}});
    } else if (!text.empty()) {
      a->req->emit(text, a->generated);
    }
  }
  for (Done& d : done) finish(*d.a, d.f, std::move(d.error));
}

void Scheduler::finish(Active& a, Finish f, std::string error) {
  if (f == Finish::kStop && !a.text.stopped()) {
    const std::string tail = a.text.finish();  // EOS: the held-back text is final
    if (!tail.empty()) a.req->emit(tail, a.generated);
  }
  try {
    engine_.close(a.id);
  } catch (const std::exception& e) {
    fmt::print(stderr, "futr serve: closing sequence {} failed: {}\n", a.id, e.what());
  }
  if (metrics_) {
    metrics_->finished(to_string(f));
    if (a.generated >= 2)
      metrics_->observe_tpot(std::chrono::duration<double>(a.last_token - a.first_token).count() /
                             double(a.generated - 1));
  }
  a.req->end(f, a.generated, std::move(error));
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i].get() == &a) {
      running_.erase(running_.begin() + std::ptrdiff_t(i));
      break;
    }
  n_running_.store(int(running_.size()));
}

void Scheduler::publish() {
  if (!metrics_) return;
  metrics_->set_queue(n_running_.load(), n_waiting_.load());
  metrics_->set_kv(total_positions_ - engine_.free_positions(), total_positions_);
}

}  // namespace futr::server
