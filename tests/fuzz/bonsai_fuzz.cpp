// The .bonsai container (formats/bonsai_file.cpp): header, metadata, tensor table, checksums.
// The header checksum would turn nearly every mutation into "checksum mismatch"; the target
// recomputes it when the section sizes allow (when the last byte is odd, so the mismatch path stays
// covered), so the structure checks behind it are fuzzed too.
#include <vector>

#include "formats/bonsai_file.h"
#include "formats/bonsai_layout.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size > 8 && (data[size - 1] & 1)) bonsai::test::bonsai_layout::fix_checksum(bytes);
  const std::string path = bonsai::fuzz::input_file(bytes.data(), bytes.size(), "in.bonsai");
  bonsai::fuzz::expect_only_errors([&] { bonsai::fuzz::touch_tensors(bonsai::read_bonsai(path)); }, path);
  return 0;
}
