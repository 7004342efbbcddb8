#include "runtime/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "formats/error.h"

namespace bonsai {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// Bytes of the UTF-8 sequence a lead byte starts (llama.cpp's unicode_len_utf8: a stray
// continuation byte counts as one).
size_t utf8_len(char c) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[uint8_t(c) >> 4];
}

}  // namespace

SpmTokenizer::SpmTokenizer(std::unique_ptr<Vocab> vp) : Tokenizer(std::move(vp)) {
  const Vocab& v = vocab();
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = v.find(hex);
    if (id < 0) {
      const char c = char(b);
      id = v.find(std::string_view(&c, 1));
    }
    byte_id_[size_t(b)] = id;
  }
}

int32_t SpmTokenizer::byte_token(uint8_t b) const {
  if (byte_id_[b] >= 0) return byte_id_[b];
  // llama.cpp has no answer here either (it throws); the unknown token is the honest stand-in.
  if (vocab().unk >= 0) return vocab().unk;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", b);
  fail(vocab().source, "no token for byte ", hex, " and no unknown token");
}

void SpmTokenizer::encode_fragment(std::string_view fragment, bool after_special, std::vector<int32_t>& out) const {
  const Vocab& v = vocab();
  std::string text;
  text.reserve(fragment.size() + 8);
  if (v.add_space_prefix && after_special) text += kSpace;
  for (char c : fragment) {
    if (c == ' ') text += kSpace;
    else text += c;
  }

  struct Sym {
    int32_t prev, next;
    size_t off, n;  // bytes of `text`; n == 0 once merged into its left neighbour
  };
  struct Bigram {
    int32_t left, right;
    float score;
    size_t size;
  };
  // Highest score first; on equal score the leftmost pair (llama.cpp's llm_bigram_spm).
  auto lower = [](const Bigram& x, const Bigram& y) {
    return x.score < y.score || (x.score == y.score && x.left > y.left);
  };
  std::vector<Sym> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_len(text[off]), text.size() - off);
    const int32_t index = int32_t(sym.size());
    sym.push_back({index - 1, off + n == text.size() ? -1 : index + 1, off, n});
    off += n;
  }
  if (sym.empty()) return;

  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  auto add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const size_t size = sym[size_t(l)].n + sym[size_t(r)].n;
    const int32_t id = v.find(std::string_view(text).substr(sym[size_t(l)].off, size));
    if (id < 0) return;
    queue.push({l, r, v.score[size_t(id)], size});
  };
  for (int32_t i = 1; i < int32_t(sym.size()); ++i) add(i - 1, i);

  while (!queue.empty()) {
    const Bigram g = queue.top();
    queue.pop();
    Sym& l = sym[size_t(g.left)];
    Sym& r = sym[size_t(g.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != g.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = g.left;
    add(l.prev, g.left);
    add(g.left, l.next);
  }

  // Every symbol is now a token or a single character that has none (merges only ever form
  // tokens), so llama.cpp's resegment() reduces to: the token, else the character's bytes.
  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) {
    const std::string_view s = std::string_view(text).substr(sym[size_t(i)].off, sym[size_t(i)].n);
    if (const int32_t id = v.find(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : s) out.push_back(byte_token(uint8_t(c)));
  }
}

std::string SpmTokenizer::normal_text(const std::string& t) const {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    if (std::string_view(t).substr(i, kSpace.size()) == kSpace) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

}  // namespace bonsai
