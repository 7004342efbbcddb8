// Text <-> token ids, as llama.cpp's llama_vocab does it for the two tokenizer kinds our models
// use: byte-level BPE (`tokenizer.ggml.model` "gpt2": Qwen2/Qwen3, Llama 3) and SentencePiece
// BPE ("llama": Llama 1/2, llama2.c models). Built from the tokenizer.ggml.* metadata keys, so a
// GGUF, a .bonsai file and a Hugging Face folder (formats/hf_model.h) all give the same tokenizer.
//
// Where llama.cpp and Hugging Face differ, the ids follow Hugging Face (the reference vectors
// come from it): Qwen2's NFC normalizer is applied (llama.cpp skips it; the two agree on NFC text).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/metadata.h"

namespace bonsai {

struct Vocab;

class Tokenizer {
 public:
  // Throws Error("<source>: ...") for a missing or unsupported tokenizer.ggml.model / pre, token
  // arrays of the wrong type or length, duplicate tokens, or merges naming unknown tokens.
  static std::unique_ptr<Tokenizer> from_metadata(const Metadata& meta,
                                                  const std::string& source_path_for_errors);
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // llama_tokenize(text, add_special = add_bos, parse_special). With parse_special, control
  // tokens written in the text (e.g. "<|im_end|>") become their ids; user-defined added tokens
  // (e.g. Qwen's "<think>") are always recognized, as in llama.cpp and Hugging Face.
  // Throws Error when add_bos is asked of a vocabulary without a BOS token.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // llama_detokenize(remove_special = false, unparse_special = false): control and unknown
  // tokens give no text; for SentencePiece, the dummy-prefix space is dropped from the first
  // token when it is a text token (so decode(encode(x)) == x without BOS; after a BOS the space
  // stays, exactly as llama.cpp prints " Once upon a time" after BOS). Llama-3 vocabularies get
  // llama.cpp's clean-up of spaces before punctuation. Throws Error for an id outside the vocab.
  std::string decode(std::span<const int32_t> ids) const;

  // The text of one token for display (--pieces): control tokens as written ("<|im_end|>"),
  // byte tokens as their byte, others decoded. Throws Error for an id outside the vocab.
  std::string piece(int32_t id) const;

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;  // -1 when the vocabulary has none
  bool add_bos_default() const;
  int32_t n_vocab() const;
  const std::string& model() const;  // "gpt2" or "llama"

 protected:
  explicit Tokenizer(std::unique_ptr<Vocab> vocab);
  // Appends the ids of a piece of text that holds no special token. `after_special`: the piece
  // starts the text or follows a special token (SentencePiece adds its dummy prefix there).
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // The text a NORMAL token stands for (byte-level decode, or U+2581 -> ' ').
  virtual std::string normal_text(const std::string& token_text) const = 0;
  const Vocab& vocab() const { return *vocab_; }
  bool clean_spaces_ = false;  // llama.cpp's detokenizer space clean-up (Llama-3 BPE)

 private:
  void build_pieces();
  std::unique_ptr<Vocab> vocab_;
  std::vector<std::string> pieces_;  // piece(id) for every id
};

}  // namespace bonsai
