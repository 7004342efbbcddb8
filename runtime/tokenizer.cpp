#include "runtime/tokenizer.h"

#include "formats/error.h"
#include "runtime/bpe_tokenizer.h"
#include "runtime/spm_tokenizer.h"
#include "runtime/vocab.h"

namespace bonsai {
namespace {

// llama.cpp's detokenizer clean-up (clean_spaces): drop the space before ?!., ; an apostrophe
// between two spaces loses both; " 's", " 'm", " 're", " 've" lose their space.
std::string clean_spaces(const std::string& in) {
  if (in.empty()) return in;
  std::string a(1, in[0]);
  for (size_t i = 1; i < in.size(); ++i) {
    const char x = in[i];
    if (in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string b(1, a[0]);
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      a[++i] = '\0';  // the following space is skipped, and no longer counts as a space
    }
    b += x;
  }
  std::string c(1, b[0]);
  for (size_t i = 1; i < b.size(); ++i) {
    const char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') c.pop_back();
      else if (i + 2 < b.size() && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))) c.pop_back();
    }
    c += x;
  }
  return c;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_metadata(const Metadata& meta, const std::string& source) {
  auto v = Vocab::load(meta, source);
  std::unique_ptr<Tokenizer> t;
  if (v->model == "gpt2") t = std::make_unique<BpeTokenizer>(std::move(v), meta);
  else t = std::make_unique<SpmTokenizer>(std::move(v));
  t->build_pieces();
  return t;
}

// llama.cpp's token_to_piece(special = true), cached for every id as llama.cpp does.
void Tokenizer::build_pieces() {
  const Vocab& v = *vocab_;
  pieces_.resize(v.text.size());
  for (size_t id = 0; id < v.text.size(); ++id) {
    const std::string& t = v.text[id];
    switch (v.type[id]) {
      case TokenType::Control:
      case TokenType::Unknown:
      case TokenType::UserDefined: pieces_[id] = t; break;
      case TokenType::Normal: pieces_[id] = normal_text(t); break;
      case TokenType::Byte: pieces_[id] = std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16))); break;
      default: break;  // unused and undefined tokens have no text
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  if (add_bos) {
    if (v.bos < 0) fail(v.source, "a BOS token was asked for but the vocabulary has none");
    out.push_back(v.bos);
  }
  bool after_special = true;
  for (const Vocab::Fragment& f : v.split_special(text, parse_special)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
    } else {
      encode_fragment(text.substr(f.off, f.len), after_special, out);
      after_special = false;
    }
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const Vocab& v = *vocab_;
  std::string out;
  // The dummy prefix comes off the first token only, and only if that token is text.
  bool strip_space = v.add_space_prefix;
  for (const int32_t id : ids) {
    v.check_id(id);
    const bool hidden = v.is(id, TokenType::Control) || v.is(id, TokenType::Unknown);
    if (!hidden) {
      const std::string& p = pieces_[size_t(id)];
      out.append(p, strip_space && !p.empty() && p[0] == ' ' ? 1 : 0);
    }
    strip_space = false;
  }
  return clean_spaces_ ? clean_spaces(out) : out;
}

std::string Tokenizer::piece(int32_t id) const {
  vocab_->check_id(id);
  return pieces_[size_t(id)];
}

int32_t Tokenizer::bos() const { return vocab_->bos; }
int32_t Tokenizer::eos() const { return vocab_->eos; }
bool Tokenizer::add_bos_default() const { return vocab_->add_bos; }
int32_t Tokenizer::n_vocab() const { return vocab_->n(); }
const std::string& Tokenizer::model() const { return vocab_->model; }

}  // namespace bonsai
