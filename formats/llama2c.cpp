#include "formats/llama2c.h"

#include <cstring>
#include <filesystem>

#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

namespace fs = std::filesystem;

int32_t read_i32le(const uint8_t* p) {
  uint32_t v = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  return int32_t(v);
}

float read_f32le(const uint8_t* p) {
  const uint32_t v = uint32_t(read_i32le(p));
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

// run.c's Config: seven int32 at the start of the checkpoint.
struct Config {
  int64_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier;  // vocab_size stored positive: the classifier is the embedding table
};
constexpr uint64_t kHeaderBytes = 7 * 4;

// Token ids llama2.c's tokenizer export fixes (sentencepiece's defaults).
constexpr int32_t kUnk = 0, kBos = 1, kEos = 2;
// tokenizer.ggml.token_type values (spec §7).
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

bool is_byte_piece(const std::string& s) {
  const auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// SentencePiece marks a word start with U+2581; llama2.c's export stored plain spaces.
std::string escape_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == ' ')
      out += "\xe2\x96\x81";
    else
      out += c;
  }
  return out;
}

}  // namespace

void add_llama2c_tokenizer(const std::string& path, Metadata& meta) {
  const auto file = MappedFile::open(path);
  const uint8_t* p = file->data();
  const uint64_t size = file->size();
  if (size < 4) fail(path, "file of ", size, " bytes is too small for a llama2.c tokenizer");
  if (read_i32le(p) < 0) fail(path, "negative max_token_length ", read_i32le(p));
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  // No token count is stored: entries run to the end of the file, each bounded by what is left.
  for (uint64_t at = 4; at < size;) {
    const size_t id = tokens.size();
    if (size - at < 8)
      fail(path, "token ", id, " at byte ", at, ": entry header cut short by the end of the file");
    const float score = read_f32le(p + at);
    const int32_t len = read_i32le(p + at + 4);
    at += 8;
    if (len < 0 || uint64_t(len) > size - at)
      fail(path, "token ", id, " at byte ", at - 4, ": length ", len, " runs past the end of the file");
    std::string text(reinterpret_cast<const char*>(p + at), size_t(len));
    at += uint64_t(len);
    // As llama.cpp's converter: the special pieces get SentencePiece's spellings (llama2.c stores
    // BOS/EOS as "\n<s>\n" / "\n</s>\n" for printing), byte pieces keep their "<0xNN>" text.
    int32_t type = kNormal;
    if (id == kUnk)
      text = "<unk>", type = kUnknown;
    else if (id == kBos)
      text = "<s>", type = kControl;
    else if (id == kEos)
      text = "</s>", type = kControl;
    else if (text.empty())
      type = kControl;
    else if (is_byte_piece(text))
      type = kByte;
    tokens.push_back(escape_spaces(text));
    scores.push_back(score);
    types.push_back(type);
  }
  if (tokens.size() <= size_t(kEos)) fail(path, "only ", tokens.size(), " tokens; unk, bos and eos need 3");
  meta.set_str("tokenizer.ggml.model", "llama");
  meta.set_strings("tokenizer.ggml.tokens", std::move(tokens));
  meta.set_f32s("tokenizer.ggml.scores", scores);
  meta.set_i32s("tokenizer.ggml.token_type", types);
  meta.set_u32("tokenizer.ggml.unknown_token_id", kUnk);
  meta.set_u32("tokenizer.ggml.bos_token_id", kBos);
  meta.set_u32("tokenizer.ggml.eos_token_id", kEos);
}

TensorSet read_llama2c(const std::string& path, const std::string& tokenizer_path) {
  const auto file = MappedFile::open(path);
  const uint64_t size = file->size();
  if (size < kHeaderBytes) fail(path, "file of ", size, " bytes is too small for a llama2.c header");
  int32_t h[7];
  for (int i = 0; i < 7; ++i) h[i] = read_i32le(file->data() + 4 * i);
  Config c{h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[5] > 0};
  c.vocab_size = c.vocab_size < 0 ? -c.vocab_size : c.vocab_size;  // int64: no overflow at INT32_MIN
  const auto header_str = [&] {
    return cat("(dim ", h[0], ", hidden_dim ", h[1], ", n_layers ", h[2], ", n_heads ", h[3], ", n_kv_heads ",
               h[4], ", vocab_size ", h[5], ", seq_len ", h[6], ")");
  };
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.vocab_size <= 0 || c.seq_len <= 0)
    fail(path, "not a llama2.c checkpoint: header ", header_str(), " has a value that is not positive");
  if (c.dim % c.n_heads != 0 || (c.dim / c.n_heads) % 2 != 0 || c.n_kv_heads > c.n_heads ||
      c.n_heads % c.n_kv_heads != 0)
    fail(path, "header ", header_str(),
         ": heads do not divide dim into even head sizes, or n_kv_heads does not divide n_heads");
  const int64_t head_size = c.dim / c.n_heads, kv_dim = head_size * c.n_kv_heads;

  // Every count below is < 2^31, so each product of two fits int64 and the whole sum fits in
  // 128 bits; comparing it with the file size bounds every view taken afterwards.
  const unsigned __int128 L = uint64_t(c.n_layers), D = uint64_t(c.dim), H = uint64_t(c.hidden_dim),
                          V = uint64_t(c.vocab_size), KV = uint64_t(kv_dim);
  const unsigned __int128 floats = V * D + L * D + L * D * D + 2 * L * D * KV + L * D * D + L * D +
                                   3 * L * D * H + D + uint64_t(c.seq_len) * uint64_t(head_size) +
                                   (c.shared_classifier ? 0 : V * D);
  const unsigned __int128 want = kHeaderBytes + 4 * floats;
  if (want != size) {
    const std::string want_str = want > UINT64_MAX ? "more than 2^64" : std::to_string(uint64_t(want));
    fail(path, "file is ", size, " bytes, but the header ", header_str(), " implies ", want_str);
  }

  TensorSet set;
  set.path = path;
  set.format = "llama2c";
  const uint8_t* at = file->data() + kHeaderBytes;
  // Takes the next n floats of the file (run.c's order), in ggml shape ne.
  const auto next = [&](int64_t n) {
    const uint8_t* p = at;
    at += uint64_t(n) * 4;
    return p;
  };
  const auto view = [](std::string name, std::vector<int64_t> ne, const uint8_t* data) {
    Tensor t;
    t.name = std::move(name);
    t.type = TypeId::F32;
    t.ne = std::move(ne);
    t.data = data;
    t.nbytes = uint64_t(t.nelements()) * 4;
    return t;
  };
  const int64_t L64 = c.n_layers, dim = c.dim, hid = c.hidden_dim;
  const uint8_t* embd = next(c.vocab_size * dim);
  const uint8_t* rms_att = next(L64 * dim);
  const uint8_t* wq = next(L64 * dim * dim);
  const uint8_t* wk = next(L64 * dim * kv_dim);
  const uint8_t* wv = next(L64 * dim * kv_dim);
  const uint8_t* wo = next(L64 * dim * dim);
  const uint8_t* rms_ffn = next(L64 * dim);
  const uint8_t* w1 = next(L64 * dim * hid);
  const uint8_t* w2 = next(L64 * dim * hid);
  const uint8_t* w3 = next(L64 * dim * hid);
  const uint8_t* rms_final = next(dim);
  next(c.seq_len * head_size);  // freq_cis_real and _imag: RoPE tables, recomputed by the runtime
  const uint8_t* wcls = c.shared_classifier ? embd : next(c.vocab_size * dim);

  // Tensor order and names as llama.cpp's convert-llama2c-to-ggml writes them. run.c's matrices
  // are row-major [out, in], which is ggml's ne [in, out]: no copy. The q/k rows need no
  // permutation either: llama2.c's export already permuted them for run.c's adjacent-pair RoPE.
  // Like that converter, output.weight is always present (the embedding table when shared).
  set.add(view("token_embd.weight", {dim, c.vocab_size}, embd));
  set.add(view("output_norm.weight", {dim}, rms_final));
  set.add(view("output.weight", {dim, c.vocab_size}, wcls));
  for (int64_t l = 0; l < L64; ++l) {
    const std::string b = cat("blk.", l, ".");
    set.add(view(b + "attn_q.weight", {dim, dim}, wq + 4 * uint64_t(l * dim * dim)));
    set.add(view(b + "attn_k.weight", {dim, kv_dim}, wk + 4 * uint64_t(l * dim * kv_dim)));
    set.add(view(b + "attn_v.weight", {dim, kv_dim}, wv + 4 * uint64_t(l * dim * kv_dim)));
    set.add(view(b + "attn_output.weight", {dim, dim}, wo + 4 * uint64_t(l * dim * dim)));
    set.add(view(b + "attn_norm.weight", {dim}, rms_att + 4 * uint64_t(l * dim)));
    set.add(view(b + "ffn_gate.weight", {dim, hid}, w1 + 4 * uint64_t(l * dim * hid)));
    set.add(view(b + "ffn_down.weight", {hid, dim}, w2 + 4 * uint64_t(l * dim * hid)));
    set.add(view(b + "ffn_up.weight", {dim, hid}, w3 + 4 * uint64_t(l * dim * hid)));
    set.add(view(b + "ffn_norm.weight", {dim}, rms_ffn + 4 * uint64_t(l * dim)));
  }
  set.keep(file);

  Metadata& m = set.meta;
  m.set_str("general.architecture", "llama");
  m.set_str("general.name", fs::path(path).stem().string());
  m.set_u32("llama.context_length", uint32_t(c.seq_len));
  m.set_u32("llama.embedding_length", uint32_t(dim));
  m.set_u32("llama.feed_forward_length", uint32_t(hid));
  m.set_u32("llama.attention.head_count", uint32_t(c.n_heads));
  m.set_u32("llama.attention.head_count_kv", uint32_t(c.n_kv_heads));
  m.set_u32("llama.block_count", uint32_t(L64));
  m.set_u32("llama.rope.dimension_count", uint32_t(head_size));
  // run.c's constants: RMSNorm eps 1e-5, RoPE base 10000.
  m.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  m.set_f32("llama.rope.freq_base", 10000.0f);
  m.set_u32("general.file_type", 0);  // all F32

  std::string tok = tokenizer_path;
  if (tok.empty()) {
    // llama2.c names a custom vocabulary tok<N>.bin; tokenizer.bin is its 32000-piece default.
    const fs::path dir = fs::path(path).parent_path();
    std::error_code ec;
    for (const std::string& name : {cat("tok", c.vocab_size, ".bin"), std::string("tokenizer.bin")})
      if (tok.empty() && fs::is_regular_file(dir / name, ec)) tok = (dir / name).string();
  }
  if (!tok.empty()) {
    add_llama2c_tokenizer(tok, m);
    const size_t n = m.find("tokenizer.ggml.tokens")->array.items.size();
    if (int64_t(n) != c.vocab_size)
      fail(tok, "holds ", n, " tokens, but the checkpoint ", path, " has a vocabulary of ", c.vocab_size);
  }
  return set;
}

}  // namespace bonsai
