// Builds small safetensors files for tests (the product only reads them): an 8-byte LE header
// length, the JSON header padded with spaces to a multiple of 8, then the tensor bytes.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
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

// A sharded model: two shard files (name, bytes) holding a.weight F32 [2, 4] and b.weight F32 [4]
// in model-00001-of-00002.safetensors, c.weight F16 [4, 2] in model-00002-of-00002.safetensors;
// two_shard_index() is the model.safetensors.index.json naming them.
std::vector<std::pair<std::string, std::vector<uint8_t>>> two_shards();
std::string two_shard_index();

std::vector<uint8_t> f32_bytes(const std::vector<float>& v);
// Values v[i] = start + i * step, as F32 bytes, n of them.
std::vector<uint8_t> f32_ramp(size_t n, float start = 0.f, float step = 1.f);

}  // namespace bonsai::test
