// Continuous batching over the Engine (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

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
  u.logprobs = std::move(logprobs_);
  logprobs_.clear();
  u.prompt_logprobs = std::move(prompt_logprobs_);
  prompt_logprobs_.clear();
  u.done = done_;
  u.finish = finish_;
  u.prompt_tokens = int(params_.prompt.size());
  u.completion_tokens = completion_tokens_;
  u.error = error_;
  return true;
}

void Request::changed() {
  cv_.notify_all();
  if (signal_) signal_->notify();
}

void Request::emit(const std::string& text, int completion_tokens, std::vector<TokenLogprob> logprobs) {
  {
    std::lock_guard lk(mu_);
    text_ += text;
    completion_tokens_ = completion_tokens;
    if (logprobs_.empty())
      logprobs_ = std::move(logprobs);
    else
      logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
    changed_ = true;
  }
  changed();
}

void Request::set_prompt_logprobs(std::vector<TokenLogprob> logprobs) {
  {
    std::lock_guard lk(mu_);
    prompt_logprobs_ = std::move(logprobs);
    changed_ = true;
  }
  changed();
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
  changed();
}

// --- Scheduler ---

namespace {

// Penalties look at the sequence's history, which the scheduler holds and the
// engine's sampler does not (see scheduler.h, step 3).
bool needs_history(const SamplerConfig& c) {
  return c.repetition_penalty != 1.0f || c.presence_penalty != 0.0f || c.frequency_penalty != 0.0f;
}

// Requests whose tokens the scheduler draws from kLogits rows (scheduler.h, step 3).
bool draws_here(const GenerationParams& p) { return needs_history(p.sampling) || p.logprobs >= 0; }

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
  std::optional<runtime::Sampler> sampler;  // penalties or logprobs: drawn here from kLogits rows (else the engine draws)
  std::vector<TokenLogprob> prompt_lp;      // prompt_logprobs: the prompt's entries so far
  std::vector<TokenLogprob> pending_lp;     // logprobs: entries of tokens whose text is not sent yet
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
  std::vector<GenerationParams> one;
  one.push_back(std::move(p));
  return submit(std::move(one)).front();
}

std::vector<std::shared_ptr<Request>> Scheduler::submit(std::vector<GenerationParams> choices) {
  auto reject = [&](int status, const char* type, const std::string& msg) {
    if (metrics_) metrics_->rejected(status);
    throw AdmissionError(status, type, msg);
  };
  if (choices.empty()) reject(400, "invalid_request_error", "no choices to generate");
  for (const GenerationParams& p : choices) {
    if (p.prompt.empty()) reject(400, "invalid_request_error", "the prompt is empty");
    if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs || p.prompt_logprobs < -1 ||
        p.prompt_logprobs > kMaxTopLogprobs)
      reject(400, "invalid_request_error",
             fmt::format("logprobs must be in [0, {}] (got {} and {} for the prompt)", kMaxTopLogprobs,
                         p.logprobs, p.prompt_logprobs));
    // max_tokens 0: a request that only scores its prompt.
    if (p.max_tokens < (p.prompt_logprobs >= 0 ? 0 : 1))
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
  }
  auto signal = std::make_shared<RequestSignal>();
  std::vector<std::shared_ptr<Request>> reqs;
  for (GenerationParams& p : choices) reqs.push_back(std::shared_ptr<Request>(new Request(std::move(p), signal)));
  {
    std::lock_guard lk(mu_);
    if (draining_.load())
      reject(503, "server_shutting_down", "the server is shutting down; no new requests");
    if (waiting_.size() + reqs.size() > size_t(options_.max_queue))
      reject(429, "rate_limit_exceeded",
             reqs.size() == 1
                 ? fmt::format("the queue is full ({} requests waiting); retry later", waiting_.size())
                 : fmt::format("the queue has no room for {} choices ({} requests waiting, at most {}); retry later",
                               reqs.size(), waiting_.size(), options_.max_queue));
    for (auto& r : reqs) waiting_.push_back(r);
    n_waiting_.store(int(waiting_.size()));
  }
  cv_.notify_all();
  return reqs;
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
      if (draws_here(head->params_)) {
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
  // Every row that returns something, in batch order: whose it is, and the
  // prompt index whose next token it scores (-1: the row draws a token).
  struct Use {
    Active* a;
    runtime::RowOutput out;
    int scores = -1;
  };
  std::vector<Use> uses;
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
    uses.push_back({a, rows.back().out});
    --budget;
  }
  if (nd > 0) decode_rr_ = (decode_rr_ + size_t(std::min<int>(int(nd), step_budget_))) % nd;

  // 2. Prompt chunks, in admission order, in what is left of the budget. The
  // chunk that ends a prompt asks for the first token (none with max_tokens
  // 0); with prompt_logprobs every other prompt row scores the next prompt token.
  std::vector<std::pair<Active*, int>> chunks;  // (request, rows)
  for (auto& a : running_) {
    if (a->decoding || budget <= 0) continue;
    const GenerationParams& p = a->req->params_;
    const auto& prompt = p.prompt;
    const int n = std::min<int>(budget, int(prompt.size()) - a->prefilled);
    for (int j = 0; j < n; ++j) {
      const int i = a->prefilled + j;
      runtime::BatchRow row{prompt[size_t(i)], a->id, a->stored + j, runtime::RowOutput::kNone, -1, true};
      int scores = -1;
      if (i + 1 == int(prompt.size())) {
        if (p.max_tokens > 0) row.out = ask_out(a.get());
      } else if (p.prompt_logprobs >= 0) {
        row.out = p.prompt_logprobs > 0 ? runtime::RowOutput::kLogits : runtime::RowOutput::kLogprob;
        row.target = prompt[size_t(i + 1)];
        scores = i + 1;
      }
      rows.push_back(row);
      if (row.out != runtime::RowOutput::kNone) uses.push_back({a.get(), row.out, scores});
    }
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
  for (const Use& u : uses)
    if (u.scores < 0 && u.a->decoding) u.a->stored += 1;
  std::vector<Active*> prompt_done;  // requests whose prompt ended in this step
  for (auto& [a, n] : chunks) {
    a->prefilled += n;
    a->stored += n;
    if (metrics_) metrics_->add_prompt_tokens(n);
    if (a->prefilled == int(a->req->params_.prompt.size())) prompt_done.push_back(a);
  }

  // 4. The outputs, in batch order: the engine's tokens (kToken rows),
  // logits (kLogits rows: drawn here, and the logprobs), log-probabilities
  // (kLogprob rows: prompt scores).
  size_t n_tokens = 0, n_logits = 0, n_logprobs = 0;
  for (const Use& u : uses) {
    n_tokens += u.out == runtime::RowOutput::kToken;
    n_logits += u.out == runtime::RowOutput::kLogits;
    n_logprobs += u.out == runtime::RowOutput::kLogprob;
  }
  FUTR_CHECK(result.tokens.size() == n_tokens, "the engine returned {} tokens for {} rows", result.tokens.size(),
             n_tokens);
  FUTR_CHECK(result.logprobs.size() == n_logprobs, "the engine returned {} log-probabilities for {} rows",
             result.logprobs.size(), n_logprobs);
  FUTR_CHECK(n_logits == 0 || (result.logits.rank() == 2 && result.logits.dim(0) == int64_t(n_logits) &&
                               result.logits.dim(1) == info_.vocab),
             "the engine returned no [{}, {}] logits", n_logits, info_.vocab);
  const int32_t limit = std::min<int32_t>(tok_.vocab_size(), info_.vocab);  // ids with a token
  const auto now = Clock::now();
  struct Done {
    Active* a;
    Finish f;
    std::string error;
  };
  std::vector<Done> done;
  auto failed = [&](const Active* a) {
    return std::any_of(done.begin(), done.end(), [&](const Done& d) { return d.a == a; });
  };
  struct Drawn {
    Active* a;
    int32_t t;
    std::optional<TokenLogprob> lp;
  };
  std::vector<Drawn> drawn;
  size_t next_token = 0, next_logits = 0, next_logprob = 0;
  for (const Use& u : uses) {
    Active* a = u.a;
    const GenerationParams& p = a->req->params_;
    std::span<const float> z;
    if (u.out == runtime::RowOutput::kLogits) z = {result.logits.row(int64_t(next_logits++)), size_t(info_.vocab)};
    if (u.scores >= 0) {  // a prompt row scoring prompt[scores]
      const int32_t target = p.prompt[size_t(u.scores)];
      if (a->prompt_lp.empty()) a->prompt_lp.push_back({p.prompt[0], 0.0, false, {}});
      if (u.out == runtime::RowOutput::kLogprob)
        a->prompt_lp.push_back({target, result.logprobs[next_logprob++], true, {}});
      else
        a->prompt_lp.push_back(token_logprob(z, target, p.prompt_logprobs, limit));
      continue;
    }
    if (u.out == runtime::RowOutput::kToken) {
      drawn.push_back({a, result.tokens[next_token++], std::nullopt});
      continue;
    }
    if (failed(a)) continue;
    int32_t t = -1;
    try {
      t = a->sampler->sample(z);  // checks the logits (NaN, +inf) and names the id
    } catch (const std::exception& e) {
      done.push_back({a, Finish::kError, e.what()});
      continue;
    }
    if (!tok_.is_eog(t)) a->sampler->accept(t, /*generated=*/true);
    std::optional<TokenLogprob> lp;
    if (p.logprobs >= 0) lp = token_logprob(z, t, p.logprobs, limit);
    drawn.push_back({a, t, std::move(lp)});
  }

  // 5. Prompts done: their log-probabilities reach the request before its
  // first token; a request with max_tokens 0 ends here.
  for (Active* a : prompt_done) {
    const GenerationParams& p = a->req->params_;
    if (failed(a)) continue;
    if (p.prompt_logprobs >= 0) {
      if (a->prompt_lp.empty()) a->prompt_lp.push_back({p.prompt[0], 0.0, false, {}});  // a one-token prompt
      a->req->set_prompt_logprobs(std::move(a->prompt_lp));
      a->prompt_lp.clear();
    }
    if (p.max_tokens == 0) done.push_back({a, Finish::kLength, {}});
  }

  // 6. The drawn tokens.
  for (Drawn& d : drawn) {
    Active* a = d.a;
    const int32_t t = d.t;
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
    if (d.lp) a->pending_lp.push_back(std::move(*d.lp));
    std::string text = a->text.push(t);
    if (a->text.stopped()) {
      if (!text.empty()) a->req->emit(text, a->generated, std::exchange(a->pending_lp, {}));
      done.push_back({a, Finish::kStop, {}});
    } else if (a->generated >= a->req->params_.max_tokens) {
      a->req->emit(text + a->text.finish(), a->generated, std::exchange(a->pending_lp, {}));
      done.push_back({a, Finish::kLength, {}});
    } else if (!text.empty()) {
      a->req->emit(text, a->generated, std::exchange(a->pending_lp, {}));
    }
  }
  for (Done& d : done) finish(*d.a, d.f, std::move(d.error));
}

void Scheduler::finish(Active& a, Finish f, std::string error) {
  std::string tail;
  if (f == Finish::kStop && !a.text.stopped()) tail = a.text.finish();  // EOS: the held-back text is final
  // The logprobs of tokens whose text was held back (or was a stop string's).
  if (!tail.empty() || !a.pending_lp.empty()) a.req->emit(tail, a.generated, std::exchange(a.pending_lp, {}));
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
