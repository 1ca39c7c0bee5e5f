// `futr info`: see info_command.h.
#include "cli/info_command.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "formats/gguf.h"
#include "formats/hf_checkpoint.h"
#include "formats/loader.h"

#ifndef FUTR_DEFAULT_MODEL
#define FUTR_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace futr::cli {
namespace {

namespace fs = std::filesystem;

int int4_group_for(int64_t k) { return k % 128 == 0 ? 128 : k % 64 == 0 ? 64 : 128; }

// One quantized matrix [n, k]: bytes for FP8 and INT4.
void add_matrix(ModelMemory& m, int64_t n, int64_t k) {
  const uint64_t w = uint64_t(n * k);
  m.quantized += w;
  m.fp8 += w + uint64_t(n) * 4;
  const int64_t g = int4_group_for(k);
  const int64_t groups = (k + g - 1) / g;
  m.int4 += uint64_t(n * groups * g / 2 + n * groups * 2);
}

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1u << 30));
  if (b >= (uint64_t(1) << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1u << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", double(b) / 1024);
  return fmt::format("{} B", b);
}

std::string human_count(uint64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f} B", double(n) / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f} M", double(n) / 1e6);
  if (n >= 1000) return fmt::format("{:.1f} K", double(n) / 1e3);
  return std::to_string(n);
}

// A token's text for display: control characters escaped, clipped.
std::string show_token(const TokenizerSpec& t, int32_t id) {
  if (id < 0) return "none";
  if (size_t(id) >= t.tokens.size()) return std::to_string(id);
  std::string s;
  for (char ch : t.tokens[size_t(id)].substr(0, 40)) {
    if (uint8_t(ch) < 0x20) s += fmt::format("\\x{:02x}", uint8_t(ch));
    else s += ch;
  }
  return fmt::format("{} '{}'", id, s);
}

struct TypeStats {
  int count = 0;
  uint64_t params = 0;
  uint64_t bytes = 0;
};

std::map<std::string, TypeStats> type_stats(const Model& m) {
  std::map<std::string, TypeStats> s;
  for (const SourceTensor& t : m.sources) {
    TypeStats& x = s[t.type];
    ++x.count;
    x.params += uint64_t(Tensor::count(t.shape));
    x.bytes += t.bytes;
  }
  return s;
}

struct ParamSplit {
  uint64_t embedding = 0, per_layer = 0, layers = 0, head = 0, norm = 0;
};

ParamSplit param_split(const ModelConfig& c) {
  ParamSplit p;
  const uint64_t h = uint64_t(c.hidden), q = uint64_t(c.q_dim()), kv = uint64_t(c.kv_dim()),
                 i = uint64_t(c.intermediate), v = uint64_t(c.vocab);
  p.embedding = v * h;
  p.per_layer = 2 * h + q * h + 2 * kv * h + h * q + 3 * i * h;
  p.layers = p.per_layer * uint64_t(c.n_layers);
  p.norm = h;
  p.head = c.tied_embeddings ? 0 : v * h;
  return p;
}

std::string rope_text(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  if (r.type == "none") return "none";
  return fmt::format("{} (factor {:g}, low_freq_factor {:g}, high_freq_factor {:g}, original context {})",
                     r.type, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position);
}

// Every GGUF metadata key with a short form of its value.
std::string gguf_metadata_text(const std::string& path) {
  const GgufFile f(path);
  std::string s = fmt::format("GGUF v{} metadata ({} keys, alignment {}):\n", f.version(),
                              f.metadata().size(), f.alignment());
  for (const GgufKV& kv : f.metadata()) {
    std::string key(kv.key.substr(0, 200));
    for (char& ch : key)  // keys come from the file: no terminal escapes
      if (uint8_t(ch) < 0x20 || ch == 0x7f) ch = '?';
    s += fmt::format("  {:<44} {}\n", key, kv.value.summary(80));
  }
  return s;
}

void run_info(const std::string& model_arg, bool list_tensors, bool json, bool metadata) {
  std::string path = model_arg;
  if (path.empty()) {
    path = FUTR_DEFAULT_MODEL;
    FUTR_CHECK(fs::exists(path),
               "the default model {} is missing: run scripts/fetch-model.sh (or pass a model path)", path);
  }
  const Model m = inspect_model(path);
  std::string out = json ? info_json(m) + "\n" : info_text(m, list_tensors);
  if (metadata && !json) {
    FUTR_CHECK(m.format == "gguf", "--metadata is for GGUF files ({} is {})", path, m.format);
    out += gguf_metadata_text(path);
  }
  // Names and metadata come from the file: no raw control bytes on the terminal.
  if (!json) out = printable(out, SIZE_MAX, /*keep_newlines=*/true);
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

ModelMemory model_memory(const ModelConfig& c) {
  ModelMemory m;
  const ParamSplit p = param_split(c);
  m.params = p.embedding + p.layers + p.norm + p.head;
  m.fp32 = m.params * 4;
  m.bf16 = m.params * 2;
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), i = c.intermediate;
  for (int l = 0; l < c.n_layers; ++l) {
    add_matrix(m, q, h);
    add_matrix(m, kv, h);
    add_matrix(m, kv, h);
    add_matrix(m, h, q);
    add_matrix(m, i, h);
    add_matrix(m, i, h);
    add_matrix(m, h, i);
  }
  if (!c.tied_embeddings) add_matrix(m, c.vocab, h);
  const uint64_t kept_bf16 = (m.params - m.quantized) * 2;
  m.fp8 += kept_bf16;
  m.int4 += kept_bf16;
  m.int4_group = int4_group_for(h);
  return m;
}

uint64_t model_file_bytes(const Model& m) {
  std::error_code ec;
  if (fs::is_regular_file(m.path, ec)) return fs::file_size(m.path);
  uint64_t n = 0;
  for (const fs::path& f : hf_weight_files(m.path)) n += fs::file_size(f);
  return n;
}

std::string info_text(const Model& m, bool list_tensors) {
  const ModelConfig& c = m.config;
  std::string s;
  auto line = [&](const std::string& k, const std::string& v) { s += fmt::format("  {:<22}{}\n", k, v); };
  s += fmt::format("model: {}\n", m.path);
  line("format", m.format);
  line("name", c.name.empty() ? "(none)" : c.name);
  line("architecture", c.arch);
  s += "config:\n";
  line("hidden", std::to_string(c.hidden));
  line("layers", std::to_string(c.n_layers));
  line("heads / kv heads",
       fmt::format("{} / {} ({})", c.n_heads, c.n_kv_heads,
                   c.n_heads == c.n_kv_heads ? std::string("MHA")
                   : c.n_kv_heads == 1       ? std::string("MQA")
                                             : fmt::format("GQA {}:1", c.n_heads / c.n_kv_heads)));
  line("head dim", fmt::format("{}{}", c.head_dim,
                               c.q_dim() != c.hidden ? fmt::format(" (q dim {} != hidden)", c.q_dim()) : ""));
  line("intermediate", std::to_string(c.intermediate));
  line("vocab", std::to_string(c.vocab));
  line("max context", std::to_string(c.max_context));
  line("rope theta", fmt::format("{:g}", c.rope_theta));
  line("rope scaling", rope_text(c));
  line("rms eps", fmt::format("{:g}", c.rms_eps));
  line("embeddings", c.tied_embeddings ? "tied (LM head = token embedding)" : "separate LM head");

  s += fmt::format("tensors: {}\n", m.sources.size());
  for (const auto& [type, st] : type_stats(m))
    s += fmt::format("  {:<8}{:>5} tensors {:>12} params {:>12}\n", type, st.count, human_count(st.params),
                     human_bytes(st.bytes));
  if (list_tensors)
    for (const SourceTensor& t : m.sources)
      s += fmt::format("    {:<48} {:<6} {:<16} {}\n", t.name, t.type,
                       fmt::format("[{}]", fmt::join(t.shape, ", ")), human_bytes(t.bytes));

  const ParamSplit p = param_split(c);
  const ModelMemory mem = model_memory(c);
  s += fmt::format("parameters: {} ({})\n", human_count(mem.params), mem.params);
  line("token embedding", human_count(p.embedding));
  line("layers", fmt::format("{} ({} per layer)", human_count(p.layers), human_count(p.per_layer)));
  line("final norm", human_count(p.norm));
  line("LM head", c.tied_embeddings ? std::string("tied") : human_count(p.head));

  s += "memory (weights):\n";
  line("files", human_bytes(model_file_bytes(m)));
  line("FP32 (as loaded)", human_bytes(mem.fp32));
  line("BF16", human_bytes(mem.bf16));
  line("FP8 E4M3", human_bytes(mem.fp8) + "  (projections FP8 + per-channel FP32 scales; rest BF16)");
  line(fmt::format("INT4 g{}", mem.int4_group),
       human_bytes(mem.int4) + "  (projections INT4 + FP16 group scales; rest BF16)");

  const TokenizerSpec& t = m.tokenizer;
  s += "tokenizer:\n";
  if (t.tokens.empty()) {
    s += "  (none in this model)\n";
  } else {
    line("model / pre", fmt::format("{} / {}", t.model, t.pre));
    line("tokens / merges", fmt::format("{} / {}", t.tokens.size(), t.merges.size()));
    line("bos", show_token(t, t.bos) + (t.add_bos ? " (added to prompts)" : ""));
    line("eos", show_token(t, t.eos));
    for (int32_t id : t.extra_eos) line("also ends generation", show_token(t, id));
    if (t.unk >= 0) line("unk", show_token(t, t.unk));
    if (t.pad >= 0) line("pad", show_token(t, t.pad));
    line("chat template", t.chat_template.empty() ? std::string("none")
                                                  : fmt::format("yes ({} chars)", t.chat_template.size()));
  }
  return s;
}

std::string info_json(const Model& m) {
  using nlohmann::ordered_json;
  const ModelConfig& c = m.config;
  const ModelMemory mem = model_memory(c);
  const ParamSplit p = param_split(c);
  ordered_json j;
  j["path"] = m.path;
  j["format"] = m.format;
  j["config"] = {{"name", c.name},
                 {"arch", c.arch},
                 {"hidden", c.hidden},
                 {"layers", c.n_layers},
                 {"heads", c.n_heads},
                 {"kv_heads", c.n_kv_heads},
                 {"head_dim", c.head_dim},
                 {"intermediate", c.intermediate},
                 {"vocab", c.vocab},
                 {"max_context", c.max_context},
                 {"rope_theta", c.rope_theta},
                 {"rope_scaling",
                  {{"type", c.rope_scaling.type},
                   {"factor", c.rope_scaling.factor},
                   {"low_freq_factor", c.rope_scaling.low_freq_factor},
                   {"high_freq_factor", c.rope_scaling.high_freq_factor},
                   {"original_max_position", c.rope_scaling.original_max_position}}},
                 {"rms_eps", c.rms_eps},
                 {"tied_embeddings", c.tied_embeddings}};
  ordered_json types = ordered_json::object();
  for (const auto& [type, st] : type_stats(m))
    types[type] = {{"tensors", st.count}, {"params", st.params}, {"bytes", st.bytes}};
  j["tensor_types"] = types;
  ordered_json tensors = ordered_json::array();
  for (const SourceTensor& t : m.sources)
    tensors.push_back({{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"bytes", t.bytes}});
  j["tensors"] = tensors;
  j["parameters"] = {{"total", mem.params}, {"embedding", p.embedding}, {"per_layer", p.per_layer},
                     {"layers", p.layers},  {"final_norm", p.norm},     {"lm_head", p.head}};
  j["memory_bytes"] = {{"files", model_file_bytes(m)},
                       {"fp32", mem.fp32},
                       {"bf16", mem.bf16},
                       {"fp8", mem.fp8},
                       {"int4", mem.int4},
                       {"int4_group", mem.int4_group}};
  const TokenizerSpec& t = m.tokenizer;
  j["tokenizer"] = {{"model", t.model},
                    {"pre", t.pre},
                    {"tokens", t.tokens.size()},
                    {"merges", t.merges.size()},
                    {"bos", t.bos},
                    {"eos", t.eos},
                    {"extra_eos", t.extra_eos},
                    {"unk", t.unk},
                    {"pad", t.pad},
                    {"add_bos", t.add_bos},
                    {"chat_template", !t.chat_template.empty()}};
  return j.dump(2);
}

void add_info_command(CLI::App& app) {
  struct Opts {
    std::string model;
    bool tensors = false;
    bool json = false;
    bool metadata = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd =
      app.add_subcommand("info",
                         "Show a model's config, tensor types, parameter count, memory and tokenizer "
                         "(metadata only; no weights are loaded)");
  cmd->add_option("model", o->model,
                  std::string("Model file or directory (default: ") + FUTR_DEFAULT_MODEL + ")");
  cmd->add_option("-m,--model", o->model, "Same as the positional MODEL");
  cmd->add_flag("--tensors", o->tensors, "List every tensor (name, type, shape, bytes)");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->add_flag("--metadata", o->metadata, "GGUF: also list every metadata key and value");
  cmd->callback([o] { run_info(o->model, o->tensors, o->json, o->metadata); });
}

}  // namespace futr::cli
