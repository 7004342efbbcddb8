// Hugging Face config.json (formats/hf_config.cpp): architecture and hyperparameters.
#include "formats/hf_model.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "config.json");
  bonsai::fuzz::expect_only_errors([&] { (void)bonsai::read_hf_config(path); }, path);
  return 0;
}
