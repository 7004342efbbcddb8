#include "runtime/vocab.h"

#include <algorithm>
#include <climits>

#include "formats/error.h"

namespace bonsai {
namespace {

bool is_byte_text(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return t.size() == 6 && t.starts_with("<0x") && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

void load_into(Vocab& v, const Metadata& meta) {
  const std::string& src = v.source;
  auto model = meta.get_str("tokenizer.ggml.model");
  if (!model) fail(src, "no tokenizer.ggml.model key: the file carries no tokenizer");
  v.model = *model;
  if (v.model != "gpt2" && v.model != "llama")
    fail(src, "tokenizer model '", v.model, "' is unsupported (supported: gpt2 = byte-level BPE, llama = SentencePiece)");
  v.pre = meta.get_str("tokenizer.ggml.pre").value_or("");

  auto tokens = meta.get_strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail(src, "no tokenizer.ggml.tokens");
  if (tokens->size() > size_t(INT32_MAX)) fail(src, "too many tokens (", tokens->size(), ")");
  v.text = std::move(*tokens);
  const size_t n = v.text.size();

  v.type.assign(n, TokenType::Normal);
  if (auto types = meta.get_ints("tokenizer.ggml.token_type")) {
    if (types->size() < n) fail(src, "tokenizer.ggml.token_type has ", types->size(), " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      v.type[i] = t >= 0 && t <= 6 ? TokenType(t) : TokenType::Undefined;
    }
  }
  v.score.assign(n, 0.0f);
  if (auto scores = meta.get_floats("tokenizer.ggml.scores")) {
    if (scores->size() < n) fail(src, "tokenizer.ggml.scores has ", scores->size(), " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i) v.score[i] = float((*scores)[i]);
  }

  v.id_of.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    // llama.cpp renames empty tokens so every text stays unique and findable.
    if (v.text[i].empty()) v.text[i] = cat("[EMPTY_", i, "]");
    if (v.type[i] == TokenType::Byte && !is_byte_text(v.text[i]))
      fail(src, "byte token ", i, " '", v.text[i], "' is not of the form <0xHH>");
  }
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = v.id_of.emplace(std::string_view(v.text[i]), int32_t(i));
    if (!fresh) fail(src, "token '", v.text[i], "' appears twice (ids ", it->second, " and ", i, ")");
  }

  const bool spm = v.model == "llama";
  if (spm) {
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else {
    v.add_bos = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  }
  auto special_id = [&](const char* key, int32_t& id) {
    if (id >= int64_t(n)) id = -1;
    if (auto x = meta.get_int(key); x && *x >= 0 && *x < int64_t(n)) id = int32_t(*x);
  };
  special_id("tokenizer.ggml.bos_token_id", v.bos);
  special_id("tokenizer.ggml.eos_token_id", v.eos);
  special_id("tokenizer.ggml.unknown_token_id", v.unk);
  if (auto b = meta.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = meta.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;

  for (size_t i = 0; i < n; ++i)
    if (v.type[i] == TokenType::Control || v.type[i] == TokenType::UserDefined || v.type[i] == TokenType::Unknown)
      v.special.push_back(int32_t(i));
  std::stable_sort(v.special.begin(), v.special.end(),
                   [&](int32_t a, int32_t b) { return v.text[size_t(a)].size() > v.text[size_t(b)].size(); });
}

}  // namespace

std::unique_ptr<Vocab> Vocab::load(const Metadata& meta, const std::string& source) {
  auto v = std::make_unique<Vocab>();
  v->source = source;
  try {
    load_into(*v, meta);
  } catch (const Error& e) {
    // Metadata's typed getters name the key but not the file.
    if (std::string_view(e.what()).starts_with(source + ": ")) throw;
    fail(source, e.what());
  }
  return v;
}

void Vocab::check_id(int32_t id) const {
  if (id < 0 || id >= n()) fail(source, "token id ", id, " is outside the vocabulary (", n(), " tokens)");
}

// llama.cpp's tokenizer_st_partition: each special token in turn, longest first, is cut out of
// every raw fragment left to right. Control and unknown tokens only when parse_special;
// user-defined tokens always (Hugging Face matches added tokens before pre-tokenizing).
std::vector<Vocab::Fragment> Vocab::split_special(std::string_view s, bool parse_special) const {
  std::vector<Fragment> frags, next;
  if (s.empty()) return frags;
  frags.push_back({-1, 0, s.size()});
  for (const int32_t id : special) {
    if (!parse_special && !is(id, TokenType::UserDefined)) continue;
    const std::string& t = text[size_t(id)];
    // Cheap pre-check: most special tokens never occur in the text.
    if (s.find(t) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t end = f.off + f.len;
      size_t pos = f.off;
      for (;;) {
        const size_t m = s.substr(0, end).find(t, pos);
        if (m == std::string_view::npos) break;
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({id, m, t.size()});
        pos = m + t.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace bonsai
