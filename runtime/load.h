// Opening what the commands take: a model with its tokenizer, or a tokenizer alone.
#pragma once
#include <memory>
#include <string>

#include "runtime/model.h"
#include "runtime/tokenizer.h"

namespace bonsai {

// A tokenizer from a tokenizer.json, a llama2.c tokenizer (.bin), or any model file that carries
// tokenizer.ggml.* keys (a vocab-only GGUF too).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The tokenizer of a loaded model; Error naming the file when it has none.
std::unique_ptr<Tokenizer> model_tokenizer(const Model& m);

}  // namespace bonsai
