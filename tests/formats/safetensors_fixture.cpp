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

}  // namespace bonsai::test
