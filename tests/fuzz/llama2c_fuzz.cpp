// llama2.c checkpoint (.bin, formats/llama2c.cpp): the 7-int32 header and the weight layout it
// implies. No tokenizer beside it (the tokenizer has its own target).
#include "formats/llama2c.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "model.bin");
  bonsai::fuzz::expect_only_errors([&] { bonsai::fuzz::touch_tensors(bonsai::read_llama2c(path)); }, path);
  return 0;
}
