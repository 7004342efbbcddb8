// Small llama2.c files for tests and fuzz seeds (the product only reads this format): a
// checkpoint whose every float names where it sits, and a tokenizer file.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace bonsai::test::llama2c_fixture {

inline void put_i32(std::vector<uint8_t>& out, int32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(uint32_t(v) >> (8 * i)));
}
inline void put_f32(std::vector<uint8_t>& out, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_i32(out, int32_t(u));
}

// A tiny llama2.c checkpoint whose every float names where it sits: region * 1e4 + layer * 1e3
// + (index within the layer's block, mod 1000). Regions in run.c's file order.
enum Region { kEmbd = 1, kRmsAtt, kWq, kWk, kWv, kWo, kRmsFfn, kW1, kW2, kW3, kRmsFinal, kFreq, kWcls };
struct Tiny {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 6, seq = 4;
  bool shared = true;

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    for (int32_t v : {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq}) put_i32(out, v);
    const int32_t hs = dim / heads, kv = hs * kv_heads;
    const auto region = [&](Region r, int n_layers, int per_layer) {
      for (int l = 0; l < n_layers; ++l)
        for (int i = 0; i < per_layer; ++i) put_f32(out, float(r * 10000 + l * 1000 + i % 1000));
    };
    region(kEmbd, 1, vocab * dim);
    region(kRmsAtt, layers, dim);
    region(kWq, layers, dim * dim);
    region(kWk, layers, dim * kv);
    region(kWv, layers, dim * kv);
    region(kWo, layers, dim * dim);
    region(kRmsFfn, layers, dim);
    region(kW1, layers, hidden * dim);
    region(kW2, layers, hidden * dim);
    region(kW3, layers, hidden * dim);
    region(kRmsFinal, 1, dim);
    region(kFreq, 1, seq * hs);  // freq_cis_real then _imag, seq x hs/2 each
    if (!shared) region(kWcls, 1, vocab * dim);
    return out;
  }
};

// A llama2.c tokenizer file: max_token_length, then (score, length, bytes) per piece.
inline std::vector<uint8_t> tokenizer_bytes(const std::vector<std::pair<std::string, float>>& pieces) {
  std::vector<uint8_t> out;
  put_i32(out, 16);
  for (const auto& [s, score] : pieces) {
    put_f32(out, score);
    put_i32(out, int32_t(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

}  // namespace bonsai::test::llama2c_fixture
