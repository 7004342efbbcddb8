#include "safetensors_fixture.h"

#include <algorithm>
#include <cstring>

namespace bonsai::test {

std::vector<uint8_t> make_safetensors_raw(const std::string& header, const std::vector<uint8_t>& data) {
  std::string h = header;
  while (h.size() % 8) h += ' ';
  std::vector<uint8_t> out(8 + h.size() + data.size());
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(uint64_t(h.size()) >> (8 * i));
  std::copy(h.begin(), h.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + long(h.size()));
  return out;
}

std::vector<uint8_t> make_safetensors(const std::vector<StTensor>& tensors, const nlohmann::json& metadata,
                                      uint64_t* header_bytes) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  auto out = make_safetensors_raw(header.dump(), data);
  if (header_bytes) *header_bytes = out.size() - 8 - data.size();
  return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> f32_ramp(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + float(i) * step;
  return f32_bytes(v);
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> two_shards() {
  return {{"model-00001-of-00002.safetensors",
           make_safetensors({{"a.weight", "F32", {2, 4}, f32_ramp(8)}, {"b.weight", "F32", {4}, f32_ramp(4)}})},
          {"model-00002-of-00002.safetensors",
           make_safetensors({{"c.weight", "F16", {4, 2}, std::vector<uint8_t>(16, 0x3c)}},
                            nlohmann::json{{"format", "pt"}})}};
}

std::string two_shard_index() {
  nlohmann::json map;
  for (const auto& [file, bytes] : two_shards()) {
    (void)bytes;
    for (const char* t : {"a.weight", "b.weight", "c.weight"})
      if ((t[0] == 'c') == (file.find("00002-of") != std::string::npos)) map[t] = file;
  }
  return nlohmann::json{{"metadata", {{"total_size", 88}}}, {"weight_map", map}}.dump(1);
}

}  // namespace bonsai::test
