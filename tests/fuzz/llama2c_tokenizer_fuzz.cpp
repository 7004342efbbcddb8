// llama2.c tokenizer (tok512.bin style, formats/llama2c.cpp): max token length, then per token a
// score, a length and the bytes.
#include "formats/llama2c.h"
#include "formats/metadata.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "tok512.bin");
  bonsai::fuzz::expect_only_errors(
      [&] {
        bonsai::Metadata meta;
        bonsai::add_llama2c_tokenizer(path, meta);
      },
      path);
  return 0;
}
