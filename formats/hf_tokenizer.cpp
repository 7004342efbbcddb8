// tokenizer.json (+ tokenizer_config.json) -> the tokenizer.ggml.* keys llama.cpp's
// convert_hf_to_gguf.py writes for a byte-level BPE model (its get_vocab_base() and
// gguf-py's SpecialVocab), so a model converted here tokenizes like the llama.cpp GGUF.
#include <algorithm>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/json_file.h"
#include "formats/mapped_file.h"

namespace bonsai {
namespace {

using nlohmann::json;

// The Split regexes of the tokenizer.json files we know, spelled as tokenizer.json spells them;
// the runtime maps `pre` back to its own copy of the regex (runtime/pretokenizer.cpp).
// convert_hf_to_gguf identifies the pre-tokenizer by hashing the ids of a probe text, which needs
// the Python tokenizer; comparing the regex itself is what we can do from the file alone.
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's token types (spec §7).
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// Every Split regex in the pre-tokenizer (alone or inside a Sequence), and whether a ByteLevel
// step is there.
void scan_pre_tokenizer(const json& pt, std::vector<std::string>& regexes, bool& byte_level) {
  if (!pt.is_object()) return;
  const json* type = member(pt, "type");
  if (!type || !type->is_string()) return;
  if (*type == "Sequence") {
    if (const json* seq = member(pt, "pretokenizers"); seq && seq->is_array())
      for (const auto& p : *seq) scan_pre_tokenizer(p, regexes, byte_level);
  } else if (*type == "ByteLevel") {
    byte_level = true;
  } else if (*type == "Split") {
    const json* pattern = member(pt, "pattern");
    const json* re = pattern ? member(*pattern, "Regex") : nullptr;
    if (re && re->is_string()) regexes.push_back(re->get<std::string>());
    else regexes.emplace_back("<non-regex Split>");
  } else {
    regexes.push_back("<" + type->get<std::string>() + ">");
  }
}

std::string detect_pre(const std::string& path, const json& root) {
  const json* pt = member(root, "pre_tokenizer");
  std::vector<std::string> regexes;
  bool byte_level = false;
  if (pt) scan_pre_tokenizer(*pt, regexes, byte_level);
  if (const json* dec = member(root, "decoder"); dec && member(*dec, "type") && (*dec)["type"] == "ByteLevel")
    byte_level = true;
  if (!byte_level) fail(path, "not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer or decoder)");
  if (regexes.size() == 1 && regexes[0] == kQwen2Regex) return "qwen2";
  if (regexes.size() == 1 && regexes[0] == kLlama3Regex) return "llama-bpe";
  std::string what = regexes.empty() ? std::string("none") : regexes[0];
  for (size_t i = 1; i < regexes.size(); ++i) what += " + " + regexes[i];
  fail(path, "pre-tokenizer is unsupported (Split regex: ", what,
       "); supported: the Qwen2 and the Llama-3 regexes");
}

// convert_hf_to_gguf's does_token_look_special(): added tokens that are control tokens in
// practice even when tokenizer.json does not mark them special.
bool looks_special(const std::string& t) {
  auto wraps = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") /* <｜ ... ｜> */ || wraps("<unused", ">");
}

// Builds a new string rather than replacing in place (GCC 12 warns falsely on
// std::string::replace here).
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (s.find(from) == std::string::npos) return;
  std::string out;
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size())
    out.append(s, pos, m - pos).append(to);
  out.append(s, pos);
  s = std::move(out);
}

// One merge as llama.cpp stores it: "a b". Pair-form merges (transformers >= 4.45) may hold
// spaces inside a part; gguf-py writes those spaces as U+0120 so the "a b" split stays
// unambiguous, and so do we.
std::string merge_string(const std::string& path, const json& m, size_t i) {
  if (m.is_string()) return m.get<std::string>();
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
    replace_all(a, " ", "\xC4\xA0");
    replace_all(b, " ", "\xC4\xA0");
    return a + " " + b;
  }
  fail(path, "model.merges[", i, "] is neither a string \"a b\" nor a pair [\"a\", \"b\"]");
}

struct SpecialIds {
  std::vector<std::pair<std::string, uint32_t>> ids;  // gguf key suffix -> id, in gguf-py order
  std::optional<bool> add_bos, add_eos;
  std::optional<std::string> chat_template;
  std::vector<std::pair<std::string, std::string>> named_templates;
};

// gguf-py SpecialVocab._try_load_from_tokenizer_json: the <typ>_token of tokenizer_config.json
// is looked up (by content) among tokenizer.json's added_tokens only.
SpecialIds read_tokenizer_config(const std::string& cfg_path, const json& added, int64_t n_vocab) {
  SpecialIds out;
  const json cfg = read_json_file(cfg_path);
  if (!cfg.is_object()) fail(cfg_path, "top level is not a JSON object");
  static const std::pair<const char*, const char*> kTypes[] = {
      {"bos", "bos_token_id"},       {"eos", "eos_token_id"},     {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"}, {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
      {"mask", "mask_token_id"}};
  for (const auto& [typ, key] : kTypes) {
    const json* entry = member(cfg, (std::string(typ) + "_token").c_str());
    std::string content;
    if (entry && entry->is_string()) content = entry->get<std::string>();
    else if (entry && entry->is_object() && member(*entry, "content") && (*entry)["content"].is_string())
      content = (*entry)["content"].get<std::string>();
    else continue;
    for (const auto& a : added) {
      if (a["content"] != content) continue;
      const int64_t id = a["id"].get<int64_t>();
      if (id < n_vocab) out.ids.emplace_back(key, uint32_t(id));
      break;
    }
  }
  auto flag = [&](const char* k) -> std::optional<bool> {
    const json* v = member(cfg, k);
    if (v && v->is_boolean()) return v->get<bool>();
    return std::nullopt;
  };
  out.add_bos = flag("add_bos_token");
  out.add_eos = flag("add_eos_token");
  if (const json* t = member(cfg, "chat_template")) {
    if (t->is_string()) {
      out.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (const auto& e : *t) {
        const json* name = member(e, "name");
        const json* tmpl = member(e, "template");
        if (!name || !tmpl || !name->is_string() || !tmpl->is_string())
          fail(cfg_path, "chat_template list entries need string 'name' and 'template'");
        if (*name == "default") out.chat_template = tmpl->get<std::string>();
        else out.named_templates.emplace_back(name->get<std::string>(), tmpl->get<std::string>());
      }
    } else {
      fail(cfg_path, "chat_template is neither a string nor a list");
    }
  }
  return out;
}

}  // namespace

void add_hf_tokenizer(const std::string& tokenizer_json_path, int64_t n_vocab, Metadata& meta) {
  const std::string& path = tokenizer_json_path;
  const json root = read_json_file(path);
  if (!root.is_object()) fail(path, "top level is not a JSON object");
  const json* model = member(root, "model");
  if (!model || !model->is_object()) fail(path, "no 'model' object");
  const json* type = member(*model, "type");
  if (!type || *type != "BPE")
    fail(path, "model type ", type ? type->dump() : std::string("(missing)"),
         " is unsupported (only byte-level BPE)");
  const std::string pre = detect_pre(path, root);

  // id -> text from the model vocab, then the added tokens (which win on a shared id).
  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) fail(path, "model.vocab is not an object");
  // Ids and n_vocab size the arrays below: nothing far beyond the entries the file holds.
  const uint64_t max_size = 4 * uint64_t(vocab->size() + 1024);
  if (n_vocab > 0 && uint64_t(n_vocab) > max_size)
    fail(path, "vocabulary size ", n_vocab, " is far beyond the ", vocab->size(), " entries of model.vocab");
  std::vector<std::string> by_id;
  std::vector<int32_t> types;
  int64_t max_id = -1;
  auto slot = [&](const json& idv, const std::string& what) -> int64_t {
    if (!idv.is_number_integer()) fail(path, what, ": id is not an integer");
    const int64_t id = idv.get<int64_t>();
    if (id < 0 || (n_vocab > 0 && id >= n_vocab))
      fail(path, what, ": id ", id, " is outside the vocabulary (size ", n_vocab, ")");
    if (uint64_t(id) >= max_size)
      fail(path, what, ": id ", id, " is far beyond the ", vocab->size(), " entries of model.vocab");
    if (size_t(id) >= by_id.size()) {
      by_id.resize(size_t(id) + 1);
      types.resize(size_t(id) + 1, kUnused);
    }
    max_id = std::max(max_id, id);
    return id;
  };
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const int64_t id = slot(it.value(), "model.vocab['" + it.key() + "']");
    if (types[size_t(id)] != kUnused) fail(path, "model.vocab: id ", id, " is used twice");
    by_id[size_t(id)] = it.key();
    types[size_t(id)] = kNormal;
  }
  const json empty = json::array();
  const json* added = member(root, "added_tokens");
  if (added && !added->is_array()) fail(path, "added_tokens is not a list");
  if (!added) added = &empty;
  for (size_t i = 0; i < added->size(); ++i) {
    const json& a = (*added)[i];
    const std::string what = cat("added_tokens[", i, "]");
    const json* content = member(a, "content");
    const json* idv = member(a, "id");
    if (!content || !content->is_string() || !idv) fail(path, what, ": needs 'id' and 'content'");
    const int64_t id = slot(*idv, what);
    std::string text = content->get<std::string>();
    const json* special = member(a, "special");
    if ((special && special->is_boolean() && special->get<bool>()) || looks_special(text)) {
      types[size_t(id)] = kControl;
    } else {
      // As convert_hf_to_gguf: user-defined tokens are stored pre-normalized (U+2581 -> ' ').
      replace_all(text, "\xE2\x96\x81", " ");
      types[size_t(id)] = kUserDefined;
    }
    by_id[size_t(id)] = std::move(text);
  }
  if (max_id < 0) fail(path, "the vocabulary is empty");
  if (n_vocab <= 0) n_vocab = max_id + 1;
  by_id.resize(size_t(n_vocab));
  types.resize(size_t(n_vocab), kUnused);

  std::unordered_set<std::string_view> known;
  known.reserve(by_id.size() * 2);
  for (size_t id = 0; id < by_id.size(); ++id) {
    if (types[id] == kUnused) by_id[id] = cat("[PAD", id, "]");
    if (!known.insert(by_id[id]).second) fail(path, "token '", by_id[id], "' appears twice (id ", id, ")");
  }

  const json* merges = member(*model, "merges");
  if (!merges || !merges->is_array()) fail(path, "model.merges is not a list");
  std::vector<std::string> merge_strs;
  merge_strs.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    std::string m = merge_string(path, (*merges)[i], i);
    // Same split as llama.cpp's loader: the first space after the first byte.
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      fail(path, "model.merges[", i, "] '", m, "' is not two tokens");
    const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
    if (!known.count(a) || !known.count(b))
      fail(path, "model.merges[", i, "] '", m, "' names a token not in the vocabulary");
    merge_strs.push_back(std::move(m));
  }

  meta.set_str("tokenizer.ggml.model", "gpt2");
  meta.set_str("tokenizer.ggml.pre", pre);
  meta.set_strings("tokenizer.ggml.tokens", std::move(by_id));
  meta.set_i32s("tokenizer.ggml.token_type", types);
  meta.set_strings("tokenizer.ggml.merges", std::move(merge_strs));

  const auto cfg_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
  if (std::filesystem::exists(cfg_path)) {
    const SpecialIds sp = read_tokenizer_config(cfg_path, *added, n_vocab);
    for (const auto& [key, id] : sp.ids) meta.set_u32("tokenizer.ggml." + key, id);
    if (sp.add_bos) meta.set_bool("tokenizer.ggml.add_bos_token", *sp.add_bos);
    if (sp.add_eos) meta.set_bool("tokenizer.ggml.add_eos_token", *sp.add_eos);
    if (sp.chat_template) meta.set_str("tokenizer.chat_template", *sp.chat_template);
    for (const auto& [name, tmpl] : sp.named_templates) meta.set_str("tokenizer.chat_template." + name, tmpl);
  }
  // Newer checkpoints keep the template in its own file.
  const auto jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (!meta.has("tokenizer.chat_template") && std::filesystem::exists(jinja)) {
    auto f = MappedFile::open(jinja.string());
    meta.set_str("tokenizer.chat_template",
                 std::string(reinterpret_cast<const char*>(f->data()), size_t(f->size())));
  }
}

}  // namespace bonsai
