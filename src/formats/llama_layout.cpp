// Llama tensor slots and the shared layout check: see llama_layout.h.
#include "formats/llama_layout.h"

#include <set>

#include "core/error.h"
#include "core/text.h"

namespace futr {

const char* slot_name(LlamaSlot s) {
  switch (s) {
    case LlamaSlot::kTokEmbd: return "tok_embd";
    case LlamaSlot::kAttnNorm: return "attn_norm";
    case LlamaSlot::kWq: return "wq";
    case LlamaSlot::kWk: return "wk";
    case LlamaSlot::kWv: return "wv";
    case LlamaSlot::kWo: return "wo";
    case LlamaSlot::kFfnNorm: return "ffn_norm";
    case LlamaSlot::kGate: return "w_gate";
    case LlamaSlot::kUp: return "w_up";
    case LlamaSlot::kDown: return "w_down";
    case LlamaSlot::kOutNorm: return "out_norm";
    case LlamaSlot::kLmHead: return "lm_head";
    case LlamaSlot::kBq: return "bq";
    case LlamaSlot::kBk: return "bk";
    case LlamaSlot::kBv: return "bv";
  }
  return "?";
}

bool slot_per_layer(LlamaSlot s) {
  return s != LlamaSlot::kTokEmbd && s != LlamaSlot::kOutNorm && s != LlamaSlot::kLmHead;
}

std::vector<int64_t> slot_shape(const ModelConfig& c, LlamaSlot s) {
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), i = c.intermediate, v = c.vocab;
  switch (s) {
    case LlamaSlot::kTokEmbd: return {v, h};
    case LlamaSlot::kAttnNorm: return {h};
    case LlamaSlot::kWq: return {q, h};
    case LlamaSlot::kWk: return {kv, h};
    case LlamaSlot::kWv: return {kv, h};
    case LlamaSlot::kWo: return {h, q};
    case LlamaSlot::kFfnNorm: return {h};
    case LlamaSlot::kGate: return {i, h};
    case LlamaSlot::kUp: return {i, h};
    case LlamaSlot::kDown: return {h, i};
    case LlamaSlot::kOutNorm: return {h};
    case LlamaSlot::kLmHead: return {v, h};
    case LlamaSlot::kBq: return {q};
    case LlamaSlot::kBk: return {kv};
    case LlamaSlot::kBv: return {kv};
  }
  return {};
}

Tensor& slot_tensor(ModelWeights& w, const SlotRef& ref) {
  if (!slot_per_layer(ref.slot)) {
    switch (ref.slot) {
      case LlamaSlot::kTokEmbd: return w.tok_embd;
      case LlamaSlot::kOutNorm: return w.out_norm;
      default: return w.lm_head;
    }
  }
  FUTR_ASSERT(ref.layer >= 0 && size_t(ref.layer) < w.layers.size());
  LayerWeights& l = w.layers[size_t(ref.layer)];
  switch (ref.slot) {
    case LlamaSlot::kAttnNorm: return l.attn_norm;
    case LlamaSlot::kWq: return l.wq;
    case LlamaSlot::kWk: return l.wk;
    case LlamaSlot::kWv: return l.wv;
    case LlamaSlot::kWo: return l.wo;
    case LlamaSlot::kFfnNorm: return l.ffn_norm;
    case LlamaSlot::kGate: return l.w_gate;
    case LlamaSlot::kUp: return l.w_up;
    case LlamaSlot::kBq: return l.bq;
    case LlamaSlot::kBk: return l.bk;
    case LlamaSlot::kBv: return l.bv;
    default: return l.w_down;
  }
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool check_llama_layout(const ModelConfig& c, const std::vector<SlotTensor>& tensors,
                        const std::string& source, const std::string& config_from,
                        const std::function<std::string(const SlotRef&)>& name_of) {
  constexpr int kSlots = int(LlamaSlot::kBv) + 1;
  auto is_bias = [](LlamaSlot s) {
    return s == LlamaSlot::kBq || s == LlamaSlot::kBk || s == LlamaSlot::kBv;
  };
  // seen[slot][layer + 1]: layer -1 (global slots) at index 0.
  std::vector<std::vector<const SlotTensor*>> seen(kSlots);
  for (int s = 0; s < kSlots; ++s)
    seen[size_t(s)].assign(slot_per_layer(LlamaSlot(s)) ? size_t(c.n_layers) : 1, nullptr);
  for (const SlotTensor& t : tensors) {
    const bool per_layer = slot_per_layer(t.ref.slot);
    if (per_layer)
      FUTR_CHECK(t.ref.layer >= 0 && t.ref.layer < c.n_layers,
                 "{}: tensor '{}' belongs to layer {}, but the model has {} layers", source,
                 printable(t.name, 200), t.ref.layer, c.n_layers);
    FUTR_CHECK(!is_bias(t.ref.slot) || c.qkv_bias,
               "{}: tensor '{}' is a projection bias, which the {} architecture does not have", source,
               printable(t.name, 200), c.arch);
    const SlotTensor*& slot = seen[size_t(t.ref.slot)][per_layer ? size_t(t.ref.layer) : 0];
    FUTR_CHECK(slot == nullptr, "{}: tensors '{}' and '{}' both provide {}{}", source, slot ? slot->name : "",
               printable(t.name, 200), slot_name(t.ref.slot),
               per_layer ? " of layer " + std::to_string(t.ref.layer) : std::string());
    slot = &t;
    const std::vector<int64_t> want = slot_shape(c, t.ref.slot);
    FUTR_CHECK(t.shape == want, "{}: tensor '{}' has shape {}, expected {} from {}", source,
               printable(t.name, 200), shape_string(t.shape), shape_string(want), config_from);
  }
  for (int s = 0; s < kSlots; ++s) {
    if (LlamaSlot(s) == LlamaSlot::kLmHead || (is_bias(LlamaSlot(s)) && !c.qkv_bias)) continue;
    for (size_t l = 0; l < seen[size_t(s)].size(); ++l)
      FUTR_CHECK(seen[size_t(s)][l] != nullptr, "{}: missing tensor '{}'", source,
                 name_of(SlotRef{LlamaSlot(s), slot_per_layer(LlamaSlot(s)) ? int(l) : -1}));
  }
  return seen[size_t(LlamaSlot::kLmHead)][0] != nullptr;
}

int parse_layer_index(std::string_view s, std::string_view& rest) {
  size_t n = 0;
  int v = 0;
  while (n < s.size() && n < 6 && s[n] >= '0' && s[n] <= '9') v = v * 10 + (s[n++] - '0');
  if (n == 0 || (n < s.size() && s[n] >= '0' && s[n] <= '9')) return -1;
  if (n > 1 && s[0] == '0') return -1;  // no leading zeros: "blk.01" is not layer 1
  rest = s.substr(n);
  return v;
}

}  // namespace futr
