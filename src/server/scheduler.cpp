// Continuous batching over the Engine (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "runtime/ngram_drafter.h"
#include "runtime/speculative.h"
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
    if (logprobs_.empty()) logprobs_ = std::move(logprobs);
    else logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
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

// Requests whose tokens the scheduler draws from kLogits rows (scheduler.h,
// step 3; speculative requests verify their drafts here).
// Penalties look at the sequence's history, which the scheduler holds and the
// engine's sampler does not (runtime::uses_history). Speculative requests
// verify their drafts here unless greedy: then the engine's draw of every row
// (its argmax) is the verification (kToken rows; no logits leave the engine).
bool draws_here(const GenerationParams& p) {
  return runtime::uses_history(p.sampling) || p.logprobs >= 0 ||
         (p.speculative > 0 && p.sampling.temperature != 0.0f);
}

}  // namespace

// A request admitted into the engine (scheduler thread only), running or preempted.
struct Scheduler::Active {
  std::shared_ptr<Request> req;
  runtime::SeqId id = 0;
  int64_t order = 0;            // admission order (kept when preempted: seniority)
  int stored = 0;               // positions stored (== engine.length(id); 0 while preempted)
  int generated = 0;            // tokens sampled (EOS/EOT not counted)
  std::vector<int32_t> output;  // [generated] the tokens sampled (recomputed after a preemption)
  int32_t last = -1;            // the token to feed next (decode phase)
  bool decoding = false;        // a token was drawn: the prompt is done
  bool resumed = false;         // preempted at least once
  std::optional<runtime::Sampler>
      sampler;  // penalties or logprobs: drawn here from kLogits rows (else the engine draws)
  std::optional<runtime::Sampler> engine_sampler;  // preempted: the engine's sampler, given back on resume
  std::vector<TokenLogprob> prompt_lp;             // prompt_logprobs: the prompt's entries so far
  std::vector<TokenLogprob> pending_lp;            // logprobs: entries of tokens whose text is not sent yet
  std::unique_ptr<runtime::NgramDrafter> drafter;  // speculative: the history (prompt, output), indexed
  std::vector<int32_t> draft;  // speculative: this step's draft (rows after the decode row)
  TextStream text;
  Clock::time_point first_token{}, last_token{};

  Active(std::shared_ptr<Request> r, runtime::SeqId i, const Tokenizer& tok)
      : req(std::move(r)), id(i), text(tok, req->params_.stop) {}
  int prompt_len() const { return int(req->params_.prompt.size()); }
  int64_t reserve() const { return int64_t(prompt_len()) + req->params_.max_tokens; }
  // Positions stored before the next token is drawn: the prompt, or (decoding)
  // the prompt and every generated token but the last, which the next decode row feeds.
  int target() const { return decoding ? prompt_len() + generated - 1 : prompt_len(); }
  // The token at position p of the request's history (prompt, then output).
  int32_t token_at(int p) const {
    return p < prompt_len() ? req->params_.prompt[size_t(p)] : output[size_t(p - prompt_len())];
  }
  // The next row is a decode row (else prompt rows, or the recomputation of a preempted history).
  bool ready() const { return decoding && stored == target(); }
};

Scheduler::Scheduler(runtime::Engine& engine, const Tokenizer& tok, SchedulerOptions options,
                     Metrics* metrics)
    : engine_(engine), tok_(tok), options_(options), metrics_(metrics), info_(engine.info()) {
  FUTR_CHECK(options_.max_queue >= 0, "--max-queue must be >= 0 (got {})", options_.max_queue);
  FUTR_CHECK(options_.max_step_tokens >= 0, "--max-step-tokens must be >= 0 (got {})",
             options_.max_step_tokens);
  step_budget_ = options_.max_step_tokens > 0 ? std::min(options_.max_step_tokens, info_.max_step_tokens)
                                              : info_.max_step_tokens;
  FUTR_CHECK(step_budget_ > 0, "the engine takes no rows per step (max_step_tokens {})",
             info_.max_step_tokens);
  total_positions_ = engine_.free_positions();
  max_request_ = std::min<int64_t>(info_.ctx, total_positions_);
  paged_ = info_.kv_block_size > 0;
  FUTR_CHECK(options_.admission_reserve >= 0 && options_.admission_reserve <= 1,
             "--admission-reserve {} is not in [0, 1]", options_.admission_reserve);
  reserve_ = options_.admission_reserve;
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
    } catch (const std::exception&) {}
    a->req->end(Finish::kCancelled, a->generated);
  }
  for (auto& a : preempted_) a->req->end(Finish::kCancelled, a->generated);
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
  for (GenerationParams& p : choices)
    reqs.push_back(std::shared_ptr<Request>(new Request(std::move(p), signal)));
  {
    std::lock_guard lk(mu_);
    if (draining_.load()) reject(503, "server_shutting_down", "the server is shutting down; no new requests");
    if (waiting_.size() + reqs.size() > size_t(options_.max_queue))
      reject(429, "rate_limit_exceeded",
             reqs.size() == 1
                 ? fmt::format("the queue is full ({} requests waiting); retry later", waiting_.size())
                 : fmt::format(
                       "the queue has no room for {} choices ({} requests waiting, at most {}); retry later",
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
  idle_cv_.wait(
      lk, [&] { return (waiting_.empty() && n_running_.load() == 0 && n_preempted_.load() == 0) || stop_; });
}

bool Scheduler::wait_idle_for(std::chrono::duration<double> timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] {
    return (waiting_.empty() && n_running_.load() == 0 && n_preempted_.load() == 0) || stop_;
  });
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      // Idle: sleep until a request arrives (the timeout only bounds how late
      // a cancelled waiting request is noticed).
      cv_.wait_for(lk, std::chrono::milliseconds(100),
                   [&] { return stop_ || !waiting_.empty() || !running_.empty() || !preempted_.empty(); });
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
      idle = waiting_.empty() && running_.empty() && preempted_.empty();
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
  for (auto it = preempted_.begin(); it != preempted_.end();) {
    if ((*it)->req->cancelled()) {
      (*it)->req->end(Finish::kCancelled, (*it)->generated);  // its sequence is closed already
      if (metrics_) metrics_->finished("cancelled");
      it = preempted_.erase(it);
    } else {
      ++it;
    }
  }
  n_preempted_.store(int(preempted_.size()));
}

void Scheduler::admit() {
  for (;;) {
    if (engine_.free_sequences() <= 0) return;
    // Preempted requests first, oldest first: they resume before anything new starts.
    if (!preempted_.empty()) {
      bool admitted = false;
      try {
        admitted = admit_paged(preempted_.front());
      } catch (const std::exception& e) {
        // The engine refused to open or attach: this request fails, no other.
        Active& a = *preempted_.front();
        a.req->end(Finish::kError, a.generated, e.what());
        if (metrics_) metrics_->finished("error");
        preempted_.pop_front();
        n_preempted_.store(int(preempted_.size()));
        continue;
      }
      if (!admitted) return;  // waits for blocks
      std::unique_ptr<Active> a = std::move(preempted_.front());
      preempted_.pop_front();
      n_preempted_.store(int(preempted_.size()));
      // Back at its place in admission order (its seniority).
      auto at = std::upper_bound(running_.begin(), running_.end(), a->order,
                                 [](int64_t o, const std::unique_ptr<Active>& r) { return o < r->order; });
      running_.insert(at, std::move(a));
      n_running_.store(int(running_.size()));
      continue;
    }
    std::shared_ptr<Request> head;
    {
      std::lock_guard lk(mu_);
      if (waiting_.empty()) return;
      head = waiting_.front();
    }
    // The n choices of a call share their prompt's blocks: a choice waits
    // while an earlier choice of its call still computes the prompt, then
    // attaches its full blocks from the prefix cache (only its last partial
    // block and last row run again).
    if (paged_ && options_.prefix_cache && head->params_.prompt_logprobs < 0 &&
        std::any_of(running_.begin(), running_.end(), [&](const std::unique_ptr<Active>& r) {
          return r->req->signal_ == head->signal_ && r->req->params_.prompt == head->params_.prompt &&
                 !r->decoding && r->stored < r->prompt_len() - 1;
        }))
      return;
    if (!paged_) {
      int64_t committed = 0;  // positions the running requests may still take
      for (const auto& a : running_) committed += a->reserve() - a->stored;
      const int64_t need = int64_t(head->params_.prompt.size()) + head->params_.max_tokens;
      if (engine_.free_positions() - committed < need) return;  // waits for a finish
    }
    auto active = std::make_unique<Active>(head, 0, tok_);
    try {
      const SamplerConfig& sc = head->params_.sampling;
      if (draws_here(head->params_)) {
        active->sampler.emplace(sc);
        active->sampler->limit_vocab(
            tok_.vocab_size());  // as futr generate: ids without a token are never drawn
        for (int32_t t : head->params_.prompt) active->sampler->accept(t, /*generated=*/false);
      }
      if (head->params_.speculative > 0) {
        runtime::NgramDrafterConfig dc;
        dc.draft_max = std::min(head->params_.speculative, runtime::NgramDrafter::kMaxDraft);
        active->drafter = std::make_unique<runtime::NgramDrafter>(dc);
        active->drafter->push(head->params_.prompt);
      }
      if (paged_) {
        if (!admit_paged(active)) return;  // waits for blocks
      } else {
        active->id = next_id_++;
        engine_.open(active->id, sc);
      }
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
    active->order = next_order_++;
    running_.push_back(std::move(active));
    n_running_.store(int(running_.size()));
  }
}

bool Scheduler::admit_paged(std::unique_ptr<Active>& ap) {
  Active& a = *ap;
  const runtime::SeqId id = next_id_++;
  engine_.open(id, a.req->params_.sampling);  // throws (nothing opened) for a setting the engine refuses
  a.id = id;
  a.stored = 0;
  int attached = 0;
  // A prompt being scored (prompt_logprobs) runs every row from the start:
  // the scores come from its rows, so nothing is attached and the entries of
  // an earlier, preempted pass are dropped.
  const bool scoring = a.req->params_.prompt_logprobs >= 0 && !a.decoding;
  if (scoring) a.prompt_lp.clear();
  try {
    if (options_.prefix_cache && !scoring) {
      // A new request's last prompt row always runs (it gives the first
      // token's logits); a resumed one attaches its whole history.
      const int upto = a.decoding ? a.target() : a.prompt_len() - 1;
      std::vector<int32_t> history(size_t(std::max(0, upto)));
      for (int p = 0; p < upto; ++p) history[size_t(p)] = a.token_at(p);
      attached = engine_.attach_prefix(id, history);
      a.stored = attached;
    }
    // The rows up to the next token, and one block to grow into; while
    // others run, also the reserve for their growth (SchedulerOptions).
    const int rows = a.target() - a.stored + (a.decoding ? 1 : 0);
    int64_t need = engine_.blocks_needed(id, rows) + 1;
    if (reserve_ > 0 && !running_.empty()) {
      const int B = info_.kv_block_size;
      int64_t grow = 0;  // positions the running requests may still take
      for (const auto& r : running_)
        grow += std::max(0, r->prompt_len() - r->stored) + (r->req->params_.max_tokens - r->generated);
      need += int64_t(std::ceil(reserve_ * double(grow) / double(B)));
    }
    if (!running_.empty() && need > engine_.free_blocks()) {
      engine_.close(id);  // attached blocks go back to the cache
      a.stored = 0;
      return false;
    }
    if (a.engine_sampler) {
      engine_.restore_sampler(id, *a.engine_sampler);
      a.engine_sampler.reset();
    }
  } catch (...) {
    engine_.close(id);
    a.stored = 0;
    throw;
  }
  if (metrics_ && !a.resumed) metrics_->add_prefix_lookup(attached, a.prompt_len());
  return true;
}

void Scheduler::preempt(Active& a) {
  try {
    a.engine_sampler = engine_.sampler_state(a.id);  // before close: the draws continue from here
    engine_.close(a.id);                             // its full blocks stay cached for the resume
  } catch (const std::exception& e) {
    fmt::print(stderr, "futr serve: preempting sequence {} failed: {}\n", a.id, e.what());
  }
  a.stored = 0;
  a.resumed = true;
  if (metrics_) metrics_->preempted();
  reserve_ = std::min(1.0, 2 * reserve_);  // admit fewer until the preemptions stop
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i].get() == &a) {
      std::unique_ptr<Active> moved = std::move(running_[i]);
      running_.erase(running_.begin() + std::ptrdiff_t(i));
      auto at = std::upper_bound(preempted_.begin(), preempted_.end(), moved->order,
                                 [](int64_t o, const std::unique_ptr<Active>& r) { return o < r->order; });
      preempted_.insert(at, std::move(moved));
      break;
    }
  n_running_.store(int(running_.size()));
  n_preempted_.store(int(preempted_.size()));
}

void Scheduler::run_step() {
  if (running_.empty()) return;
  reserve_ = std::max(options_.admission_reserve, 0.99 * reserve_);
  std::vector<runtime::BatchRow> rows;
  // Every row that returns something, in batch order: whose it is, and the
  // prompt index whose next token it scores (-1: the row draws a token).
  struct Use {
    Active* a;
    runtime::RowOutput out;
    int scores = -1;
    int row = 0;  // a decode row's place in its group: 0 the decode row, i > 0 the row of draft[i - 1]
  };
  std::vector<Use> uses;
  int budget = step_budget_;

  // 1. The rows each request wants: a decode row per sequence whose next row
  // is one (round robin when they exceed the budget), then chunks of the
  // others (prompts, recomputed histories) in admission order, in what is
  // left of the budget. A chunk never mixes prompt tokens and generated ones,
  // so each row takes the engine path it took the first time.
  std::unordered_map<Active*, int> want;  // request -> rows this step
  std::vector<Active*> ready;
  for (auto& a : running_)
    if (a->ready()) ready.push_back(a.get());
  const size_t nd = ready.size();
  std::vector<Active*> decode;  // the decode rows, in batch order
  for (size_t k = 0; k < nd && budget > 0; ++k) {
    decode.push_back(ready[(decode_rr_ + k) % nd]);
    want[decode.back()] = 1;
    --budget;
  }
  if (nd > 0) decode_rr_ = (decode_rr_ + size_t(std::min<int>(int(nd), step_budget_))) % nd;
  // Drafts (speculative requests, while the batch is small): rows after the
  // decode row, each within the context and the tokens the request may
  // still draw (runtime/speculative.h, "Budget"), before prompt chunks.
  for (Active* a : decode) {
    a->draft.clear();
    if (!a->drafter || budget <= 0 || int(running_.size()) > options_.speculative_max_batch) continue;
    const int k =
        std::min({budget, info_.ctx - 1 - a->stored, a->req->params_.max_tokens - a->generated - 1});
    if (k <= 0) continue;
    a->drafter->draft(k, a->draft);
    want[a] += int(a->draft.size());
    budget -= int(a->draft.size());
  }
  for (auto& a : running_) {
    if (a->ready() || budget <= 0) continue;
    int n = std::min(budget, a->target() - a->stored);
    if (a->stored < a->prompt_len()) n = std::min(n, a->prompt_len() - a->stored);
    want[a.get()] = n;
    budget -= n;
  }

  // 2. Paging: blocks granted in admission order; when the oldest cannot go
  // on, the newest gives its blocks back (preempt()).
  if (paged_) {
    int64_t granted = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      Active* a = running_[i].get();
      const auto it = want.find(a);
      if (it == want.end()) continue;
      bool gone = false;
      for (;;) {
        const int64_t avail = engine_.free_blocks() - granted;
        const int64_t need = engine_.blocks_needed(a->id, it->second);
        if (need <= avail) {
          granted += need;
          break;
        }
        if (a->ready() && it->second > 1) {  // a draft does not fit: it goes first
          it->second = 1;
          a->draft.clear();
          continue;
        }
        if (!a->ready()) {  // a chunk: the most rows that fit
          int m = it->second - 1;
          while (m > 0 && engine_.blocks_needed(a->id, m) > avail) --m;
          if (m > 0) {
            it->second = m;
            granted += engine_.blocks_needed(a->id, m);
            break;
          }
        }
        Active* victim = running_.back().get();
        gone = victim == a;
        want.erase(victim);
        preempt(*victim);  // erases it from running_
        if (gone) break;
      }
      if (gone) break;  // a was the newest: nothing runs after it
    }
  }

  // 3. The rows: decode rows first, then the chunks.
  auto ask_out = [](const Active* a) {
    return a->sampler ? runtime::RowOutput::kLogits : runtime::RowOutput::kToken;
  };
  for (Active* a : decode) {
    if (!want.count(a)) continue;  // preempted
    rows.push_back({a->last, a->id, a->stored, ask_out(a), -1});
    uses.push_back({a, rows.back().out});
    for (size_t i = 0; i < a->draft.size(); ++i) {  // every row of a draft: as its decode row
      rows.push_back({a->draft[i], a->id, a->stored + 1 + int(i), ask_out(a), -1});
      uses.push_back({a, rows.back().out, -1, int(i) + 1});
    }
  }
  std::vector<std::pair<Active*, int>> chunks;  // (request, rows)
  for (auto& a : running_) {
    const auto it = want.find(a.get());
    if (a->ready() || it == want.end() || it->second <= 0) continue;
    const int n = it->second;
    const GenerationParams& gp = a->req->params_;
    for (int j = 0; j < n; ++j) {
      const int p = a->stored + j;
      runtime::BatchRow row{a->token_at(p), a->id, p, runtime::RowOutput::kNone, -1, p < a->prompt_len()};
      int scores = -1;
      // Never on a recomputed history (decoding): the first token is asked by
      // the row of the last prompt token (none with max_tokens 0); with
      // prompt_logprobs every other prompt row scores the next prompt token.
      if (!a->decoding && p == a->prompt_len() - 1) {
        if (gp.max_tokens > 0) row.out = ask_out(a.get());
      } else if (!a->decoding && p < a->prompt_len() - 1 && gp.prompt_logprobs >= 0) {
        row.out = gp.prompt_logprobs > 0 ? runtime::RowOutput::kLogits : runtime::RowOutput::kLogprob;
        row.target = gp.prompt[size_t(p + 1)];
        scores = p + 1;
      }
      rows.push_back(row);
      if (row.out != runtime::RowOutput::kNone) uses.push_back({a.get(), row.out, scores});
    }
    chunks.emplace_back(a.get(), n);
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
    a->stored += n;
    if (metrics_) metrics_->add_prompt_tokens(n);
    if (!a->decoding && a->stored == a->prompt_len())
      prompt_done.push_back(a);  // the prompt's end, the first time
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
  FUTR_CHECK(result.tokens.size() == n_tokens, "the engine returned {} tokens for {} rows",
             result.tokens.size(), n_tokens);
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
  // Speculative requests: the draft tokens accepted this step; a request is
  // in `rejected` once a row of its group drew something else than its draft
  // (that draw ends the group: the rows after it are dropped).
  std::unordered_map<Active*, int> accepted;
  std::unordered_set<Active*> rejected;
  size_t next_token = 0, next_logits = 0, next_logprob = 0;
  for (const Use& u : uses) {
    Active* a = u.a;
    const GenerationParams& p = a->req->params_;
    std::span<const float> z;
    if (u.out == runtime::RowOutput::kLogits)
      z = {result.logits.row(int64_t(next_logits++)), size_t(info_.vocab)};
    const int32_t engine_token = u.out == runtime::RowOutput::kToken ? result.tokens[next_token++] : -1;
    if (u.scores < 0 && u.out != runtime::RowOutput::kLogprob && rejected.count(a)) continue;
    if (u.scores >= 0) {  // a prompt row scoring prompt[scores]
      const int32_t target = p.prompt[size_t(u.scores)];
      if (a->prompt_lp.empty()) a->prompt_lp.push_back({p.prompt[0], 0.0, false, {}});
      if (u.out == runtime::RowOutput::kLogprob)
        a->prompt_lp.push_back({target, result.logprobs[next_logprob++], true, {}});
      else a->prompt_lp.push_back(token_logprob(z, target, p.prompt_logprobs, limit));
      continue;
    }
    if (u.out == runtime::RowOutput::kToken) {
      const int32_t t = engine_token;
      if (!a->draft.empty()) {  // greedy drafts: accepted while the engine's argmax is the draft's next token
        const int32_t d = u.row < int(a->draft.size()) ? a->draft[size_t(u.row)] : -1;
        if (t == d) ++accepted[a];
        else rejected.insert(a);
      }
      drawn.push_back({a, t, std::nullopt});
      continue;
    }
    if (failed(a)) continue;
    int32_t t = -1;
    try {
      if (a->draft.empty()) {
        t = a->sampler->sample(z);  // checks the logits (NaN, +inf) and names the id
      } else {
        // The draw of ordinary decoding at this position, accepted when it
        // is the draft's next token (runtime/speculative.h: the same tokens
        // as without the draft, greedy or sampled).
        const int32_t d = u.row < int(a->draft.size()) ? a->draft[size_t(u.row)] : -1;
        const runtime::DraftVerdict v = runtime::verify_draft(*a->sampler, z, d);
        t = v.token;
        if (v.accepted) ++accepted[a];
        else rejected.insert(a);
      }
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
    if (failed(a)) continue;  // a speculative request that ended at an earlier token of its group
    a->decoding = true;
    if (a->generated == 0) {
      a->first_token = now;
      if (metrics_) metrics_->observe_ttft(std::chrono::duration<double>(now - a->req->submitted_).count());
    }
    a->last_token = now;
    if (tok_.is_eog(t) && !a->req->params_.ignore_eos) {
      done.push_back({a, Finish::kStop, {}});
      continue;
    }
    ++a->generated;
    a->output.push_back(t);
    if (a->drafter) a->drafter->push(t);
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
  // 7. Speculative requests: the rows of rejected drafts leave the sequence
  // (Engine::truncate: as if they never ran); the drafter learns how its
  // draft fared.
  for (Active* a : decode) {
    if (a->draft.empty() || !want.count(a)) continue;
    const int drafted = int(a->draft.size()), kept = accepted.count(a) ? accepted[a] : 0;
    a->drafter->observe(drafted, kept);
    if (metrics_) metrics_->add_speculative(drafted, kept);
    a->draft.clear();
    if (failed(a)) continue;  // closed below
    if (a->stored > a->target()) {
      try {
        engine_.truncate(a->id, a->target());
        a->stored = a->target();
      } catch (const std::exception& e) {
        done.push_back({a, Finish::kError, e.what()});
      }
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
  metrics_->set_queue(n_running_.load(), n_waiting_.load() + n_preempted_.load());
  metrics_->set_kv(total_positions_ - engine_.free_positions(), total_positions_);
  if (paged_) {
    const int64_t free = engine_.free_blocks();
    metrics_->set_kv_blocks(info_.kv_blocks - free, free);
  }
}

}  // namespace futr::server
