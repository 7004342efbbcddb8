#include "runtime/bpe_tokenizer.h"

#include <queue>

#include "formats/error.h"
#include "runtime/byte_unicode.h"
#include "runtime/unicode_nfc.h"

namespace bonsai {
namespace {

// The tokenizer.json regexes with the case-insensitive contraction group spelled out, as
// llama.cpp spells them: PCRE2's caseless matching would also take "'ſ" (long s) as "'s",
// which neither llama.cpp nor the reference tokenizer does.
constexpr const char* kQwen2Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

BpeTokenizer::BpeTokenizer(std::unique_ptr<Vocab> vp, const Metadata& meta) : Tokenizer(std::move(vp)) {
  const Vocab& v = vocab();
  const std::string& src = v.source;
  if (v.pre == "qwen2") {
    splitter_ = std::make_unique<RegexSplitter>(kQwen2Regex, src);
    nfc_ = true;
  } else if (v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3") {
    splitter_ = std::make_unique<RegexSplitter>(kLlama3Regex, src);
    ignore_merges_ = true;
    clean_spaces_ = true;
  } else {
    fail(src, "BPE pre-tokenizer '", v.pre.empty() ? std::string("(none)") : v.pre,
         "' is unsupported (supported: qwen2, llama-bpe)");
  }

  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, byte_to_codepoint(uint8_t(b)));
    byte_id_[size_t(b)] = v.find(s);
  }

  std::optional<std::vector<std::string>> merges;
  try {
    merges = meta.get_strings("tokenizer.ggml.merges");
  } catch (const Error& e) {
    fail(src, e.what());
  }
  if (!merges) fail(src, "no tokenizer.ggml.merges (a BPE vocabulary needs its merges)");
  merges_.reserve(merges->size());
  std::string joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    // llama.cpp splits at the first space after the first byte (a token may be a lone space
    // only in the first position).
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) fail(src, "tokenizer.ggml.merges[", i, "] '", m, "' is not two tokens 'a b'");
    const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t ia = v.find(a), ib = v.find(b);
    joined.assign(a).append(b);
    const int32_t ir = v.find(joined);
    // Hugging Face refuses such a vocabulary too (MergeTokenOutOfVocabulary).
    if (ia < 0 || ib < 0 || ir < 0)
      fail(src, "tokenizer.ggml.merges[", i, "] '", m, "' names a token not in the vocabulary ('",
           ia < 0 ? a : ib < 0 ? b : std::string_view(joined), "')");
    // A repeated pair keeps its first (best) rank, as llama.cpp's map emplace does.
    merges_.emplace(pair_key(ia, ib), Merge{int32_t(i), ir});
  }
}

void BpeTokenizer::encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_) {
    normalized = nfc(text);
    text = normalized;
  }
  for (std::string_view word : splitter_->split(text)) encode_word(word, out);
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const Vocab& v = vocab();
  if (ignore_merges_) {
    std::string spelled;
    for (char c : word) append_utf8(spelled, byte_to_codepoint(uint8_t(c)));
    if (const int32_t id = v.find(spelled); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // One symbol per byte, linked as a list; a merge folds the right symbol into the left one.
  struct Sym {
    int32_t id, prev, next;
    uint8_t first_byte;  // for the fallback of a byte with no token
    bool alive;
  };
  struct Bigram {
    int32_t rank, left, right, left_id, right_id, result;
  };
  // Lowest rank first; on equal rank the leftmost pair, as llama.cpp's llm_bigram_bpe.
  auto later = [](const Bigram& x, const Bigram& y) {
    return x.rank > y.rank || (x.rank == y.rank && x.left > y.left);
  };
  const int32_t n = int32_t(word.size());
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const auto b = uint8_t(word[size_t(i)]);
    sym[size_t(i)] = {byte_id_[b], i - 1, i + 1 < n ? i + 1 : -1, b, true};
  }
  std::vector<Bigram> storage;
  storage.reserve(size_t(n));
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(later)> queue(later, std::move(storage));
  auto add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const int32_t a = sym[size_t(l)].id, b = sym[size_t(r)].id;
    if (a < 0 || b < 0) return;
    auto it = merges_.find(pair_key(a, b));
    if (it != merges_.end()) queue.push({it->second.rank, l, r, a, b, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) add(i, i + 1);

  while (!queue.empty()) {
    const Bigram g = queue.top();
    queue.pop();
    Sym& l = sym[size_t(g.left)];
    Sym& r = sym[size_t(g.right)];
    // Stale: one side was merged away or grew since the pair was queued (ids name texts
    // uniquely, so this is llama.cpp's text comparison).
    if (!l.alive || !r.alive || l.id != g.left_id || r.id != g.right_id) continue;
    l.id = g.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = g.left;
    add(l.prev, g.left);
    add(g.left, l.next);
  }

  for (int32_t i = 0; i >= 0 && i < n; i = sym[size_t(i)].next) {
    const Sym& s = sym[size_t(i)];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    // A byte whose code point is not a token (only in a defective vocabulary): llama.cpp then
    // tries each UTF-8 byte of the spelled code point as a one-byte token and drops the rest.
    std::string spelled;
    append_utf8(spelled, byte_to_codepoint(s.first_byte));
    for (char c : spelled)
      if (const int32_t id = v.find(std::string_view(&c, 1)); id >= 0) out.push_back(id);
  }
}

std::string BpeTokenizer::normal_text(const std::string& t) const {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    const size_t start = i;
    const int32_t cp = next_codepoint(t, i);
    const int b = cp < 0 ? -1 : codepoint_to_byte(uint32_t(cp));
    // A code point outside the byte map is not byte-level text; keep it as written.
    if (b < 0) out.append(t, start, i - start);
    else out += char(b);
  }
  return out;
}

}  // namespace bonsai
