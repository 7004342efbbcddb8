// Byte-level BPE (tokenizer.ggml.model "gpt2"), as llama.cpp's llm_tokenizer_bpe: split out
// special tokens, normalize (Qwen2: NFC, as Hugging Face), cut words with the pre-tokenizer
// regex, spell each byte as its GPT-2 code point, then merge adjacent pairs lowest rank first.
#pragma once
#include <array>
#include <unordered_map>

#include "runtime/regex_splitter.h"
#include "runtime/tokenizer.h"
#include "runtime/vocab.h"

namespace bonsai {

class BpeTokenizer final : public Tokenizer {
 public:
  // Reads tokenizer.ggml.pre and tokenizer.ggml.merges from meta.
  BpeTokenizer(std::unique_ptr<Vocab> vocab, const Metadata& meta);

 private:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string normal_text(const std::string& token_text) const override;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  struct Merge {
    int32_t rank;
    int32_t result;  // id of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

  std::unique_ptr<RegexSplitter> splitter_;
  bool nfc_ = false;            // Hugging Face's Qwen2 normalizer
  bool ignore_merges_ = false;  // Llama 3: a word that is a token is taken whole
  std::array<int32_t, 256> byte_id_{};  // token of each byte's code point, -1 if absent
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace bonsai
