// Continuous batching over runtime::Engine::step (the scheduler of
// `futr serve`; no HTTP here).
//
// One thread owns the engine. Every iteration:
//   1. requests cancelled by their client leave (waiting: dropped; running:
//      their sequence is closed, its KV positions freed);
//   2. admission, first come first served (preempted requests first, oldest
//      first, then the queue). Two regimes, by the engine:
//      - an engine that pages (info().kv_block_size > 0): the head is opened
//        as a sequence, attaches the longest cached prefix of its tokens
//        (Engine::attach_prefix; not with prefix_cache off), and stays when
//        the blocks for the rest of its prompt (plus one) are free; else it
//        is closed again and waits. Blocks are then taken one at a time as
//        sequences grow, and a step that needs more than are free preempts
//        (below);
//      - any other engine: the head is opened when a sequence is free and
//        its reservation fits,
//          reserve(r) = prompt(r) + max_tokens(r)
//          free_positions() - sum over running r of (reserve(r) - stored(r)) >= reserve(new),
//        so an admitted request can always run to max_tokens (no preemption);
//   3. one step of at most max_step_tokens rows: a decode row per running
//      sequence whose prompt is done (its last token, RowOutput::kToken: the
//      engine samples with the sequence's SamplerConfig), then prompt chunks
//      of the sequences still prefilling, in admission order, filling the
//      rest of the budget (the chunk that ends a prompt asks for a token).
//      A request with a penalty (repetition, presence, frequency) asks for
//      RowOutput::kLogits instead and the scheduler draws with its own
//      runtime::Sampler, which has seen the prompt and every token drawn
//      (Sampler::accept): the engine's samplers see no history;
//      A request that asks for log-probabilities (GenerationParams::logprobs)
//      takes the same path: its kLogits rows give the drawn token's logprob
//      and the top alternatives of the raw distribution (logprobs.h), and
//      the host sampler draws the token, so the tokens are those the
//      engine's sampler would draw from the same logits (the CPU engine's
//      kToken rows run this very Sampler with the same seed). With
//      prompt_logprobs (completions' echo) the prompt rows score the next
//      prompt token: RowOutput::kLogprob rows (k = 0), or kLogits rows when
//      top alternatives are asked for, within the same step budget;
//   4. each sampled token: EOS/EOT -> finish "stop"; else its text goes
//      through the request's TextStream (stop strings) to the client; a stop
//      string -> "stop"; max_tokens reached -> "length". A request with
//      max_tokens 0 (only with prompt_logprobs: it scores its prompt) ends
//      "length" when its prompt is done.
// New requests therefore join the running batch between steps, and a long
// prompt is prefilled in chunks while the others keep decoding.
//
// Preemption (paging engines). Before a step, the rows each running request
// wants are granted blocks in admission order (Engine::blocks_needed against
// free_blocks()); a prompt chunk that does not fit shrinks; a request that
// gets nothing makes the newest running request give its blocks back: its
// sampler state is kept (Engine::sampler_state), its sequence closed (its
// full blocks stay cached), and it waits at the head of the queue. Resumed,
// it attaches what is still cached, recomputes the rest of its prompt and of
// the tokens it generated (prompt tokens as prompt rows, generated ones as
// decode rows, so each row takes the path it took the first time), gets its
// sampler back (Engine::restore_sampler; the scheduler's own Sampler of a
// penalty request stays with the request) and goes on: its tokens are those
// of an unpreempted run. The oldest request always gets its rows, so a
// request that fits the cache alone always finishes.
//
// submit() refuses, by throwing AdmissionError, a request that can never fit
// (400: prompt + max_tokens > min(ctx, all KV positions)), one that finds
// the queue full (429) and any request after begin_drain() (503). A request
// that only has to wait, waits. The n choices of one call (OpenAI's `n`) are
// n requests submitted together: all are queued or none (each counts against
// max_queue), each is its own sequence with its own sampler, and they share
// a RequestSignal so that one reader can wait for any of them. With a paging
// engine and the prefix cache on, a choice is admitted only once the choice
// before it has computed the shared prompt, and attaches its full blocks: the
// prompt is computed once for the n choices.
//
// Speculative requests (GenerationParams::speculative > 0) draw on the host
// like the logprobs path; while at most SchedulerOptions::speculative_max_batch
// requests run, the decode row of such a request is followed by a draft
// (prompt lookup over its prompt and output: runtime/ngram_drafter.h) as rows
// of the same step, each asking for its logits; the draws verify the draft
// (runtime::verify_draft: accepted while the sampler's draw equals it), the
// rows after the first rejection are dropped (Engine::truncate), and the
// request gets the accepted tokens and the one drawn after them: the tokens
// of ordinary decoding, one to draft + 1 per step. With paging a draft that
// does not fit the free blocks is dropped before anything is preempted.
//
// Results do not depend on what else runs (the Engine contract), so greedy
// requests give the same text alone and together (tested).
//
// Tests: tests/server/scheduler_test.cpp (a deterministic fake engine).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/engine.h"
#include "server/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace futr::server {

class Metrics;
using runtime::SamplerConfig;  // the engine's per-sequence sampler settings

enum class Finish { kNone, kStop, kLength, kCancelled, kError };
const char* to_string(Finish f);  // "" | "stop" | "length" | "cancelled" | "error"

struct GenerationParams {
  std::vector<int32_t> prompt;    // token ids, not empty
  int max_tokens = 16;            // >= 1 tokens to generate at most
  SamplerConfig sampling;         // temperature 0 = greedy
  std::vector<std::string> stop;  // stop strings (matched on the decoded text)
  // Log-probabilities (logprobs.h), of the raw distribution: -1 none; k >= 0:
  // each generated token's (Update::logprobs) with its k most likely ids.
  int logprobs = -1;
  // -1 none; k >= 0: each prompt token's from the second on (the first has
  // none), with k alternatives (Update::prompt_logprobs). max_tokens may then
  // be 0: the request only scores its prompt.
  int prompt_logprobs = -1;
  // Speculative decoding (runtime/speculative.h): k > 0 drafts up to k tokens
  // per step by prompt lookup and verifies them in the same step; the tokens
  // are exactly those without it. 0: off.
  int speculative = 0;
  // End-of-generation tokens do not end the request (benchmarks that need
  // exactly max_tokens tokens; vLLM's extra parameter of the same name): they
  // are generated, counted and decoded like any token.
  bool ignore_eos = false;
};

// Wakes the one reader of several requests (the n choices of a call): every
// change of any of them bumps the version.
class RequestSignal {
 public:
  uint64_t version() {
    std::lock_guard lk(mu_);
    return version_;
  }
  // Waits up to `timeout` for a version other than `seen`; false if none came.
  bool wait_change(uint64_t seen, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return version_ != seen; });
  }
  void notify() {
    {
      std::lock_guard lk(mu_);
      ++version_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t version_ = 0;
};

// A refusal before admission: HTTP status and OpenAI error type.
class AdmissionError : public Error {
 public:
  AdmissionError(int status, std::string type, const std::string& message)
      : Error(message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string type_;
};

// One request, shared by the scheduler (producer) and the HTTP handler
// (consumer). Thread-safe.
class Request {
 public:
  struct Update {
    std::string text;   // text produced since the previous update
    bool done = false;  // the request has ended (finish is set)
    Finish finish = Finish::kNone;
    int prompt_tokens = 0;
    int completion_tokens = 0;  // tokens generated so far (EOS/EOT not counted)
    std::string error;          // Finish::kError: what went wrong
    std::vector<TokenLogprob>
        logprobs;  // GenerationParams::logprobs: the tokens generated since the previous update
    std::vector<TokenLogprob> prompt_logprobs;  // GenerationParams::prompt_logprobs: all, in the first update
  };
  // Waits up to `timeout` for new text or the end. Returns false (and leaves
  // `u` alone) when nothing happened in time.
  bool wait(Update& u, std::chrono::milliseconds timeout);
  // The client went away: the scheduler drops the request at its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  int prompt_tokens() const { return int(params_.prompt.size()); }
  // Notified at every change of this request and of the others of its call.
  const std::shared_ptr<RequestSignal>& signal() const { return signal_; }

 private:
  friend class Scheduler;
  Request(GenerationParams p, std::shared_ptr<RequestSignal> signal)
      : params_(std::move(p)), signal_(std::move(signal)) {}
  void emit(const std::string& text, int completion_tokens, std::vector<TokenLogprob> logprobs = {});
  void set_prompt_logprobs(std::vector<TokenLogprob> logprobs);
  void end(Finish f, int completion_tokens, std::string error = {});
  void changed();  // wakes wait() and the signal (mu_ released)

  GenerationParams params_;
  std::shared_ptr<RequestSignal> signal_;
  std::chrono::steady_clock::time_point submitted_ = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;                                      // not yet taken by wait()
  std::vector<TokenLogprob> logprobs_, prompt_logprobs_;  // not yet taken by wait()
  bool done_ = false;
  bool changed_ = false;  // something new since the last wait()
  Finish finish_ = Finish::kNone;
  int completion_tokens_ = 0;
  std::string error_;
};

struct SchedulerOptions {
  int max_queue = 64;  // requests waiting for admission at most (more: 429)
  // Drafts run only while at most this many requests run: at small batch a
  // step's extra rows cost little, at large batch they take the step from
  // the others (GenerationParams::speculative).
  int speculative_max_batch = 4;
  int max_step_tokens = 0;   // rows per step; 0 = the engine's max_step_tokens
  bool prefix_cache = true;  // paging engines: attach cached prefixes (off: recompute every prompt)
  // Paging engines: a request is admitted while others run only if the free
  // blocks also cover `admission_reserve` x the blocks the running requests
  // may still grow into (the rest of their prompts, and max_tokens less what
  // they generated), so that a cache too small for every request at once
  // admits about as many as fit instead of preempting them again and again.
  // The factor in force doubles after a preemption (at most 1) and decays
  // back to this value by 1% per step (SGLang's new_token_ratio). 0: admit on
  // the prompt's blocks alone.
  double admission_reserve = 0.5;
};

class Scheduler {
 public:
  // `engine` and `tok` must outlive the scheduler; from now on only the
  // scheduler's thread calls the engine. `metrics` may be null.
  Scheduler(runtime::Engine& engine, const Tokenizer& tok, SchedulerOptions options,
            Metrics* metrics = nullptr);
  // Stops at once: requests still running or waiting end as kCancelled.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (AdmissionError: 400 never fits, 429 queue full, 503 draining).
  std::shared_ptr<Request> submit(GenerationParams params);
  // Queues the choices of one call, all or none (each checked as above; 429
  // unless the queue has room for all), sharing one RequestSignal.
  std::vector<std::shared_ptr<Request>> submit(std::vector<GenerationParams> choices);

  void begin_drain();  // refuse new requests from now on (503); the accepted ones finish
  bool draining() const { return draining_.load(); }
  void wait_idle();  // blocks until no request runs or waits
  // As wait_idle(), for at most `timeout`; false if requests still run or wait.
  bool wait_idle_for(std::chrono::duration<double> timeout);

  // The largest prompt + max_tokens a request may have: min(ctx, all KV positions).
  int64_t max_request_positions() const { return max_request_; }
  int running() const { return n_running_.load(); }
  int waiting() const { return n_waiting_.load(); }
  int preempted() const { return n_preempted_.load(); }  // given their blocks back, waiting to resume
  const runtime::EngineInfo& engine_info() const { return info_; }

 private:
  struct Active;
  void loop();
  void drop_cancelled();
  void admit();
  bool admit_paged(
      std::unique_ptr<Active>& a);  // opens a; false (a closed again) when its blocks are not free
  void run_step();
  void preempt(Active& a);
  void finish(Active& a, Finish f, std::string error = {});
  void publish();

  runtime::Engine& engine_;
  const Tokenizer& tok_;
  SchedulerOptions options_;
  Metrics* metrics_;
  runtime::EngineInfo info_;     // copied at construction
  int64_t total_positions_ = 0;  // free_positions() of the empty engine
  int64_t max_request_ = 0;
  int step_budget_ = 0;

  std::mutex mu_;                    // guards waiting_, stop_
  std::condition_variable cv_;       // new work / stop
  std::condition_variable idle_cv_;  // nothing runs or waits
  std::deque<std::shared_ptr<Request>> waiting_;
  bool stop_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<int> n_running_{0};
  std::atomic<int> n_waiting_{0};
  std::atomic<int> n_preempted_{0};
  bool paged_ = false;  // the engine pages (info().kv_block_size > 0)

  // Scheduler thread only.
  std::vector<std::unique_ptr<Active>> running_;   // in admission order (Active::order)
  std::deque<std::unique_ptr<Active>> preempted_;  // oldest first; resumed before the queue
  runtime::SeqId next_id_ = 1;
  int64_t next_order_ = 0;  // admission order of the next new request
  double reserve_ = 0;      // the admission reserve in force (SchedulerOptions::admission_reserve)
  size_t decode_rr_ = 0;    // round-robin start when decode rows exceed the budget

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace futr::server
