// The tiny random checkpoints of families beyond Llama (tests/data/hf_tiny:
// Qwen2 with q/k/v biases, Mistral; built by Hugging Face transformers, whose
// logits cpu_hf_crosscheck_test compares) made usable by every command: a
// copy with a byte-level tokenizer.json (256 byte tokens, no merges, the
// family's special tokens after them), a tokenizer_config.json (bos / eos and
// the family's chat template, abridged to what identifies it) and a
// generation_config.json naming that eos. A random model writes random bytes:
// tests on these check that a command runs the family through, not what it says.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/test_util.h"

namespace futr::test {

struct TinyFamily {
  const char* dir;  // in tests/data/hf_tiny
  const char* bos;  // special tokens added after the 256 byte tokens ("": none)
  const char* eos;
  const char* extra;      // one more special token of the template ("": none)
  const char* template_;  // the family's chat template
};

// ChatML (Qwen2) and Mistral's [INST] template.
inline constexpr TinyFamily kTinyQwen2{
    "qwen2_gqa_hd64_bias_tied_bf16", "", "<|im_end|>", "<|im_start|>",
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
    "endif "
    "%}"};
inline constexpr TinyFamily kTinyMistral{
    "mistral_gqa_hd64_untied_f16", "<s>", "</s>", "",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor "
    "%}"};

// The family's checkpoint made usable in `work` (once; later calls return it).
inline std::filesystem::path tiny_family_dir(const TinyFamily& f, const std::filesystem::path& work) {
  namespace fs = std::filesystem;
  const fs::path d = work / f.dir;
  if (fs::exists(d)) return d;
  fs::create_directories(work);
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / f.dir, d, fs::copy_options::recursive);
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(uint8_t(b))] = b;
  nlohmann::json added = nlohmann::json::array();
  int id = 256, eos_id = -1;
  for (const char* s : {f.bos, f.eos, f.extra}) {
    if (*s == '\0') continue;
    if (std::string(s) == f.eos) eos_id = id;
    added.push_back({{"id", id++},
                     {"content", s},
                     {"special", true},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false}});
  }
  const nlohmann::json tok = {
      {"added_tokens", added},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}};
  std::ofstream(d / "tokenizer.json") << tok.dump();
  nlohmann::json cfg = {{"eos_token", f.eos}, {"chat_template", f.template_}};
  if (*f.bos) cfg["bos_token"] = f.bos;
  std::ofstream(d / "tokenizer_config.json") << cfg.dump();
  std::ofstream(d / "generation_config.json") << nlohmann::json{{"eos_token_id", eos_id}}.dump();
  return d;
}

}  // namespace futr::test
