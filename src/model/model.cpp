#include "model/model.h"

namespace futr {

int64_t Model::parameter_count() const {
  int64_t n = weights.tok_embd.numel() + weights.out_norm.numel() + weights.lm_head.numel();
  for (const auto& l : weights.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.w_gate,
                            &l.w_up, &l.w_down})
      n += t->numel();
  }
  return n;
}

}  // namespace futr
