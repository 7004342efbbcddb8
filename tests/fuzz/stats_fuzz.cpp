// Calibration statistics (calibrate/stats.cpp): a GGUF whose keys and tensors load_stats checks.
#include "calibrate/stats.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = bonsai::fuzz::input_file(data, size, "stats.gguf");
  bonsai::fuzz::expect_only_errors([&] { (void)bonsai::calib::load_stats(path); }, path);
  return 0;
}
