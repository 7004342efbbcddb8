// SentencePiece BPE (tokenizer.ggml.model "llama"), as llama.cpp's llm_tokenizer_spm: a dummy
// prefix space, ' ' spelled U+2581, then adjacent pieces merged while the merged piece is a
// token, highest score first; characters left without a token fall back to <0xNN> byte tokens.
#pragma once
#include <array>

#include "runtime/tokenizer.h"
#include "runtime/vocab.h"

namespace bonsai {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(std::unique_ptr<Vocab> vocab);

 private:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string normal_text(const std::string& token_text) const override;
  int32_t byte_token(uint8_t b) const;

  std::array<int32_t, 256> byte_id_{};  // <0xNN>, else the one-byte token, else -1
};

}  // namespace bonsai
