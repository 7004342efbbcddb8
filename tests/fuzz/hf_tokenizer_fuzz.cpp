// Hugging Face tokenizer.json and the tokenizer_config.json beside it (formats/hf_tokenizer.cpp).
// The input is tokenizer.json, then, after the first NUL byte (never valid inside JSON),
// tokenizer_config.json; without a NUL there is no config file.
#include <cstring>
#include <filesystem>

#include "formats/hf_model.h"
#include "formats/metadata.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t tok_size = nul ? size_t(nul - data) : size;
  const std::string path = bonsai::fuzz::input_file(data, tok_size, "tokenizer.json");
  const std::string cfg = bonsai::fuzz::scratch() + "/tokenizer_config.json";
  if (nul)
    bonsai::fuzz::input_file(nul + 1, size - tok_size - 1, "tokenizer_config.json");
  else
    std::filesystem::remove(cfg);
  bonsai::fuzz::expect_only_errors(
      [&] {
        bonsai::Metadata meta;
        bonsai::add_hf_tokenizer(path, 0, meta);
      },
      bonsai::fuzz::scratch());
  return 0;
}
