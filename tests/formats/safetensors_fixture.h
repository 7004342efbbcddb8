// Builds small safetensors files for tests (the product only reads them): an 8-byte LE header
// length, the JSON header padded with spaces to a multiple of 8, then the tensor bytes.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bonsai::test {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything to test refusals
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Tensors are stored in the given order, back to back. `header_bytes` (when given) receives the
// JSON header's length N, so the data section starts at 8 + N.
std::vector<uint8_t> make_safetensors(const std::vector<StTensor>& tensors,
                                      const nlohmann::json& metadata = nullptr,
                                      uint64_t* header_bytes = nullptr);
// The same file from an explicit header JSON and data section (for malformed headers).
std::vector<uint8_t> make_safetensors_raw(const std::string& header, const std::vector<uint8_t>& data);

std::vector<uint8_t> f32_bytes(const std::vector<float>& v);
// Values v[i] = start + i * step, as F32 bytes, n of them.
std::vector<uint8_t> f32_ramp(size_t n, float start = 0.f, float step = 1.f);

}  // namespace bonsai::test
