// One .safetensors file (formats/safetensors.cpp): header length, JSON header, dtype, shape,
// data offsets.
#include "formats/safetensors.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "model.safetensors");
  bonsai::fuzz::expect_only_errors([&] { bonsai::fuzz::touch_tensors(bonsai::read_safetensors(path)); }, path);
  return 0;
}
