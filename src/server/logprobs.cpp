// Log-probabilities of the server's answers (see logprobs.h).
#include "server/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/text.h"

namespace futr::server {

using json = nlohmann::json;

double log_sum_exp(std::span<const float> z) {
  // runtime::token_nll's loop, so that -(lse - z_t) has its bits.
  double mx = -INFINITY;
  for (float v : z) mx = std::max(mx, double(v));
  double sum = 0.0;
  for (float v : z) sum += std::exp(double(v) - mx);
  return mx + std::log(sum);
}

TokenLogprob token_logprob(std::span<const float> z, int32_t token, int k, int32_t limit) {
  FUTR_CHECK(token >= 0 && size_t(token) < z.size(), "logprobs: token {} outside the logits ({})", token,
             z.size());
  const double lse = log_sum_exp(z);
  TokenLogprob e;
  e.token = token;
  e.logprob = -(lse - double(z[size_t(token)]));
  const int32_t n = limit > 0 ? std::min<int32_t>(limit, int32_t(z.size())) : int32_t(z.size());
  k = std::min(k, int(n));
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), 0);
    // Descending logit, the lower id first among ties (NaN never ranks first).
    auto before = [&](int32_t a, int32_t b) {
      const float za = z[size_t(a)], zb = z[size_t(b)];
      if (std::isnan(za) != std::isnan(zb)) return std::isnan(zb);
      return za > zb || (!(za < zb) && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
    e.top.reserve(size_t(k));
    for (int i = 0; i < k; ++i) e.top.push_back({ids[size_t(i)], -(lse - double(z[size_t(ids[size_t(i)])]))});
  }
  return e;
}

std::string token_string(const Tokenizer& tok, int32_t id) {
  const std::string& p = tok.piece(id);
  std::string out;
  for (size_t i = 0; i < p.size();) {
    const size_t n = detail::utf8_len(p, i);
    if (n > 0) {
      out.append(p, i, n);
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", uint8_t(p[i]));
      ++i;
    }
  }
  return out;
}

namespace {

// JSON has no infinity: -inf is -9999.0 (OpenAI, vLLM); NaN (broken logits) is null.
json number(double v) {
  if (std::isnan(v)) return nullptr;
  return std::max(v, -9999.0);
}

json bytes_of(const std::string& piece) {
  json b = json::array();
  for (char c : piece) b.push_back(int(uint8_t(c)));
  return b;
}

// Unicode code points in valid UTF-8 text: the bytes that start one.
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xc0) != 0x80;
  return n;
}

}  // namespace

json LogprobsWriter::add(std::span<const TokenLogprob> entries) {
  if (chat_) {
    json content = json::array();
    for (const TokenLogprob& e : entries) {
      json top = json::array();
      for (size_t i = 0; i < e.top.size() && int(i) < top_; ++i)
        top.push_back({{"token", token_string(*tok_, e.top[i].token)},
                       {"logprob", number(e.top[i].logprob)},
                       {"bytes", bytes_of(tok_->piece(e.top[i].token))}});
      content.push_back({{"token", token_string(*tok_, e.token)},
                         {"logprob", number(e.logprob)},
                         {"bytes", bytes_of(tok_->piece(e.token))},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const TokenLogprob& e : entries) {
    const std::string s = token_string(*tok_, e.token);
    tokens.push_back(s);
    text_offset.push_back(offset_);
    offset_ += code_points(decoder_.push(e.token));
    if (!e.has_logprob) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(number(e.logprob));
    json top = json::object();
    for (size_t i = 0; i < e.top.size() && int(i) < top_; ++i)
      top[token_string(*tok_, e.top[i].token)] = number(e.top[i].logprob);
    top[s] = number(e.logprob);  // the chosen token is always listed (up to k + 1 keys)
    top_logprobs.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

}  // namespace futr::server
