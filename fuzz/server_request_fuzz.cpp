// libFuzzer target: request bodies of futr serve's /v1/completions and
// /v1/chat/completions, through the code the server runs for them without a
// model: server::parse_request() (the one JSON entry point, every field's
// validation, the prompt encoded, the chat template rendered), the error body
// a refusal is answered with, and for an accepted request what generation
// does with its parameters: a Sampler built from them drawing a few tokens
// from logits (moderate, large and masked values), the tokens through the
// server's TextStream (detokenizer + stop strings) and the response bodies.
//
// Input: the body. Each body is parsed as a completions request and as a chat
// request against a ChatML (SmolLM2) tokenizer, and as a chat request against
// a Llama-3.1 one (synthetic byte-level tokenizers: one token per byte, a few
// merges, the markers; 512 positions per request).
//
// The server's contract, checked besides "only futr::Error may come out":
//  - a refusal is an ApiError with status 400 or 404 whose message is short
//    (<= 1024 bytes whatever the body: clipped echoes) and whose error body
//    serializes (valid UTF-8); a model-side futr::Error is answered 400 with
//    its message, which must serialize too;
//  - an accepted request has a prompt of ids in the vocabulary, max_tokens >= 1
//    (0 only when it scores its prompt: echo), prompt + max_tokens within the
//    context, n and logprobs in their ranges, sampling parameters the sampler
//    accepts; sampling never fails on finite logits (it would be a 500), every
//    drawn id is drawable, and the streamed text and response bodies (with
//    the choices' logprobs of those logits) serialize.
// A violation calls __builtin_trap(). Seeds: fuzz/corpus/server_request.
// See fuzz/README.md.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/sampler.h"
#include "server/api.h"
#include "server/text_stream.h"
#include "tokenizer/chat.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace futr;
using namespace futr::server;

const char* kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' "
    "}}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const char* kLlama31 =
    "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"26 Jul 2024\" %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = \"\" %}{%- endif %}"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: December "
    "2023\\n\" }}"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}{{- system_message }}{{- \"<|eot_id|>\" }}"
    "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

constexpr int64_t kPositions = 512;
constexpr size_t kMaxMessage = 1024;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Served {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<ChatTemplate> chat;
  ApiContext ctx;
};

Served make_served(bool llama3) {
  Served s;
  TokenizerSpec spec = test::alphabet_spec(
      {{"\n", "\n"}, {" ", "t"}, {"h", "e"}, {" t", "he"}, {"u", "s"}, {"e", "r"}},
      llama3 ? "llama3" : "smollm",
      llama3 ? std::vector<std::pair<std::string, int32_t>>{{"<|begin_of_text|>", 3},
                                                            {"<|start_header_id|>", 3},
                                                            {"<|end_header_id|>", 3},
                                                            {"<|eot_id|>", 3}}
             : std::vector<std::pair<std::string, int32_t>>{{"<|im_start|>", 3}, {"<|im_end|>", 3}});
  spec.chat_template = llama3 ? kLlama31 : kSmolLM2;
  spec.eos = int32_t(spec.tokens.size()) - 1;  // <|eot_id|> / <|im_end|>
  if (llama3) {
    spec.bos = int32_t(spec.tokens.size()) - 4;
    spec.add_bos = true;
  }
  s.tok = std::make_unique<Tokenizer>(spec);
  s.chat = std::make_unique<ChatTemplate>(ChatTemplate::for_tokenizer(*s.tok));
  s.ctx.tok = s.tok.get();
  s.ctx.chat = s.chat.get();
  s.ctx.model = "futr-fuzz";
  s.ctx.max_request_positions = kPositions;
  return s;
}

// What generation does with an accepted request, without an engine.
void generate(const Tokenizer& tok, Endpoint e, const ApiRequest& r) {
  const GenerationParams& g = r.gen;
  check(!g.prompt.empty() && g.max_tokens >= (g.prompt_logprobs >= 0 ? 0 : 1));
  check(r.n >= 1 && r.n <= kMaxChoices && int(choice_params(r).size()) == r.n);
  check(g.logprobs == r.logprobs && r.logprobs >= -1 && r.logprobs <= kMaxTopLogprobs);
  check(g.prompt_logprobs >= -1 && g.prompt_logprobs <= kMaxTopLogprobs && (r.echo || g.prompt_logprobs < 0));
  check(int64_t(g.prompt.size()) + g.max_tokens <= kPositions);
  for (int32_t id : g.prompt) check(id >= 0 && id < tok.vocab_size());
  runtime::validate_sampler_config(g.sampling, "");  // a futr::Error here escapes: a bug

  runtime::Sampler sampler(g.sampling);
  sampler.limit_vocab(tok.vocab_size());
  for (int32_t id : g.prompt) sampler.accept(id, false);
  TextStream text(tok, g.stop);
  std::string out;
  ChoiceOutput choice;
  for (int32_t id : g.prompt) choice.prompt_logprobs.push_back({id, -1.0, true, {}});
  // Logits as engines give them: moderate, then large (1e4), with the ids
  // past the tokenizer's vocabulary at -inf (a padded LM head masks them).
  std::mt19937_64 rng(g.sampling.seed);
  const int steps = std::min(g.max_tokens, 6);
  for (int step = 0; step < steps && !text.stopped(); ++step) {
    const float scale = step % 3 == 2 ? 1e4f : 8.0f;
    std::vector<float> logits(size_t(tok.vocab_size()) + 8, -INFINITY);
    for (int32_t i = 0; i < tok.vocab_size(); ++i)
      logits[size_t(i)] = scale * (float(rng() >> 40) * 0x1p-24f * 2.0f - 1.0f);
    const int32_t id = sampler.sample(logits);  // a futr::Error here escapes: a bug
    check(id >= 0 && id < tok.vocab_size());
    if (r.logprobs >= 0) {
      choice.logprobs.push_back(token_logprob(logits, id, r.logprobs, tok.vocab_size()));
      check(choice.logprobs.back().top.size() == size_t(r.logprobs));
    }
    sampler.accept(id, true);
    out += text.push(id);
  }
  out += text.finish();
  const ResponseMeta meta{"cmpl-fuzz", 0, "futr-fuzz"};
  (void)full_response(e, meta, out, Finish::kLength, int(g.prompt.size()), steps).dump();
  (void)stream_chunk(e, meta, out, Finish::kStop, true).dump();
  choice.text = out;
  choice.finish = Finish::kLength;
  choice.completion_tokens = steps;
  (void)full_response(r, &tok, meta, {&choice, 1}).dump();
  if (r.logprobs >= 0) {
    LogprobsWriter w(tok, e == Endpoint::kChat, r.logprobs);
    (void)stream_chunk(e, meta, out, Finish::kNone, false, r.n - 1, w.add(choice.logprobs)).dump();
  }
}

void serve(const Served& s, Endpoint e, std::string_view body) {
  ApiRequest r;
  try {
    r = parse_request(e, body, s.ctx);
  } catch (const ApiError& err) {
    check(err.status() == 400 || err.status() == 404);
    check(std::string_view(err.what()).size() <= kMaxMessage);
    (void)err.body().dump();
    return;
  } catch (const Error& err) {  // a model-side refusal: 400 with the message
    check(std::string_view(err.what()).size() <= kMaxMessage);
    (void)error_body(err.what(), "invalid_request_error").dump();
    return;
  }
  generate(*s.tok, e, r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Served chatml = make_served(false);
  static const Served llama3 = make_served(true);
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  serve(chatml, Endpoint::kCompletions, body);
  serve(chatml, Endpoint::kChat, body);
  serve(llama3, Endpoint::kChat, body);
  return 0;
}
