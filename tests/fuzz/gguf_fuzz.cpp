// GGUF (formats/gguf.cpp): header, metadata, tensor table, data offsets.
#include "formats/gguf.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "in.gguf");
  bonsai::fuzz::expect_only_errors([&] { bonsai::fuzz::touch_tensors(bonsai::read_gguf(path)); }, path);
  return 0;
}
