// Tokenizers against the reference ids: llama.cpp's test vectors (made with the Hugging Face
// tokenizers), Qwen3 ids of the Chinese eval text (transformers.js), and llama.cpp's own ids of
// the TinyStories text with the stories260K vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/hf_model.h"
#include "runtime/byte_unicode.h"
#include "runtime/tokenizer.h"
#include "support.h"

namespace bonsai {
namespace {

using test::read_bytes;
using test::shared_file;

// Time limits hold for the optimized build; sanitizers and -O0 are many times slower.
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
constexpr double kSlowBuild = 25.0;
#else
constexpr double kSlowBuild = 1.0;
#endif

constexpr const char* kQwenJson = "tokenizers/qwen3/tokenizer.json";
constexpr const char* kVocabDir = "tokenizers/llamacpp-vocab/";
constexpr const char* kQwenGguf = "tokenizers/qwen3/qwen3-vocab.gguf";
constexpr const char* kSpmGguf = "tokenizers/llamacpp-vocab/ggml-vocab-llama-spm.gguf";
constexpr const char* kStories = "models/stories260K/stories260K.gguf";

std::string read_text(const std::filesystem::path& p) {
  const auto b = read_bytes(p);
  return std::string(b.begin(), b.end());
}

// llama.cpp's test-tokenizer-0 reading of a .inp file: every text followed by the separator.
std::vector<std::string> read_inp(const std::filesystem::path& p) {
  const std::string all = read_text(p), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t pos = 0;;) {
    const size_t m = all.find(sep, pos);
    if (m == std::string::npos) break;
    cases.push_back(all.substr(pos, m - pos));
    pos = m + sep.size();
  }
  return cases;
}

std::vector<std::vector<int32_t>> read_out(const std::filesystem::path& p) {
  std::istringstream in(read_text(p));
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    out.emplace_back();
    for (int32_t id; ls >> id;) out.back().push_back(id);
  }
  return out;
}

Metadata qwen3_hf_metadata() {
  Metadata meta;
  add_hf_tokenizer(shared_file(kQwenJson).string(), 151936, meta);
  return meta;
}

// Parsing the 11 MB tokenizer.json takes a while on a slow machine: once per test binary.
const Tokenizer& qwen3() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_metadata(qwen3_hf_metadata(), kQwenJson);
  return *tok;
}

std::unique_ptr<Tokenizer> from_gguf(const std::string& rel) {
  const std::string path = shared_file(rel).string();
  return Tokenizer::from_metadata(read_gguf(path).meta, path);
}

void expect_vectors(const Tokenizer& tok, const std::string& inp, const std::string& out) {
  const auto cases = read_inp(shared_file(inp));
  const auto want = read_out(shared_file(out));
  ASSERT_EQ(cases.size(), 46u);
  ASSERT_EQ(want.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    // test-tokenizer-0: no BOS, special tokens not parsed.
    EXPECT_EQ(tok.encode(cases[i], false, false), want[i]) << "case " << i << ": '" << cases[i] << "'";
    // Every case is NFC, so the text comes back byte for byte.
    EXPECT_EQ(tok.decode(tok.encode(cases[i], false, false)), cases[i]) << "case " << i;
  }
}

TEST(ByteUnicode, Utf8OfEachLength) {
  // Each encoding length at its first code point, and the last code point of the 1-byte range.
  std::string s;
  for (uint32_t cp : {0x20000u, 0x7Fu, 0x80u, 0x800u, 0x10FFFFu}) append_utf8(s, cp);
  EXPECT_EQ(s, "𠀀\x7F\u0080\u0800\U0010FFFF");
  size_t i = 0;
  for (int32_t cp : {0x20000, 0x7F, 0x80, 0x800, 0x10FFFF}) EXPECT_EQ(next_codepoint(s, i), cp);
  EXPECT_EQ(i, s.size());
}

TEST(HfTokenizer, Qwen3KeysAsConvertHfToGguf) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  const Metadata meta = qwen3_hf_metadata();
  EXPECT_EQ(meta.get_str("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(meta.get_str("tokenizer.ggml.pre"), "qwen2");
  const auto tokens = *meta.get_strings("tokenizer.ggml.tokens");
  const auto types = *meta.get_ints("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), 151936u);
  ASSERT_EQ(types.size(), tokens.size());
  EXPECT_EQ(tokens[0], "!");
  EXPECT_EQ(types[0], 1);
  EXPECT_EQ(tokens[151645], "<|im_end|>");
  EXPECT_EQ(types[151645], 3);  // special added token
  EXPECT_EQ(tokens[151659], "<|fim_prefix|>");
  EXPECT_EQ(types[151659], 3);  // not special in tokenizer.json, but looks special
  EXPECT_EQ(tokens[151667], "<think>");
  EXPECT_EQ(types[151667], 4);  // user-defined
  EXPECT_EQ(tokens[151669], "[PAD151669]");
  EXPECT_EQ(types[151935], 5);
  const auto merges = *meta.get_strings("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 151387u);
  EXPECT_EQ(merges[0], "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ", from the pair form ["Ġ", "Ġ"]
  EXPECT_EQ(meta.get_int("tokenizer.ggml.eos_token_id"), 151645);
  EXPECT_EQ(meta.get_int("tokenizer.ggml.padding_token_id"), 151643);
  EXPECT_FALSE(meta.has("tokenizer.ggml.bos_token_id"));  // tokenizer_config has no bos_token
  EXPECT_EQ(meta.get_bool("tokenizer.ggml.add_bos_token"), false);
  ASSERT_TRUE(meta.has("tokenizer.chat_template"));
  EXPECT_NE(meta.get_str("tokenizer.chat_template")->find("<|im_start|>"), std::string::npos);
}

// What llama.cpp's own conversion wrote (qwen3-vocab.gguf, made with gguf-py from the same two
// files) is what add_hf_tokenizer writes, key for key; only bos_token_id came from config.json.
TEST(HfTokenizer, SameKeysAsLlamaCppVocabGguf) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  BONSAI_REQUIRE_SHARED(kQwenGguf);
  const Metadata ours = qwen3_hf_metadata();
  const Metadata theirs = read_gguf(shared_file(kQwenGguf).string()).meta;
  size_t compared = 0;
  for (const auto& [key, value] : theirs.items()) {
    if (!key.starts_with("tokenizer.") || key == "tokenizer.ggml.bos_token_id") continue;
    const KvValue* mine = ours.find(key);
    ASSERT_NE(mine, nullptr) << key;
    EXPECT_TRUE(*mine == value) << key << ": " << kv_to_string(*mine) << " vs " << kv_to_string(value);
    ++compared;
  }
  EXPECT_EQ(compared, 9u);
  for (const auto& [key, value] : ours.items()) EXPECT_TRUE(theirs.has(key)) << key << " not in the llama.cpp file";
}

TEST(BpeTokenizer, Qwen2VectorsFromVocabGguf) {
  BONSAI_REQUIRE_SHARED(kQwenGguf);
  BONSAI_REQUIRE_SHARED(std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.out");
  const auto tok = from_gguf(kQwenGguf);
  expect_vectors(*tok, std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.inp",
                 std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.out");
  EXPECT_EQ(tok->bos(), 151643);  // config.json's, stored by the llama.cpp conversion
  EXPECT_FALSE(tok->add_bos_default());
}

TEST(BpeTokenizer, Qwen2VectorsFromTokenizerJson) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  BONSAI_REQUIRE_SHARED(std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.out");
  expect_vectors(qwen3(), std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.inp",
                 std::string(kVocabDir) + "ggml-vocab-qwen2.gguf.out");
}

TEST(BpeTokenizer, QwenReadmeSpotCheck) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  const Tokenizer& tok = qwen3();
  const std::string text = "Hello world, \xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x81<think>";  // 你好！
  const std::vector<int32_t> want = {9707, 1879, 11, 220, 108386, 6313, 151667};
  EXPECT_EQ(tok.encode(text, false, true), want);
  // <think> is user-defined: recognized even without parse_special, as in llama.cpp and HF.
  EXPECT_EQ(tok.encode(text, false, false), want);
  EXPECT_EQ(tok.decode(want), text);
  EXPECT_EQ(tok.piece(151667), "<think>");
  EXPECT_EQ(tok.bos(), -1);  // only config.json names Qwen's BOS; the HF folder reader adds it
  EXPECT_EQ(tok.eos(), 151645);
  EXPECT_FALSE(tok.add_bos_default());
  EXPECT_EQ(tok.n_vocab(), 151936);
  EXPECT_EQ(tok.model(), "gpt2");
}

TEST(BpeTokenizer, ControlTokensOnlyWithParseSpecial) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  const Tokenizer& tok = qwen3();
  // transformers.js: encode("a<|im_end|>b") == [64, 151645, 65].
  EXPECT_EQ(tok.encode("a<|im_end|>b", false, true), (std::vector<int32_t>{64, 151645, 65}));
  const auto plain = tok.encode("a<|im_end|>b", false, false);
  EXPECT_GT(plain.size(), 3u);
  for (int32_t id : plain) EXPECT_LT(id, 151643) << "control token parsed without parse_special";
  EXPECT_EQ(tok.decode(plain), "a<|im_end|>b");
  // Control tokens give no text when decoding (llama.cpp's default), but show as pieces.
  EXPECT_EQ(tok.decode(std::vector<int32_t>{64, 151645, 65}), "ab");
  EXPECT_EQ(tok.piece(151645), "<|im_end|>");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{151935}), "");  // padding ids have no text
}

TEST(BpeTokenizer, NfcLikeHuggingFace) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  const Tokenizer& tok = qwen3();
  // transformers.js gives [963] for both "e" + U+0301 and U+00E9: Qwen's NFC normalizer.
  // (llama.cpp does not normalize and would give two tokens for the decomposed form.)
  EXPECT_EQ(tok.encode("e\xCC\x81", false, false), std::vector<int32_t>{963});
  EXPECT_EQ(tok.encode("\xC3\xA9", false, false), std::vector<int32_t>{963});
  // U+212B ANGSTROM SIGN composes to U+00C5: [144044] in transformers.js.
  EXPECT_EQ(tok.encode("\xE2\x84\xAB", false, false), std::vector<int32_t>{144044});
  // "'ſ" is not the contraction "'s" ([2132, 6, 144815, 5394] in transformers.js).
  EXPECT_EQ(tok.encode("It'\xC5\xBF ok", false, false), (std::vector<int32_t>{2132, 6, 144815, 5394}));
}

TEST(BpeTokenizer, AnyBytesRoundTrip) {
  BONSAI_REQUIRE_SHARED(kQwenJson);
  const Tokenizer& tok = qwen3();
  // Not UTF-8: byte-level BPE still encodes every byte, and decoding gives them back.
  const std::string junk = std::string("\xFF\xFE abc \xC3 \xE4\xBD", 12) + std::string(1, '\0') + "x\x80\x80";
  const auto ids = tok.encode(junk, false, false);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tok.decode(ids), junk);
  // Runs far longer than any regex backtracking stack.
  const std::string spaces = std::string(300000, ' ') + "x" + std::string(200000, '\n');
  EXPECT_EQ(tok.decode(tok.encode(spaces, false, false)), spaces);
  EXPECT_TRUE(tok.encode("", false, false).empty());
}

TEST(BpeTokenizer, ChineseEvalTextExact) {
  const std::string txt = "corpora/zh/eval-debian-handbook-zh-CN.txt";
  const std::string ref = "corpora/zh/eval-debian-handbook-zh-CN.qwen3.u32";
  BONSAI_REQUIRE_SHARED(kQwenJson);
  BONSAI_REQUIRE_SHARED(txt);
  BONSAI_REQUIRE_SHARED(ref);
  const Tokenizer& tok = qwen3();
  const std::string text = read_text(shared_file(txt));
  const auto raw = read_bytes(shared_file(ref));
  ASSERT_EQ(raw.size() % 4, 0u);
  std::vector<int32_t> want(raw.size() / 4);
  for (size_t i = 0; i < want.size(); ++i)
    want[i] = int32_t(uint32_t(raw[4 * i]) | uint32_t(raw[4 * i + 1]) << 8 | uint32_t(raw[4 * i + 2]) << 16 |
                      uint32_t(raw[4 * i + 3]) << 24);
  ASSERT_EQ(want.size(), 115240u);
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = tok.encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, got.size()) << "first difference at token " << first_diff;
  EXPECT_LT(s, 30.0 * kSlowBuild) << "encoding 500 KB took " << s << " s";
}

TEST(BpeTokenizer, ChineseCorporaRoundTrip) {
  const std::filesystem::path dir = shared_file("corpora/zh");
  BONSAI_REQUIRE_SHARED(kQwenJson);
  BONSAI_REQUIRE_SHARED("corpora/zh");
  const Tokenizer& tok = qwen3();
  const auto t0 = std::chrono::steady_clock::now();
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".txt") continue;
    const std::string text = read_text(e.path());
    EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text) << e.path();
    ++files;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(files, 4u);
  // A guard against a quadratic slowdown, not a speed test (speed is measured by benchmarks):
  // generous, so that a loaded machine does not fail it.
  EXPECT_LT(s, 120.0 * kSlowBuild) << "round trip of the zh corpora took " << s << " s";
  std::cout << "zh corpora round trip: " << files << " files in " << s << " s\n";
}

TEST(SpmTokenizer, LlamaSpmVectors) {
  BONSAI_REQUIRE_SHARED(kSpmGguf);
  const auto tok = from_gguf(kSpmGguf);
  EXPECT_EQ(tok->model(), "llama");
  EXPECT_EQ(tok->n_vocab(), 32000);
  expect_vectors(*tok, std::string(kVocabDir) + "ggml-vocab-llama-spm.gguf.inp",
                 std::string(kVocabDir) + "ggml-vocab-llama-spm.gguf.out");
}

TEST(SpmTokenizer, BosSpecialTokensAndDecode) {
  BONSAI_REQUIRE_SHARED(kSpmGguf);
  const auto tok = from_gguf(kSpmGguf);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos_default());
  const auto plain = tok->encode("Hello world", false, false);
  auto with_bos = tok->encode("Hello world", true, false);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with_bos.begin() + 1));
  EXPECT_EQ(tok->piece(plain[0]), " Hello");  // the dummy prefix, U+2581 shown as a space
  EXPECT_EQ(tok->decode(plain), "Hello world");
  // After BOS llama.cpp keeps the prefix space (llama-completion prints " Once upon a time").
  EXPECT_EQ(tok->decode(with_bos), " Hello world");
  EXPECT_EQ(tok->piece(1), "<s>");
  // "<s>" is a control token: parsed only with parse_special, and the text after it gets its
  // own dummy prefix, as in llama.cpp.
  const auto parsed = tok->encode("<s>Hello world", false, true);
  EXPECT_EQ(parsed, with_bos);
  EXPECT_NE(tok->encode("<s>Hello world", false, false), with_bos);
  // Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes.
  const std::string rare = "\xF0\x9F\xA6\x99";  // U+1F999
  const auto ids = tok->encode(rare, false, false);
  ASSERT_EQ(ids.size(), 5u);  // "▁" then four <0xNN>
  EXPECT_EQ(tok->piece(ids[1]), "\xF0");
  EXPECT_EQ(tok->decode(ids), rare);
  EXPECT_TRUE(tok->encode("", false, false).empty());
}

TEST(SpmTokenizer, Stories260KTinyStoriesExact) {
  const std::string txt = "corpora/en/tinystories_validation_100.txt";
  const std::string ref = "models/stories260K/tinystories_validation_100.tok512.ids.txt";
  BONSAI_REQUIRE_SHARED(kStories);
  BONSAI_REQUIRE_SHARED(txt);
  BONSAI_REQUIRE_SHARED(ref);
  const auto tok = from_gguf(kStories);
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos(), 1);  // stores 0xFFFFFFFF for sep/pad ids: ignored, as llama.cpp does
  const std::string text = read_text(shared_file(txt));
  std::vector<int32_t> want;
  std::istringstream in(read_text(shared_file(ref)));
  for (int32_t id; in >> id;) want.push_back(id);
  ASSERT_EQ(want.size(), 26630u);
  const auto got = tok->encode(text, tok->add_bos_default(), false);
  ASSERT_EQ(got.size(), want.size());
  size_t first_diff = 0;
  while (first_diff < got.size() && got[first_diff] == want[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, got.size()) << "first difference at token " << first_diff;
  EXPECT_EQ(tok->decode(std::span(got).subspan(1)), text);
}

// A tiny byte-level tokenizer.json: the 256 byte code points, a few merges, Qwen2's regex.
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

nlohmann::json tiny_tokenizer_json(bool pair_merges, const char* split = kQwen2Split) {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<std::string> byte_text(256);
  int32_t id = 0;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    // GPT-2's bytes_to_unicode, written out independently of the runtime's table.
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const uint32_t cp = printable ? uint32_t(b) : 256u + uint32_t(extra++);
    std::string s;
    if (cp < 0x80) s += char(cp);
    else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
    byte_text[size_t(b)] = s;
    vocab[s] = id++;
  }
  const std::string G = "\xC4\xA0";  // Ġ, the space
  for (const std::string& t : std::vector<std::string>{"he", "ll", "hell", "hello", G + "w", G + "wo", "12", "123"})
    vocab[t] = id++;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {G, "w"}, {G + "w", "o"}, {"1", "2"}, {"12", "3"}};
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    if (pair_merges) m.push_back({a, b});
    else m.push_back(a + " " + b);
  }
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}};
  j["added_tokens"] = nlohmann::json::array(
      {{{"id", id}, {"content", "<|end|>"}, {"special", true}}, {{"id", id + 1}, {"content", "<x>"}, {"special", false}}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", split}}},
         {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}}}}};
  return j;
}

std::string write_json(const std::filesystem::path& dir, const nlohmann::json& j, const std::string& name = "tokenizer.json") {
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::ofstream(p) << j.dump();
  return p.string();
}

TEST(HfTokenizer, MergesAsStringsOrPairsAndTinyEncode) {
  const auto dir = test::scratch_dir();
  Metadata a, b;
  add_hf_tokenizer(write_json(dir / "pairs", tiny_tokenizer_json(true)), 0, a);
  add_hf_tokenizer(write_json(dir / "strings", tiny_tokenizer_json(false)), 300, b);
  EXPECT_EQ(a.get_strings("tokenizer.ggml.merges"), b.get_strings("tokenizer.ggml.merges"));
  EXPECT_EQ(a.get_strings("tokenizer.ggml.tokens")->size(), 256u + 8 + 2);  // n_vocab 0: as many as ids
  EXPECT_EQ(b.get_strings("tokenizer.ggml.tokens")->size(), 300u);
  EXPECT_FALSE(a.has("tokenizer.ggml.eos_token_id"));  // no tokenizer_config.json beside it
  const auto tok = Tokenizer::from_metadata(b, "tiny");
  // "hello world<x>": hello merges fully; " wo" merges, "r", "l", "d" stay bytes.
  const auto ids = tok->encode("hello world<x>", false, false);
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(tok->piece(ids[0]), "hello");
  EXPECT_EQ(tok->piece(ids[1]), " wo");
  EXPECT_EQ(ids[5], 265);
  EXPECT_EQ(tok->decode(ids), "hello world<x>");
}

TEST(HfTokenizer, ConfigBesideGivesSpecialIds) {
  const auto dir = test::scratch_dir();
  const std::string path = write_json(dir, tiny_tokenizer_json(true));
  write_json(dir, {{"bos_token", "<|end|>"}, {"eos_token", {{"content", "<|end|>"}}}, {"add_bos_token", true},
                   {"chat_template", "{{ messages }}"}}, "tokenizer_config.json");
  Metadata meta;
  add_hf_tokenizer(path, 0, meta);
  EXPECT_EQ(meta.get_int("tokenizer.ggml.bos_token_id"), 264);
  EXPECT_EQ(meta.get_int("tokenizer.ggml.eos_token_id"), 264);
  EXPECT_EQ(meta.get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(meta.get_str("tokenizer.chat_template"), "{{ messages }}");
  const auto tok = Tokenizer::from_metadata(meta, path);
  EXPECT_EQ(tok->encode("he", true, false), (std::vector<int32_t>{264, 256}));
}

// The Llama-3 regex takes digits three at a time (Qwen2's one at a time), and llama.cpp cleans
// spaces before punctuation when decoding a Llama-3 vocabulary (the full Llama 3 tokenizer.json
// is not among the fixtures; llama.cpp's llama-bpe vectors pass with it).
TEST(HfTokenizer, Llama3PreTokenizer) {
  const auto dir = test::scratch_dir();
  Metadata q, l;
  add_hf_tokenizer(write_json(dir / "qwen", tiny_tokenizer_json(true)), 0, q);
  add_hf_tokenizer(write_json(dir / "llama", tiny_tokenizer_json(true, kLlama3Split)), 0, l);
  EXPECT_EQ(q.get_str("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(l.get_str("tokenizer.ggml.pre"), "llama-bpe");
  const auto qt = Tokenizer::from_metadata(q, "qwen"), lt = Tokenizer::from_metadata(l, "llama");
  EXPECT_EQ(qt->encode("1234", false, false), (std::vector<int32_t>{'1', '2', '3', '4'}));
  EXPECT_EQ(lt->encode("1234", false, false), (std::vector<int32_t>{263, '4'}));
  EXPECT_TRUE(lt->add_bos_default());  // llama.cpp's default for llama-bpe
  EXPECT_FALSE(qt->add_bos_default());
  const auto ids = qt->encode("he ll , he's", false, false);
  EXPECT_EQ(qt->decode(ids), "he ll , he's");
  EXPECT_EQ(lt->decode(ids), "he ll, he's");
}

// The Error names the file and says what is wrong.
void expect_hf_error(const nlohmann::json& j, const std::string& what, int64_t n_vocab = 0) {
  const auto dir = test::scratch_dir();
  const std::string path = write_json(dir, j);
  Metadata meta;
  try {
    add_hf_tokenizer(path, n_vocab, meta);
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(HfTokenizer, BadFilesAreErrors) {
  auto j = tiny_tokenizer_json(true);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  expect_hf_error(j, "pre-tokenizer is unsupported");

  j = tiny_tokenizer_json(true);
  j["model"]["merges"].push_back({"he", "nonexistent"});
  expect_hf_error(j, "not in the vocabulary");

  j = tiny_tokenizer_json(false);
  j["model"]["merges"].push_back("nospace");
  expect_hf_error(j, "is not two tokens");

  j = tiny_tokenizer_json(true);
  j["model"]["type"] = "WordPiece";
  expect_hf_error(j, "unsupported");

  j = tiny_tokenizer_json(true);
  expect_hf_error(j, "outside the vocabulary", 100);  // ids beyond config's vocab_size

  j = tiny_tokenizer_json(true);
  j["model"]["vocab"]["far"] = 1000000000;  // no giant allocation for one bad id
  expect_hf_error(j, "far beyond");
  expect_hf_error(tiny_tokenizer_json(true), "far beyond", 1000000000);

  j = tiny_tokenizer_json(true);
  j["model"]["vocab"]["dup"] = 5;
  expect_hf_error(j, "used twice");

  const auto dir = test::scratch_dir();
  std::ofstream(dir / "tokenizer.json") << "{\"model\": [1, 2";
  Metadata meta;
  try {
    add_hf_tokenizer((dir / "tokenizer.json").string(), 0, meta);
    ADD_FAILURE() << "truncated JSON accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
  // Nesting is bounded as in every JSON the readers take (formats/json_file.h): a hostile file
  // cannot recurse through the pre-tokenizer scan or the parser's stack.
  std::string deep = "{\"pre_tokenizer\": ";
  for (int i = 0; i < 5000; ++i) deep += "{\"type\": \"Sequence\", \"pretokenizers\": [";
  std::ofstream(dir / "tokenizer.json") << deep;
  try {
    add_hf_tokenizer((dir / "tokenizer.json").string(), 0, meta);
    ADD_FAILURE() << "nesting without bound accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add_hf_tokenizer((dir / "missing.json").string(), 0, meta), Error);
}

void expect_meta_error(const Metadata& meta, const std::string& what) {
  try {
    Tokenizer::from_metadata(meta, "some/model.gguf");
    ADD_FAILURE() << "no error for " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("some/model.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, BadMetadataIsError) {
  Metadata meta;
  meta.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  expect_meta_error(meta, "tokenizer.ggml.model");

  meta.set_str("tokenizer.ggml.model", "wordpiece");
  expect_meta_error(meta, "'wordpiece' is unsupported");

  meta.set_str("tokenizer.ggml.model", "gpt2");
  meta.set_str("tokenizer.ggml.pre", "qwen2");
  meta.set_strings("tokenizer.ggml.merges", {"a b", "a c"});
  expect_meta_error(meta, "not in the vocabulary");

  meta.set_strings("tokenizer.ggml.merges", {"a b"});
  meta.set_str("tokenizer.ggml.pre", "falcon");
  expect_meta_error(meta, "'falcon' is unsupported");

  meta.set_str("tokenizer.ggml.pre", "qwen2");
  meta.set_i32s("tokenizer.ggml.token_type", {1, 1});
  expect_meta_error(meta, "token_type has 2 entries for 3 tokens");

  meta.set_i32s("tokenizer.ggml.token_type", {1, 1, 1});
  meta.set_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
  expect_meta_error(meta, "appears twice");

  meta.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  meta.set_str("tokenizer.ggml.merges", "a b");  // wrong type: a string, not an array
  expect_meta_error(meta, "tokenizer.ggml.merges");

  meta.set_strings("tokenizer.ggml.merges", {"a b"});
  const auto tok = Tokenizer::from_metadata(meta, "some/model.gguf");
  EXPECT_THROW(tok->decode(std::vector<int32_t>{3}), Error);
  EXPECT_THROW(tok->piece(-1), Error);
  EXPECT_THROW(tok->encode("ab", true, false), Error);  // no BOS in this vocabulary
}

}  // namespace
}  // namespace bonsai
