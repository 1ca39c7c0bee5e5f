// Projection names and lookups (see projection.h).
#include "model/projection.h"

#include <charconv>

#include <fmt/format.h>

#include "core/error.h"

namespace futr {

namespace {

const char* suffix(Projection p) {
  switch (p) {
    case Projection::kQ: return "attn_q";
    case Projection::kK: return "attn_k";
    case Projection::kV: return "attn_v";
    case Projection::kO: return "attn_output";
    case Projection::kGate: return "ffn_gate";
    case Projection::kUp: return "ffn_up";
    case Projection::kDown: return "ffn_down";
    case Projection::kLmHead: return "output";
  }
  return "?";
}

const char* suffix(InputSite s) {
  switch (s) {
    case InputSite::kAttnIn: return "attn_in";
    case InputSite::kOIn: return "o_in";
    case InputSite::kFfnIn: return "ffn_in";
    case InputSite::kDownIn: return "down_in";
  }
  return "?";
}

// "blk.<l>.<rest>" -> (l, rest); false for other names.
bool split_block(const std::string& name, int& layer, std::string& rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return false;
  const char* b = name.data() + 4;
  const char* e = name.data() + dot;
  const auto [p, ec] = std::from_chars(b, e, layer);
  if (ec != std::errc() || p != e || layer < 0) return false;
  rest = name.substr(dot + 1);
  return true;
}

}  // namespace

InputSite input_site(Projection p) {
  switch (p) {
    case Projection::kQ:
    case Projection::kK:
    case Projection::kV: return InputSite::kAttnIn;
    case Projection::kO: return InputSite::kOIn;
    case Projection::kGate:
    case Projection::kUp: return InputSite::kFfnIn;
    case Projection::kDown: return InputSite::kDownIn;
    case Projection::kLmHead: break;
  }
  fail("the LM head reads no layer input site");
}

bool records_site(Projection p) {
  return p == Projection::kQ || p == Projection::kO || p == Projection::kGate || p == Projection::kDown;
}

bool reads_rmsnorm(Projection p) {
  return p == Projection::kQ || p == Projection::kK || p == Projection::kV || p == Projection::kGate ||
         p == Projection::kUp;
}

std::string projection_name(ProjId id) {
  if (id.proj == Projection::kLmHead) return "output";
  return fmt::format("blk.{}.{}", id.layer, suffix(id.proj));
}

ProjId parse_projection_name(const std::string& name) {
  if (name == "output") return {};
  int layer = 0;
  std::string rest;
  if (split_block(name, layer, rest))
    for (Projection p : kLayerProjections)
      if (rest == suffix(p)) return {layer, p};
  fail(
      "'{}' is not a projection name (blk.<layer>.attn_q|attn_k|attn_v|attn_output|ffn_gate|"
      "ffn_up|ffn_down, output)",
      name);
}

std::string site_name(SiteId s) { return fmt::format("blk.{}.{}", s.layer, suffix(s.site)); }

SiteId parse_site_name(const std::string& name) {
  int layer = 0;
  std::string rest;
  if (split_block(name, layer, rest))
    for (InputSite s : {InputSite::kAttnIn, InputSite::kOIn, InputSite::kFfnIn, InputSite::kDownIn})
      if (rest == suffix(s)) return {layer, s};
  fail("'{}' is not an activation site name (blk.<layer>.attn_in|o_in|ffn_in|down_in)", name);
}

const Tensor& projection_weight(const Model& m, ProjId id) {
  if (id.proj == Projection::kLmHead) return m.weights.output();
  FUTR_CHECK(id.layer >= 0 && size_t(id.layer) < m.weights.layers.size(), "{}: no layer {}",
             projection_name(id), id.layer);
  const LayerWeights& L = m.weights.layers[size_t(id.layer)];
  switch (id.proj) {
    case Projection::kQ: return L.wq;
    case Projection::kK: return L.wk;
    case Projection::kV: return L.wv;
    case Projection::kO: return L.wo;
    case Projection::kGate: return L.w_gate;
    case Projection::kUp: return L.w_up;
    case Projection::kDown: return L.w_down;
    case Projection::kLmHead: break;
  }
  return m.weights.output();
}

const Tensor* rmsnorm_gain(const Model& m, ProjId id) {
  if (!reads_rmsnorm(id.proj)) return nullptr;
  const LayerWeights& L = m.weights.layers.at(size_t(id.layer));
  return input_site(id.proj) == InputSite::kAttnIn ? &L.attn_norm : &L.ffn_norm;
}

}  // namespace futr
