// The .futr model file: writer and reader (see futr_file.h).
#include "formats/futr_file.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/io.h"
#include "core/json.h"
#include "core/numeric.h"
#include "core/text.h"
#include "quant/delayed_scaling.h"
#include "quant/fp8_weights.h"
#include "quant/int4_pack.h"
#include "quant/int4_quant.h"
#include "tokenizer/tokenizer.h"

namespace futr {

namespace {

using nlohmann::json;

constexpr uint64_t kAlign = 64;
constexpr uint64_t kFixedHeader = 24;
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// ---- writer -------------------------------------------------------------------------------

// One blob of the data section.
struct Blob {
  std::vector<uint8_t> bytes;
};

class Layout {
 public:
  // Adds a blob, returns its offset in the data section.
  uint64_t add(std::vector<uint8_t> bytes) {
    const uint64_t off = size_;
    size_ = align_up(size_ + bytes.size());
    blobs_.push_back({std::move(bytes)});
    offsets_.push_back(off);
    return off;
  }
  uint64_t size() const { return size_; }
  const std::vector<Blob>& blobs() const { return blobs_; }
  const std::vector<uint64_t>& offsets() const { return offsets_; }

 private:
  uint64_t size_ = 0;
  std::vector<Blob> blobs_;
  std::vector<uint64_t> offsets_;
};

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> bf16_bytes(const Tensor& t) {
  std::vector<uint16_t> h(t.data.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = float_to_bf16(t.data[i]);
  return as_bytes(h);
}

// Strings as a blob: for each, u32 length then the bytes.
std::vector<uint8_t> strings_blob(const std::vector<std::string>& v) {
  std::vector<uint8_t> b;
  for (const std::string& s : v) {
    const uint32_t n = uint32_t(s.size());
    b.insert(b.end(), reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 4);
    b.insert(b.end(), s.begin(), s.end());
  }
  return b;
}

json config_json(const ModelConfig& c) {
  json j;
  j["arch"] = c.arch;
  j["name"] = c.name;
  j["hidden"] = c.hidden;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate"] = c.intermediate;
  j["vocab"] = c.vocab;
  j["max_context"] = c.max_context;
  j["rope_theta"] = c.rope_theta;
  j["rms_eps"] = c.rms_eps;
  j["tied_embeddings"] = c.tied_embeddings;
  j["qkv_bias"] = c.qkv_bias;  // version 2
  j["rope_scaling"] = {{"type", c.rope_scaling.type},
                       {"factor", c.rope_scaling.factor},
                       {"low_freq_factor", c.rope_scaling.low_freq_factor},
                       {"high_freq_factor", c.rope_scaling.high_freq_factor},
                       {"original_max_position", c.rope_scaling.original_max_position}};
  return j;
}

json tensor_entry(const std::string& name, const char* kind, std::vector<int64_t> shape, uint64_t off,
                  uint64_t bytes) {
  return json{{"name", name}, {"kind", kind}, {"shape", shape}, {"offset", off}, {"bytes", bytes}};
}

// Header and blobs of a whole file.
std::pair<json, Layout> build(const Model& model, const std::vector<const quant::QuantizedWeights*>& sets,
                              const FutrWriteOptions& o) {
  FUTR_CHECK(!sets.empty(), ".futr writer: no quantized weights given");
  const ModelConfig& c = model.config;
  c.validate(model.path.empty() ? std::string("model") : model.path);
  Layout data;
  json tensors = json::array();
  auto add_bf16 = [&](const std::string& name, const Tensor& t) {
    const uint64_t off = data.add(bf16_bytes(t));
    tensors.push_back(tensor_entry(name, "bf16", t.shape, off, uint64_t(t.data.size()) * 2));
  };
  add_bf16("token_embd", model.weights.tok_embd);
  add_bf16("output_norm", model.weights.out_norm);
  if (!c.tied_embeddings) add_bf16("output", model.weights.lm_head);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = model.weights.layers.at(size_t(l));
    add_bf16(fmt::format("blk.{}.attn_norm", l), L.attn_norm);
    add_bf16(fmt::format("blk.{}.ffn_norm", l), L.ffn_norm);
    if (c.qkv_bias)  // FP32, as every engine adds them (version 2)
      for (const auto& [name, t] :
           {std::pair{"attn_q.bias", &L.bq}, {"attn_k.bias", &L.bk}, {"attn_v.bias", &L.bv}}) {
        FUTR_CHECK(!t->data.empty(), ".futr writer: blk.{}.{} is missing", l, name);
        const uint64_t off = data.add(as_bytes(t->data));
        tensors.push_back(tensor_entry(fmt::format("blk.{}.{}", l, name), "f32", t->shape, off,
                                       uint64_t(t->data.size()) * 4));
      }
  }
  json formats = json::array();
  for (const quant::QuantizedWeights* set : sets) {
    FUTR_CHECK(set != nullptr && set->format != WeightFormat::kFp32, ".futr writer: bad weight set");
    json f{{"format", to_string(set->format)}, {"method", set->method}};
    if (!set->fp8_initial_amax.empty()) {
      json amax = json::object();  // by site name, docs/FORMATS.md
      for (const auto& [site, a] : set->fp8_initial_amax) {
        // What the reader accepts (never a file that fails to load).
        FUTR_CHECK(a >= quant::kFp8MinCalibratedAmax && a <= quant::kFp8MaxCalibratedAmax,
                   ".futr writer: calibrated amax {} of site '{}' is outside [{}, {}]", a, site_name(site),
                   quant::kFp8MinCalibratedAmax, quant::kFp8MaxCalibratedAmax);
        amax[site_name(site)] = a;
      }
      f["fp8_initial_amax"] = amax;
    }
    formats.push_back(f);
    for (int l = 0; l < c.n_layers; ++l)
      for (Projection p : kLayerProjections) {
        const std::string name = projection_name({l, p});
        const quant::QuantizedTensor& t = set->at({l, p});
        FUTR_CHECK(t.format == set->format, ".futr writer: '{}' is {} in a {} set", name, to_string(t.format),
                   to_string(set->format));
        json e;
        if (t.format == WeightFormat::kInt4) {
          const quant::Int4Packed p = quant::pack_int4(t.int4);
          const uint64_t wb = p.weights.size(), sb = p.scales.size() * 2;
          const uint64_t w_off = data.add(p.weights);
          const uint64_t s_off = data.add(as_bytes(p.scales));
          e = tensor_entry(name, "int4", {t.n, t.k}, w_off, wb);
          e["group"] = t.int4.group;
          e["scale_offset"] = s_off;
          e["scale_bytes"] = sb;
        } else if (t.format == WeightFormat::kFp8) {
          for (float sc : t.fp8.scale)
            FUTR_CHECK(sc >= quant::kFp8MinWeightScale && sc <= quant::kFp8MaxWeightScale,
                       ".futr writer: '{}' has FP8 scale {}, outside [{}, {}]", name, sc,
                       quant::kFp8MinWeightScale, quant::kFp8MaxWeightScale);
          const uint64_t w_off = data.add(t.fp8.w);
          const uint64_t s_off = data.add(as_bytes(t.fp8.scale));
          e = tensor_entry(name, "e4m3", {t.n, t.k}, w_off, t.fp8.w.size());
          e["folded_gain"] = t.fp8.folded_gain;
          e["scale_offset"] = s_off;
          e["scale_bytes"] = uint64_t(t.fp8.scale.size()) * 4;
        } else {
          const uint64_t off = data.add(as_bytes(t.bf16));
          e = tensor_entry(name, "bf16", {t.n, t.k}, off, uint64_t(t.bf16.size()) * 2);
        }
        e["format"] = to_string(t.format);
        e["method"] = t.method;
        tensors.push_back(e);
      }
  }
  const TokenizerSpec& tk = model.tokenizer;
  json tok;
  tok["model"] = tk.model;
  tok["pre"] = tk.pre;
  const uint64_t t_off = data.add(strings_blob(tk.tokens));
  tok["tokens"] = {
      {"count", tk.tokens.size()}, {"offset", t_off}, {"bytes", data.blobs().back().bytes.size()}};
  const uint64_t m_off = data.add(strings_blob(tk.merges));
  tok["merges"] = {
      {"count", tk.merges.size()}, {"offset", m_off}, {"bytes", data.blobs().back().bytes.size()}};
  const uint64_t c_off = data.add(strings_blob({tk.chat_template}));
  tok["chat_template"] = {{"count", 1}, {"offset", c_off}, {"bytes", data.blobs().back().bytes.size()}};
  tok["token_types"] = tk.token_types;
  tok["bos"] = tk.bos;
  tok["eos"] = tk.eos;
  tok["unk"] = tk.unk;
  tok["pad"] = tk.pad;
  tok["extra_eos"] = tk.extra_eos;
  tok["add_bos"] = tk.add_bos;
  tok["ignore_merges"] = tk.ignore_merges ? json(*tk.ignore_merges) : json(nullptr);
  // Version 2: SentencePiece's scores and dummy prefix.
  if (!tk.scores.empty()) {
    const uint64_t s_off = data.add(as_bytes(tk.scores));
    tok["scores"] = {{"count", tk.scores.size()}, {"offset", s_off}, {"bytes", tk.scores.size() * 4}};
  }
  tok["add_space_prefix"] = tk.add_space_prefix;
  tok["space_prefix_first_only"] = tk.space_prefix_first_only;
  tok["space_prefix_unless_space"] = tk.space_prefix_unless_space;

  json h;
  h["format"] = "futr";
  h["version"] = o.version;
  h["config"] = config_json(c);
  h["tokenizer"] = tok;
  h["weight_sets"] = formats;
  h["tensors"] = tensors;
  h["provenance"] = o.provenance;
  return {h, std::move(data)};
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i)));
}

// The oldest reader that reads `header` right: 2 for what version 1 did not
// hold (q/k/v biases, a SentencePiece tokenizer's scores and dummy prefix:
// version 1 readers would run without them), else 1.
uint32_t min_reader_for(const json& header) {
  const bool v2 =
      header["config"].value("qkv_bias", false) || header["tokenizer"].value("model", "") == "llama";
  return v2 ? 2 : 1;
}

std::vector<uint8_t> prefix_bytes(const json& header, const FutrWriteOptions& o) {
  const std::string js = header.dump(-1, ' ', false, json::error_handler_t::strict);
  std::vector<uint8_t> b(kFutrMagic, kFutrMagic + 8);
  put_u32(b, o.version);
  put_u32(b, o.min_reader_version > 0 ? o.min_reader_version : min_reader_for(header));
  put_u64(b, js.size());
  b.insert(b.end(), js.begin(), js.end());
  b.resize(size_t(align_up(b.size())), 0);
  return b;
}

// ---- reader helpers -------------------------------------------------------------------------

uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

template <class T>
std::vector<T> from_bytes(std::span<const uint8_t> b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

// ---- public writer ------------------------------------------------------------------------

std::vector<uint8_t> futr_bytes(const Model& model, const std::vector<const quant::QuantizedWeights*>& sets,
                                const FutrWriteOptions& o) {
  auto [header, data] = build(model, sets, o);
  std::vector<uint8_t> out = prefix_bytes(header, o);
  const size_t base = out.size();
  out.resize(base + size_t(data.size()), 0);
  for (size_t i = 0; i < data.blobs().size(); ++i) {
    const auto& b = data.blobs()[i].bytes;
    if (!b.empty()) std::memcpy(out.data() + base + data.offsets()[i], b.data(), b.size());
  }
  return out;
}

void write_futr(const std::filesystem::path& path, const Model& model,
                const std::vector<const quant::QuantizedWeights*>& sets, const FutrWriteOptions& o) {
  auto [header, data] = build(model, sets, o);
  const std::vector<uint8_t> prefix = prefix_bytes(header, o);
  // The output must be a new or a regular file (never a device, FIFO or
  // directory that a rename would replace). It is written under a unique
  // temporary name beside it (core/io.h TempOutput: never through a planted
  // link, removed on any failure and on SIGINT/SIGTERM), then renamed.
  const std::string k = file_kind(path);
  FUTR_CHECK(k == "missing" || k == "regular file", "{}: is a {}; the .futr output must be a regular file",
             path.string(), k);
  TempOutput f(path);
  f.write(prefix.data(), prefix.size());
  const int64_t total = int64_t(data.size());
  uint64_t pos = 0;
  static const std::vector<char> zeros(kAlign, 0);
  for (size_t i = 0; i < data.blobs().size(); ++i) {
    FUTR_ASSERT(data.offsets()[i] >= pos && data.offsets()[i] - pos < kAlign);
    f.write(zeros.data(), data.offsets()[i] - pos);
    const auto& b = data.blobs()[i].bytes;
    f.write(b.data(), b.size());
    pos = data.offsets()[i] + b.size();
    if (o.progress) o.progress(int64_t(pos), total);
  }
  f.write(zeros.data(), data.size() - pos);
  if (o.progress) o.progress(total, total);
  f.commit();
}

bool is_futr_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::memcmp(magic, kFutrMagic, 8) == 0;
}

// ---- reader ---------------------------------------------------------------------------------

FutrFile::FutrFile(const std::filesystem::path& path)
    : name_(path.string()), file_(std::make_shared<MappedFile>(path)), bytes_(file_->bytes()) {
  parse();
}

FutrFile::FutrFile(std::span<const uint8_t> bytes, std::string name) : name_(std::move(name)), bytes_(bytes) {
  parse();
}

void FutrFile::parse() {
  const uint64_t size = bytes_.size();
  FUTR_CHECK(size >= 8 && std::memcmp(bytes_.data(), kFutrMagic, 8) == 0, "{}: not a .futr file (bad magic)",
             name_);
  FUTR_CHECK(size >= kFixedHeader, "{}: truncated .futr header ({} bytes)", name_, size);
  version_ = get_u32(bytes_.data() + 8);
  const uint32_t min_reader = get_u32(bytes_.data() + 12);
  const uint64_t hbytes = get_u64(bytes_.data() + 16);
  FUTR_CHECK(version_ >= 1, "{}: .futr format version {} is invalid", name_, version_);
  FUTR_CHECK(min_reader <= kFutrFormatVersion,
             "{}: .futr format version {} needs a reader of version >= {}; this futr reads versions "
             "1..{}: update futr (or re-run futr quantize with this version)",
             name_, version_, min_reader, kFutrFormatVersion);
  FUTR_CHECK(hbytes <= kMaxHeaderBytes, "{}: .futr header of {} bytes is impossible", name_, hbytes);
  FUTR_CHECK(hbytes <= size - kFixedHeader, "{}: truncated .futr file: header of {} bytes, file of {}", name_,
             hbytes, size);
  data_ = align_up(kFixedHeader + hbytes);
  FUTR_CHECK(data_ <= size, "{}: truncated .futr file (data section past the end)", name_);
  header_ = parse_json_document(
      std::string_view(reinterpret_cast<const char*>(bytes_.data()) + kFixedHeader, size_t(hbytes)),
      name_ + ": the .futr header");
  try {
    FUTR_CHECK(header_.is_object() && header_.contains("format") && header_["format"] == "futr",
               "{}: the .futr header does not say format \"futr\"", name_);
    FUTR_CHECK(header_.contains("tensors") && header_["tensors"].is_array(),
               "{}: .futr header has no tensor list", name_);
    check_blobs();
  } catch (const json::exception& e) {
    fail("{}: bad .futr header: {}", name_, e.what());
  }
}

// Every blob the header names (tensor data and scales, tokenizer strings) lies
// inside the data section at a 64-byte aligned offset, and no two overlap; no
// tensor (name, format) appears twice. Checked once, before any data is read.
void FutrFile::check_blobs() const {
  struct Range {
    uint64_t off, bytes;
    std::string what;
  };
  std::vector<Range> ranges;
  const uint64_t avail = bytes_.size() - data_;
  auto add = [&](const json& e, const char* off_key, const char* size_key, const std::string& what) {
    FUTR_CHECK(e.contains(off_key) && e.contains(size_key), "{}: {} has no '{}' / '{}'", name_, what, off_key,
               size_key);
    const uint64_t off = json_uint(e[off_key], fmt::format("{}: {} {}", name_, what, off_key));
    const uint64_t bytes = json_uint(e[size_key], fmt::format("{}: {} {}", name_, what, size_key));
    FUTR_CHECK(off <= avail && bytes <= avail - off,
               "{}: {} (offset {}, {} bytes) lies past the end of the file", name_, what, off, bytes);
    FUTR_CHECK(off % kAlign == 0, "{}: {} starts at offset {}, not a multiple of {}", name_, what, off,
               kAlign);
    if (bytes > 0) ranges.push_back({off, bytes, what});
  };
  std::map<std::string, int> seen;
  for (const json& t : header_["tensors"]) {
    FUTR_CHECK(t.is_object() && t.contains("name") && t["name"].is_string(),
               "{}: a tensor entry has no name: {}", name_, json_snippet(t));
    const std::string name = t["name"].get<std::string>();
    FUTR_CHECK(!t.contains("format") || t["format"].is_string(), "{}: tensor '{}' has a non-string format",
               name_, printable(name, 100));
    const std::string key = t.contains("format") ? name + "." + t["format"].get<std::string>() : name;
    FUTR_CHECK(seen.emplace(key, 0).second, "{}: tensor '{}' appears twice in the header", name_,
               printable(key, 100));
    const std::string what = "tensor '" + printable(name, 100) + "'";
    add(t, "offset", "bytes", what);
    if (t.contains("scale_offset") || t.contains("scale_bytes"))
      add(t, "scale_offset", "scale_bytes", what + " scales");
  }
  if (header_.contains("tokenizer") && header_["tokenizer"].is_object())
    for (const char* k : {"tokens", "merges", "chat_template", "scores"}) {
      const json& tk = header_["tokenizer"];
      if (tk.contains(k) && tk[k].is_object()) add(tk[k], "offset", "bytes", fmt::format("tokenizer {}", k));
    }
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) { return x.off < y.off; });
  for (size_t i = 1; i < ranges.size(); ++i)
    FUTR_CHECK(ranges[i].off >= ranges[i - 1].off + ranges[i - 1].bytes,
               "{}: {} (offset {}, {} bytes) overlaps {} (offset {}, {} bytes)", name_, ranges[i].what,
               ranges[i].off, ranges[i].bytes, ranges[i - 1].what, ranges[i - 1].off, ranges[i - 1].bytes);
}

std::span<const uint8_t> FutrFile::blob(const json& t, const char* off_key, const char* size_key,
                                        uint64_t expect) const {
  const uint64_t off = json_uint(t.at(off_key), fmt::format("{}: {}", name_, off_key));
  const uint64_t bytes = json_uint(t.at(size_key), fmt::format("{}: {}", name_, size_key));
  const std::string name = printable(t.value("name", std::string("?")), 100);
  FUTR_CHECK(bytes == expect, "{}: tensor '{}' has {} bytes, its shape needs {}", name_, name, bytes, expect);
  const uint64_t avail = bytes_.size() - data_;
  FUTR_CHECK(off <= avail && bytes <= avail - off,
             "{}: tensor '{}' (offset {}, {} bytes) lies past the end of the file", name_, name, off, bytes);
  return bytes_.subspan(size_t(data_ + off), size_t(bytes));
}

std::vector<WeightFormat> FutrFile::formats() const {
  std::vector<WeightFormat> out;
  try {
    for (const json& s : header_.value("weight_sets", json::array())) {
      const WeightFormat f = parse_weight_format(s.at("format").get<std::string>());
      FUTR_CHECK(f != WeightFormat::kAuto && f != WeightFormat::kFp32,
                 "{}: bad weight_sets in the .futr header: format {}", name_, to_string(f));
      out.push_back(f);
    }
  } catch (const json::exception& e) {
    fail("{}: bad weight_sets in the .futr header: {}", name_, e.what());
  }
  auto rank = [](WeightFormat f) { return f == WeightFormat::kInt4 ? 0 : f == WeightFormat::kFp8 ? 1 : 2; };
  std::sort(out.begin(), out.end(), [&](WeightFormat a, WeightFormat b) { return rank(a) < rank(b); });
  return out;
}

namespace {

// Dimension check: positive and small enough that products cannot overflow.
int64_t dim_of(const json& shape, size_t i, const std::string& file, const std::string& name) {
  FUTR_CHECK(shape.at(i).is_number_integer(), "{}: tensor '{}' has a non-integer dimension {}", file,
             printable(name, 100), i);
  const int64_t v = shape.at(i).is_number_unsigned() && shape.at(i).get<uint64_t>() > uint64_t(INT64_MAX)
                        ? INT64_MAX
                        : shape.at(i).get<int64_t>();
  FUTR_CHECK(v > 0 && v <= (int64_t(1) << 31), "{}: tensor '{}' has dimension {} = {}", file,
             printable(name, 100), i, v);
  return v;
}

}  // namespace

quant::QuantizedWeights FutrFile::read_weights(WeightFormat f) const {
  quant::QuantizedWeights out;
  out.format = f;
  try {
    for (const json& s : header_.value("weight_sets", json::array()))
      if (s.at("format").get<std::string>() == to_string(f)) {
        out.method = s.value("method", "");
        if (s.contains("fp8_initial_amax")) {
          FUTR_CHECK(s["fp8_initial_amax"].is_object(), "{}: fp8_initial_amax is not an object", name_);
          for (const auto& [site, v] : s["fp8_initial_amax"].items()) {
            SiteId id;
            try {
              id = parse_site_name(site);
            } catch (const Error& e) {
              fail("{}: fp8_initial_amax: {}", name_, e.what());
            }
            // Finite and within what activations can be (quant/delayed_scaling.h).
            out.fp8_initial_amax[id] =
                float(json_float(v, name_ + ": fp8_initial_amax['" + printable(site, 100) + "']",
                                 quant::kFp8MinCalibratedAmax, quant::kFp8MaxCalibratedAmax));
          }
        }
      }
    const ModelConfig cfg = to_model(false).config;
    for (const json& t : header_["tensors"]) {
      if (!t.contains("format") || t["format"].get<std::string>() != to_string(f)) continue;
      quant::QuantizedTensor q;
      const std::string qname = t.at("name").get<std::string>();
      const std::string pname = printable(qname, 100);  // for messages
      // Every stored projection is one of this model's layers (never ignored).
      try {
        q.id = parse_projection_name(qname);
      } catch (const Error&) {
        q.id = {};
      }
      FUTR_CHECK(q.id.layer >= 0 && q.id.layer < cfg.n_layers,
                 "{}: unexpected {} tensor '{}' (not a projection of this model's {} layers)", name_,
                 to_string(f), pname, cfg.n_layers);
      q.format = f;
      q.method = t.value("method", "");
      const json& shape = t.at("shape");
      FUTR_CHECK(shape.is_array() && shape.size() == 2, "{}: tensor '{}' is not 2-D", name_, pname);
      const int64_t n = dim_of(shape, 0, name_, pname), k = dim_of(shape, 1, name_, pname);
      q.n = int(n);
      q.k = int(k);
      const std::string kind = t.at("kind").get<std::string>();
      if (f == WeightFormat::kInt4) {
        FUTR_CHECK(kind == "int4", "{}: int4 tensor '{}' has kind '{}'", name_, pname, printable(kind, 40));
        const int group = int(json_int(t.at("group"), name_ + ": tensor '" + pname + "' group", 1, 1 << 20));
        try {
          quant::check_int4_shape(q.n, q.k, group);
        } catch (const Error& e) {
          fail("{}: tensor '{}': {}", name_, pname, e.what());
        }
        quant::Int4Packed p;
        p.n = q.n;
        p.k = q.k;
        p.group = group;
        const auto wb = blob(t, "offset", "bytes", uint64_t(n) * uint64_t(k) / 2);
        const auto sb = blob(t, "scale_offset", "scale_bytes", uint64_t(n) * uint64_t(k / group) * 2);
        p.weights.assign(wb.begin(), wb.end());
        p.scales = from_bytes<uint16_t>(sb);
        for (size_t i = 0; i < p.scales.size(); ++i)  // FP16 exponent all ones: Inf or NaN
          FUTR_CHECK((p.scales[i] & 0x7c00) != 0x7c00, "{}: tensor '{}' has a non-finite INT4 scale (#{})",
                     name_, pname, i);
        q.int4 = quant::unpack_int4(p);
      } else if (f == WeightFormat::kFp8) {
        FUTR_CHECK(kind == "e4m3", "{}: fp8 tensor '{}' has kind '{}'", name_, pname, printable(kind, 40));
        const auto wb = blob(t, "offset", "bytes", uint64_t(n) * uint64_t(k));
        const auto sb = blob(t, "scale_offset", "scale_bytes", uint64_t(n) * 4);
        q.fp8.n = q.n;
        q.fp8.k = q.k;
        q.fp8.w.assign(wb.begin(), wb.end());
        q.fp8.scale = from_bytes<float>(sb);
        q.fp8.folded_gain = t.at("folded_gain").get<bool>();
        // The gain of an RMSNorm can only be folded into a projection that reads
        // the normed hidden state: q, k, v (attn_norm) and gate, up (ffn_norm).
        FUTR_CHECK(
            !q.fp8.folded_gain || reads_rmsnorm(q.id.proj),
            "{}: tensor '{}' has folded_gain, but its input is not the normed hidden state (only q, k, v, "
            "gate and up can fold a norm gain)",
            name_, pname);
        for (size_t r = 0; r < q.fp8.scale.size(); ++r) {  // finite, positive, what a weight can be
          const float s = q.fp8.scale[r];
          FUTR_CHECK(s >= quant::kFp8MinWeightScale && s <= quant::kFp8MaxWeightScale,
                     "{}: tensor '{}' has FP8 scale {} (row {}), outside [{}, {}]", name_, pname, s, r,
                     quant::kFp8MinWeightScale, quant::kFp8MaxWeightScale);
        }
        for (size_t i = 0; i < q.fp8.w.size(); ++i)  // E4M3 has one NaN pattern per sign and no Inf
          FUTR_CHECK((q.fp8.w[i] & 0x7f) != 0x7f, "{}: tensor '{}' holds an E4M3 NaN (element {})", name_,
                     pname, i);
      } else if (f == WeightFormat::kBf16) {
        FUTR_CHECK(kind == "bf16", "{}: bf16 tensor '{}' has kind '{}'", name_, pname, printable(kind, 40));
        q.bf16 = from_bytes<uint16_t>(blob(t, "offset", "bytes", uint64_t(n) * uint64_t(k) * 2));
        for (size_t i = 0; i < q.bf16.size(); ++i)
          FUTR_CHECK((q.bf16[i] & 0x7f80) != 0x7f80, "{}: tensor '{}' holds a non-finite value (element {})",
                     name_, pname, i);
      }
      out.tensors[q.id] = std::move(q);
    }
    FUTR_CHECK(!out.tensors.empty(), "{}: holds no {} weights", name_, to_string(f));
    // Every projection present with the config's shape.
    for (int l = 0; l < cfg.n_layers; ++l) {
      const int64_t H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate;
      const int64_t shapes[7][2] = {{Q, H}, {KV, H}, {KV, H}, {H, Q}, {I, H}, {I, H}, {H, I}};
      std::string names[7];
      for (size_t i = 0; i < 7; ++i) names[i] = projection_name({l, kLayerProjections[i]});
      for (size_t i = 0; i < 7; ++i) {
        auto it = out.tensors.find({l, kLayerProjections[i]});
        FUTR_CHECK(it != out.tensors.end(), "{}: the {} weights lack tensor '{}'", name_, to_string(f),
                   names[i]);
        FUTR_CHECK(it->second.n == shapes[i][0] && it->second.k == shapes[i][1],
                   "{}: tensor '{}' is [{}, {}], the config needs [{}, {}]", name_, names[i], it->second.n,
                   it->second.k, shapes[i][0], shapes[i][1]);
      }
    }
  } catch (const json::exception& e) {
    fail("{}: bad tensor entry in the .futr header: {}", name_, e.what());
  }
  return out;
}

// Every stored tensor is one this model uses, as the GGUF and Hugging Face
// readers require: the dense tensors token_embd, output_norm, output (only
// when the embeddings are not tied), blk.L.attn_norm and blk.L.ffn_norm for
// the config's layers; the projections of those layers, each in a format
// that "weight_sets" lists. Anything else (a tensor of another architecture,
// a layer beyond the config, a format without its set) is refused by name.
void FutrFile::check_tensors_used(const ModelConfig& cfg) const {
  std::set<std::string> dense = {"token_embd", "output_norm"};
  if (!cfg.tied_embeddings) dense.insert("output");
  for (int l = 0; l < cfg.n_layers; ++l) {
    dense.insert(fmt::format("blk.{}.attn_norm", l));
    dense.insert(fmt::format("blk.{}.ffn_norm", l));
    if (cfg.qkv_bias)
      for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
        dense.insert(fmt::format("blk.{}.{}", l, b));
  }
  std::set<std::string> sets;
  for (WeightFormat f : formats()) sets.insert(to_string(f));
  for (const json& e : header_["tensors"]) {
    const std::string name = e.at("name").get<std::string>();
    const std::string pname = printable(name, 100);
    if (!e.contains("format")) {
      FUTR_CHECK(!(name == "output" && cfg.tied_embeddings),
                 "{}: unexpected tensor 'output' (the config ties the LM head to the embeddings)", name_);
      FUTR_CHECK(dense.count(name), "{}: unexpected tensor '{}' (not a tensor of this model's {} layers)",
                 name_, pname, cfg.n_layers);
      continue;
    }
    const std::string format = e["format"].get<std::string>();
    FUTR_CHECK(sets.count(format),
               "{}: tensor '{}' is stored as '{}', but no weight set of that format is listed", name_, pname,
               printable(format, 40));
    ProjId id;
    try {
      id = parse_projection_name(name);
    } catch (const Error&) {
      id = {};
    }
    FUTR_CHECK(id.layer >= 0 && id.layer < cfg.n_layers,
               "{}: unexpected {} tensor '{}' (not a projection of this model's {} layers)", name_,
               printable(format, 40), pname, cfg.n_layers);
  }
}

Model FutrFile::to_model(bool with_weights) const {
  Model m;
  m.path = name_;
  m.format = "futr";
  try {
    const json& c = header_.at("config");
    ModelConfig& cfg = m.config;
    FUTR_CHECK(c.is_object(), "{}: config is not an object", name_);
    // Integers must fit their field (1e300 or 2^32 + 64 are refused, not wrapped).
    auto get_int = [&](const json& o, const char* obj, const char* key, int64_t lo, int64_t hi) {
      return int(json_int(o.at(key), fmt::format("{}: {}.{}", name_, obj, key), lo, hi));
    };
    auto get_float = [&](const json& o, const char* obj, const char* key) {
      return float(json_float(o.at(key), fmt::format("{}: {}.{}", name_, obj, key), -FLT_MAX, FLT_MAX));
    };
    cfg.arch = c.at("arch").get<std::string>();
    cfg.name = c.value("name", "");
    cfg.hidden = get_int(c, "config", "hidden", 1, INT32_MAX);
    cfg.n_layers = get_int(c, "config", "n_layers", 1, INT32_MAX);
    cfg.n_heads = get_int(c, "config", "n_heads", 1, INT32_MAX);
    cfg.n_kv_heads = get_int(c, "config", "n_kv_heads", 1, INT32_MAX);
    cfg.head_dim = get_int(c, "config", "head_dim", 1, INT32_MAX);
    cfg.intermediate = get_int(c, "config", "intermediate", 1, INT32_MAX);
    cfg.vocab = get_int(c, "config", "vocab", 1, INT32_MAX);
    cfg.max_context = get_int(c, "config", "max_context", 1, INT32_MAX);
    cfg.rope_theta = get_float(c, "config", "rope_theta");
    cfg.rms_eps = get_float(c, "config", "rms_eps");
    cfg.tied_embeddings = c.at("tied_embeddings").get<bool>();
    cfg.qkv_bias = c.contains("qkv_bias") && c["qkv_bias"].get<bool>();  // version 2; absent: none
    const json& rs = c.at("rope_scaling");
    cfg.rope_scaling.type = rs.at("type").get<std::string>();
    cfg.rope_scaling.factor = get_float(rs, "config.rope_scaling", "factor");
    cfg.rope_scaling.low_freq_factor = get_float(rs, "config.rope_scaling", "low_freq_factor");
    cfg.rope_scaling.high_freq_factor = get_float(rs, "config.rope_scaling", "high_freq_factor");
    cfg.rope_scaling.original_max_position =
        get_int(rs, "config.rope_scaling", "original_max_position", 1, INT32_MAX);
    cfg.validate(name_);

    // Tokenizer.
    const json& t = header_.at("tokenizer");
    TokenizerSpec& tk = m.tokenizer;
    tk.model = t.at("model").get<std::string>();
    tk.pre = t.at("pre").get<std::string>();
    auto strings = [&](const char* key) {
      const json& e = t.at(key);
      const uint64_t count = json_uint(e.at("count"), fmt::format("{}: tokenizer {} count", name_, key));
      const uint64_t off = json_uint(e.at("offset"), fmt::format("{}: tokenizer {} offset", name_, key));
      const uint64_t bytes = json_uint(e.at("bytes"), fmt::format("{}: tokenizer {} bytes", name_, key));
      const uint64_t avail = bytes_.size() - data_;
      FUTR_CHECK(off <= avail && bytes <= avail - off, "{}: tokenizer {} lie past the end of the file", name_,
                 key);
      FUTR_CHECK(count <= bytes / 4, "{}: tokenizer {}: {} strings cannot fit in {} bytes", name_, key, count,
                 bytes);
      std::vector<std::string> v;
      v.reserve(size_t(count));
      const uint8_t* p = bytes_.data() + data_ + off;
      uint64_t pos = 0;
      for (uint64_t i = 0; i < count; ++i) {
        FUTR_CHECK(bytes - pos >= 4, "{}: tokenizer {} truncated", name_, key);
        const uint32_t len = get_u32(p + pos);
        pos += 4;
        FUTR_CHECK(len <= bytes - pos, "{}: tokenizer {} string {} of {} bytes runs past its blob", name_,
                   key, i, len);
        v.emplace_back(reinterpret_cast<const char*>(p + pos), len);
        pos += len;
      }
      FUTR_CHECK(pos == bytes, "{}: tokenizer {}: {} bytes after the last of its {} strings", name_, key,
                 bytes - pos, count);
      return v;
    };
    tk.tokens = strings("tokens");
    tk.merges = strings("merges");
    const std::vector<std::string> tmpl = strings("chat_template");
    tk.chat_template = tmpl.empty() ? std::string() : tmpl[0];
    auto id = [&](const json& v, const std::string& what) {
      return int32_t(json_int(v, fmt::format("{}: tokenizer.{}", name_, what), -1, INT32_MAX));
    };
    const json& types = t.at("token_types");
    FUTR_CHECK(types.is_array() && (types.empty() || types.size() == tk.tokens.size()),
               "{}: tokenizer.token_types must be an array of {} token types", name_, tk.tokens.size());
    tk.token_types.reserve(types.size());
    for (const json& v : types)
      tk.token_types.push_back(int32_t(json_int(v, name_ + ": tokenizer.token_types", 0, 6)));
    tk.bos = id(t.at("bos"), "bos");
    tk.eos = id(t.at("eos"), "eos");
    tk.unk = id(t.at("unk"), "unk");
    tk.pad = id(t.at("pad"), "pad");
    const json& extra = t.at("extra_eos");
    FUTR_CHECK(extra.is_array() && extra.size() <= tk.tokens.size(),
               "{}: tokenizer.extra_eos must be a list of ids", name_);
    for (const json& v : extra) tk.extra_eos.push_back(id(v, "extra_eos"));
    tk.add_bos = t.at("add_bos").get<bool>();
    if (!t.at("ignore_merges").is_null()) tk.ignore_merges = t["ignore_merges"].get<bool>();
    // Version 2 (absent in version 1 files: the defaults).
    if (t.contains("scores")) {
      const json& sc = t["scores"];
      const uint64_t count = json_uint(sc.at("count"), name_ + ": tokenizer.scores count");
      FUTR_CHECK(count == tk.tokens.size(), "{}: tokenizer.scores has {} entries for {} tokens", name_, count,
                 tk.tokens.size());
      const std::span<const uint8_t> b = blob(sc, "offset", "bytes", count * 4);
      tk.scores = from_bytes<float>(b);
      for (float v : tk.scores)
        FUTR_CHECK(std::isfinite(v), "{}: tokenizer.scores holds a non-finite value", name_);
    }
    if (t.contains("add_space_prefix")) tk.add_space_prefix = t["add_space_prefix"].get<bool>();
    if (t.contains("space_prefix_first_only"))
      tk.space_prefix_first_only = t["space_prefix_first_only"].get<bool>();
    if (t.contains("space_prefix_unless_space"))
      tk.space_prefix_unless_space = t["space_prefix_unless_space"].get<bool>();
    FUTR_CHECK(
        tk.tokens.empty() || int64_t(tk.tokens.size()) == cfg.vocab || int64_t(tk.tokens.size()) <= cfg.vocab,
        "{}: the tokenizer has {} tokens, more than the vocabulary {}", name_, tk.tokens.size(), cfg.vocab);
    std::vector<int32_t> specials = {tk.bos, tk.eos, tk.unk, tk.pad};
    specials.insert(specials.end(), tk.extra_eos.begin(), tk.extra_eos.end());
    for (int32_t sid : specials)
      FUTR_CHECK(sid >= -1 && sid < int32_t(tk.tokens.size()), "{}: special token id {} out of range", name_,
                 sid);
    check_tokenizer_spec(tk, name_);  // before any weight is read

    // Sources and the non-projection tensors.
    std::map<std::string, const json*> dense;
    for (const json& e : header_["tensors"]) {
      const std::string name = e.at("name").get<std::string>();
      const std::string kind = e.at("kind").get<std::string>();
      const json& shape = e.at("shape");
      FUTR_CHECK(shape.is_array() && !shape.empty() && shape.size() <= 2, "{}: tensor '{}' has a bad shape",
                 name_, printable(name, 100));
      SourceTensor s;
      s.name = e.contains("format") ? name + "." + e["format"].get<std::string>() : name;
      for (size_t i = 0; i < shape.size(); ++i) s.shape.push_back(dim_of(shape, i, name_, name));
      // (offsets and sizes were range-checked by check_blobs())
      s.bytes =
          e.at("bytes").get<uint64_t>() + (e.contains("scale_bytes") ? e["scale_bytes"].get<uint64_t>() : 0);
      if (kind == "int4")
        s.type = fmt::format(
            "INT4_G{}",
            json_int(e.at("group"), name_ + ": tensor '" + printable(name, 100) + "' group", 1, 1 << 20));
      else if (kind == "e4m3") s.type = e.value("folded_gain", false) ? "E4M3 (norm folded)" : "E4M3";
      else if (kind == "bf16") s.type = "BF16";
      else if (kind == "f32") s.type = "F32";
      else fail("{}: tensor '{}' has unknown kind '{}'", name_, printable(name, 100), printable(kind, 40));
      m.sources.push_back(s);
      if (!e.contains("format")) dense[name] = &e;
    }
    check_tensors_used(cfg);
    if (!with_weights) return m;

    auto load_dense = [&](const std::string& name, std::vector<int64_t> shape) {
      auto it = dense.find(name);
      FUTR_CHECK(it != dense.end(), "{}: tensor '{}' is missing", name_, name);
      const json& e = *it->second;
      // The config's shape against the file's own table and blob before any
      // allocation: a config that disagrees with the stored tensor must not
      // allocate what it claims (GBs from a small file).
      std::vector<int64_t> got;
      for (size_t i = 0; i < e["shape"].size(); ++i) got.push_back(e["shape"][i].get<int64_t>());
      uint64_t numel = 1;
      for (int64_t d : shape) numel *= uint64_t(d);  // the config's dims are validated: no overflow
      FUTR_CHECK(got == shape, "{}: tensor '{}' has the wrong shape (expected [{}] from the config)", name_,
                 name, fmt::join(shape, ", "));
      const std::string kind = e["kind"].get<std::string>();
      FUTR_CHECK(kind == "f32" || kind == "bf16", "{}: tensor '{}' must be bf16 or f32", name_, name);
      const std::span<const uint8_t> bytes = blob(e, "offset", "bytes", numel * (kind == "f32" ? 4 : 2));
      Tensor want(shape);
      if (kind == "f32") {
        want.data = from_bytes<float>(bytes);
      } else {
        const std::vector<uint16_t> h = from_bytes<uint16_t>(bytes);
        for (size_t i = 0; i < h.size(); ++i) want.data[i] = bf16_to_float(h[i]);
      }
      for (float v : want.data)
        FUTR_CHECK(std::isfinite(v), "{}: tensor '{}' holds a non-finite value", name_, name);
      return want;
    };
    const int64_t H = cfg.hidden, Q = cfg.q_dim(), KV = cfg.kv_dim(), I = cfg.intermediate, V = cfg.vocab;
    m.weights.tok_embd = load_dense("token_embd", {V, H});
    m.weights.out_norm = load_dense("output_norm", {H});
    if (!cfg.tied_embeddings) m.weights.lm_head = load_dense("output", {V, H});
    const std::vector<WeightFormat> fs = formats();
    FUTR_CHECK(!fs.empty(), "{}: holds no projection weights", name_);
    const quant::QuantizedWeights qw = read_weights(fs.front());
    for (int l = 0; l < cfg.n_layers; ++l) {
      LayerWeights L;
      L.attn_norm = load_dense(fmt::format("blk.{}.attn_norm", l), {H});
      L.ffn_norm = load_dense(fmt::format("blk.{}.ffn_norm", l), {H});
      if (cfg.qkv_bias) {
        L.bq = load_dense(fmt::format("blk.{}.attn_q.bias", l), {Q});
        L.bk = load_dense(fmt::format("blk.{}.attn_k.bias", l), {KV});
        L.bv = load_dense(fmt::format("blk.{}.attn_v.bias", l), {KV});
      }
      Tensor* dst[7] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
      const int64_t shapes[7][2] = {{Q, H}, {KV, H}, {KV, H}, {H, Q}, {I, H}, {I, H}, {H, I}};
      for (size_t i = 0; i < 7; ++i) {
        const quant::QuantizedTensor& q = qw.at({l, kLayerProjections[i]});
        Tensor t({shapes[i][0], shapes[i][1]});
        if (q.format == WeightFormat::kInt4) {
          t.data = quant::dequantize_int4(q.int4);
        } else if (q.format == WeightFormat::kFp8) {
          t.data = quant::dequantize_fp8(q.fp8);
          if (q.fp8.folded_gain) {          // W = W' / g
            FUTR_ASSERT(i != 3 && i != 6);  // refused by read_weights()
            const Tensor& g = i < 3 ? L.attn_norm : L.ffn_norm;
            FUTR_ASSERT(g.data.size() == size_t(t.dim(1)));
            for (int64_t r = 0; r < t.dim(0); ++r)
              for (int64_t c2 = 0; c2 < t.dim(1); ++c2) {
                const float gv = g.data[size_t(c2)];
                float& v = t.data[size_t(r * t.dim(1) + c2)];
                v = gv != 0.0f ? v / gv : 0.0f;
              }
          }
        } else {
          for (size_t j = 0; j < t.data.size(); ++j) t.data[j] = bf16_to_float(q.bf16[j]);
        }
        *dst[i] = std::move(t);
      }
      m.weights.layers.push_back(std::move(L));
    }
  } catch (const json::exception& e) {
    fail("{}: bad .futr header: {}", name_, e.what());
  }
  return m;
}

Model load_futr_model(const std::filesystem::path& path, bool with_weights) {
  return FutrFile(path).to_model(with_weights);
}

}  // namespace futr
