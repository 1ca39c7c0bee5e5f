// The tiny random checkpoints of families beyond Llama 3 (tests/data/hf_tiny:
// Qwen2 with q/k/v biases, Mistral, and a Llama one given a Llama-2
// SentencePiece tokenizer; built by Hugging Face transformers, whose logits
// cpu_hf_crosscheck_test compares) made usable by every command: a copy with
// a tokenizer.json (byte-level: 256 byte tokens, no merges, the family's
// special tokens after them; or SentencePiece-style, tiny_spm_tokenizer), a tokenizer_config.json (bos / eos
// and the family's chat template, abridged to what identifies it) and a generation_config.json naming that
// eos. A random model writes random bytes: tests on these check that a command runs the family through, not
// what it says.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/test_util.h"

namespace futr::test {

struct TinyFamily {
  const char* dir;     // in tests/data/hf_tiny
  bool sentencepiece;  // a SentencePiece-style tokenizer (BPE with byte fallback) instead of byte-level
  const char* bos;     // special tokens added after the 256 byte tokens ("": none)
  const char* eos;
  const char* extra;      // one more special token of the template ("": none)
  const char* template_;  // the family's chat template
};

// ChatML (Qwen2) and Mistral's [INST] template.
inline constexpr TinyFamily kTinyQwen2{
    "qwen2_gqa_hd64_bias_tied_bf16",
    false,
    "",
    "<|im_end|>",
    "<|im_start|>",
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
    "endif "
    "%}"};
inline constexpr TinyFamily kTinyMistral{
    "mistral_gqa_hd64_untied_f16",
    false,
    "<s>",
    "</s>",
    "",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor "
    "%}"};

// Llama-2: the tiny Llama checkpoint with a SentencePiece-style tokenizer as
// transformers converts Llama-2's (legacy normalizer, byte fallback) and the
// Llama-2 template (<<SYS>>).
inline constexpr TinyFamily kTinyLlama2{
    "gqa_hd64_tied_bf16",
    true,
    "<s>",
    "</s>",
    "",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\n' + "
    "message['content'] + '\n<</SYS>>\n\n' }}{% elif message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif "
    "%}{% endfor %}"};

// The SentencePiece-style tokenizer.json of kTinyLlama2: <unk> <s> </s>, the
// 256 byte tokens <0x00>..<0xFF>, U+2581 and a..z, and three merges
// (U+2581 t, h e, U+2581t he), so that text takes pieces, letters and the
// byte fallback.
inline nlohmann::json tiny_spm_tokenizer() {
  const std::string sp = "\u2581";
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const char* s : {"<unk>", "<s>", "</s>"}) vocab[s] = id++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = id++;
  }
  vocab[sp] = id++;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = id++;
  for (const std::string& p : {sp + "t", std::string("he"), sp + "the"}) vocab[p] = id++;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", i},
                     {"content", i == 0   ? "<unk>"
                                 : i == 1 ? "<s>"
                                          : "</s>"},
                     {"special", true},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false}});
  const nlohmann::json prepend = {{"type", "Prepend"}, {"prepend", sp}};
  const nlohmann::json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}};
  const nlohmann::json unspace = {{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}};
  const nlohmann::json strip = {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}};
  nlohmann::json tok;
  tok["added_tokens"] = added;
  tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array({prepend, replace})}};
  tok["pre_tokenizer"] = nullptr;
  tok["model"] = {{"type", "BPE"},    {"byte_fallback", true},
                  {"fuse_unk", true}, {"unk_token", "<unk>"},
                  {"vocab", vocab},   {"merges", {sp + " t", "h e", sp + "t he"}}};
  tok["decoder"] = {
      {"type", "Sequence"},
      {"decoders", nlohmann::json::array({unspace, {{"type", "ByteFallback"}}, {{"type", "Fuse"}}, strip})}};
  return tok;
}

// The family's checkpoint made usable in `work` (once; later calls return it).
inline std::filesystem::path tiny_family_dir(const TinyFamily& f, const std::filesystem::path& work) {
  namespace fs = std::filesystem;
  const fs::path d = work / (std::string(f.dir) + (f.sentencepiece ? "_spm" : ""));
  if (fs::exists(d)) return d;
  fs::create_directories(work);
  fs::copy(fs::path(FUTR_TEST_DATA) / "hf_tiny" / f.dir, d, fs::copy_options::recursive);
  if (f.sentencepiece) {
    std::ofstream(d / "tokenizer.json") << tiny_spm_tokenizer().dump();
    const nlohmann::json cfg = {
        {"bos_token", f.bos}, {"eos_token", f.eos}, {"add_bos_token", true}, {"chat_template", f.template_}};
    std::ofstream(d / "tokenizer_config.json") << cfg.dump();
    std::ofstream(d / "generation_config.json")
        << nlohmann::json{{"bos_token_id", 1}, {"eos_token_id", 2}}.dump();
    return d;
  }
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
