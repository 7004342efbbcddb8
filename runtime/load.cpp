#include "runtime/load.h"

#include "formats/error.h"
#include "formats/hf_model.h"
#include "formats/llama2c.h"
#include "formats/model_file.h"

namespace bonsai {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  Metadata meta;
  if (path.ends_with(".json")) {
    add_hf_tokenizer(path, 0, meta);
    return Tokenizer::from_metadata(meta, path);
  }
  if (detect_format(path) == "llama2c" && path.find("tok") != std::string::npos) {
    add_llama2c_tokenizer(path, meta);
    return Tokenizer::from_metadata(meta, path);
  }
  const TensorSet ts = open_model(path);
  return Tokenizer::from_metadata(ts.meta, path);
}

std::unique_ptr<Tokenizer> model_tokenizer(const Model& m) {
  if (!m.file.meta.has("tokenizer.ggml.model"))
    fail(m.file.path, "the model has no tokenizer (tokenizer.ggml.* keys, tokenizer.json or tok512.bin)");
  return Tokenizer::from_metadata(m.file.meta, m.file.path);
}

}  // namespace bonsai
