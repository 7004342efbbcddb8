// The token table shared by every tokenizer kind: texts, types, scores, special ids, and the
// split of a text around special tokens (llama.cpp's tokenizer_st_partition).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/metadata.h"

namespace bonsai {

// llama.cpp's token types (spec §7, tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocab {
  std::string source;  // named in every error
  std::string model;   // tokenizer.ggml.model
  std::string pre;     // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> text;
  std::vector<TokenType> type;
  std::vector<float> score;
  // Keys view into `text` (which never changes after loading).
  std::unordered_map<std::string_view, int32_t> id_of;
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_bos = false;
  bool add_space_prefix = false;
  // Control, user-defined and unknown tokens, longest first: the order llama.cpp splits them out.
  std::vector<int32_t> special;

  // Reads model, pre, tokens, token_type, scores, the special ids and add_bos/add_space_prefix,
  // with llama.cpp's defaults per model kind (SentencePiece: bos 1, eos 2, unk 0, add_bos and
  // the dummy prefix on). A special id outside the vocabulary is ignored, as llama.cpp does
  // (llama2.c conversions store 0xFFFFFFFF for "none").
  static std::unique_ptr<Vocab> load(const Metadata& meta, const std::string& source);

  int32_t n() const { return int32_t(text.size()); }
  int32_t find(std::string_view t) const {
    auto it = id_of.find(t);
    return it == id_of.end() ? -1 : it->second;
  }
  bool is(int32_t id, TokenType t) const { return type[size_t(id)] == t; }
  // Throws Error naming the source for an id outside the vocabulary.
  void check_id(int32_t id) const;

  // A text split around special tokens: a fragment is either raw text or one token id.
  struct Fragment {
    int32_t id;  // -1 for raw text
    size_t off, len;
  };
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
};

}  // namespace bonsai
