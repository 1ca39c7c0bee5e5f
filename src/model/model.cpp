#include "model/model.h"

namespace futr {

int64_t Model::parameter_count() const {
  // An empty Tensor (an absent lm_head) has shape {} and numel() 1: count data instead.
  auto count = [](const Tensor& t) { return int64_t(t.data.size()); };
  int64_t n = count(weights.tok_embd) + count(weights.out_norm) + count(weights.lm_head);
  for (const auto& l : weights.layers) {
    for (const Tensor* t :
         {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down})
      n += count(*t);
  }
  return n;
}

int32_t Model::sampleable_vocab() const {
  const size_t known = tokenizer.tokens.size();
  return known > 0 && known < size_t(config.vocab) ? int32_t(known) : config.vocab;
}

}  // namespace futr
