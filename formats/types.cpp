#include "formats/types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>

#include "formats/blocks.h"

namespace bonsai {
namespace {

// ---- plain floats ----

void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }
void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

template <float (*Dec)(uint16_t)>
void half_to_float(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Dec(s[i]);
}
template <uint16_t (*Enc)(float)>
void half_from_float(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = Enc(src[i]);
}

// ---- integers: the value itself (ggml's I8); encoding rounds half away from zero and saturates ----

void i8_to_float(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const int8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
}
void i8_from_float(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<int8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = int8_t(std::clamp(std::isnan(src[i]) ? 0.0f : std::roundf(src[i]), -128.0f, 127.0f));
}

// ---- blocks: decode every block with blocks.h's decoder ----

template <typename Block, int QK>
void blocks_to_float(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / QK; ++i) decode_block(b[i], dst + i * QK);
}

float absmax(const float* x, int n) {
  float m = 0.0f;
  for (int j = 0; j < n; ++j) m = std::fmax(m, std::fabs(x[j]));
  return m;
}

// Reference encoders (spec §1.2–1.9), one block at a time.

void enc_q8_0(const float* x, block_q8_0& b) {
  const float d = absmax(x, QK8_0) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_fp16(d);
  for (int j = 0; j < QK8_0; ++j) b.qs[j] = int8_t(std::roundf(x[j] * id));
}

void enc_q4_0(const float* x, block_q4_0& b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QK4_0; ++j)
    if (amax < std::fabs(x[j])) {  // the first of equal magnitudes wins
      amax = std::fabs(x[j]);
      max = x[j];
    }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = f32_to_fp16(d);
  auto code = [&](float v) { return uint8_t(std::min(15, int(int8_t(v * id + 8.5f)))); };
  for (int j = 0; j < QK4_0 / 2; ++j) b.qs[j] = uint8_t(code(x[j]) | (code(x[j + QK4_0 / 2]) << 4));
}

void enc_q1_0(const float* x, block_q1_0& b) {
  float sum = 0.0f;  // sequential float32 sum, element order: part of the bit-exact contract
  for (int j = 0; j < QK1_0; ++j) sum += std::fabs(x[j]);
  b.d = f32_to_fp16(sum / float(QK1_0));
  std::memset(b.qs, 0, sizeof b.qs);
  for (int j = 0; j < QK1_0; ++j)
    if (x[j] >= 0.0f) b.qs[j / 8] |= uint8_t(1u << (j % 8));
}

// Ternary/2-bit reference rule: d = max|x|, value = round-half-away(x/d), clamped to the grid.
template <int QK>
float absmax_codes(const float* x, int8_t* v, int lo, int hi) {
  const float d = absmax(x, QK);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < QK; ++j) v[j] = int8_t(std::clamp(int(std::lroundf(x[j] * id)), lo, hi));
  return d;
}

template <int QK, void (*Pack)(const int8_t*, uint16_t, void*), int Hi>
void enc_absmax(const float* x, void* block) {
  int8_t v[QK];
  const float d = absmax_codes<QK>(x, v, -1, Hi);
  Pack(v, f32_to_fp16(d), block);
}

template <typename Block, int QK, void (*Enc)(const float*, Block&)>
void blocks_from_float(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) Enc(src + i * QK, b[i]);
}

template <typename Block, int QK, void (*Enc)(const float*, void*)>
void blocks_from_float_v(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / QK; ++i) Enc(src + i * QK, &b[i]);
}

template <int QS, int QH, typename Block>
void pack_base3(const int8_t* values, uint16_t d, Block& b) {
  uint8_t q[QS + QH] = {};
  for_each_trit<QS, QH>([&](int e, int byte, int n) {
    const int pw = byte < QS ? 4 - n : 3 - n;  // digit n=0 is the most significant
    int p = 1;
    for (int k = 0; k < pw; ++k) p *= 3;
    q[byte] = uint8_t(q[byte] + (values[e] + 1) * p);
  });
  auto ceil_map = [](int v) { return uint8_t((v * 256 + 242) / 243); };
  for (int i = 0; i < QS; ++i) b.qs[i] = ceil_map(q[i]);
  for (int i = 0; i < QH; ++i) b.qh[i] = ceil_map(q[QS + i] * 3);  // four digits, a zero fifth
  b.d = d;
}

template <int QK>
void pack_2bit_linear(const int8_t* values, uint16_t d, block_2bit<QK>& b) {
  std::memset(b.qs, 0, sizeof b.qs);
  for (int j = 0; j < QK; ++j) b.qs[j / 4] |= uint8_t((values[j] + 1) << (2 * (j % 4)));
  b.d = d;
}

void pack_q2_0(const int8_t* values, uint16_t d, void* block) {
  pack_2bit_linear<QK2_0>(values, d, *static_cast<block_q2_0*>(block));
}

constexpr std::array kTypes = {
    TypeTraits{TypeId::F32, "F32", 1, 4, false, f32_to_float, f32_from_float},
    TypeTraits{TypeId::F16, "F16", 1, 2, false, half_to_float<fp16_to_f32>, half_from_float<f32_to_fp16>},
    TypeTraits{TypeId::Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), true, blocks_to_float<block_q4_0, QK4_0>,
               blocks_from_float<block_q4_0, QK4_0, enc_q4_0>},
    TypeTraits{TypeId::Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), true, blocks_to_float<block_q8_0, QK8_0>,
               blocks_from_float<block_q8_0, QK8_0, enc_q8_0>},
    TypeTraits{TypeId::I8, "I8", 1, 1, false, i8_to_float, i8_from_float},
    TypeTraits{TypeId::BF16, "BF16", 1, 2, false, half_to_float<bf16_to_f32>, half_from_float<f32_to_bf16>},
    TypeTraits{TypeId::TQ1_0, "TQ1_0", QK_K, sizeof(block_tq1_0), true, blocks_to_float<block_tq1_0, QK_K>,
               blocks_from_float_v<block_tq1_0, QK_K, enc_absmax<QK_K, pack_tq1_0, 1>>},
    TypeTraits{TypeId::TQ2_0, "TQ2_0", QK_K, sizeof(block_tq2_0), true, blocks_to_float<block_tq2_0, QK_K>,
               blocks_from_float_v<block_tq2_0, QK_K, enc_absmax<QK_K, pack_tq2_0, 1>>},
    TypeTraits{TypeId::Q1_0, "Q1_0", QK1_0, sizeof(block_q1_0), true, blocks_to_float<block_q1_0, QK1_0>,
               blocks_from_float<block_q1_0, QK1_0, enc_q1_0>},
    TypeTraits{TypeId::Q2_0, "Q2_0", QK2_0, sizeof(block_q2_0), true, blocks_to_float<block_q2_0, QK2_0>,
               blocks_from_float_v<block_q2_0, QK2_0, enc_absmax<QK2_0, pack_q2_0, 3>>},
    TypeTraits{TypeId::PQ2_0, "PQ2_0", QK_PQ2_0, sizeof(block_pq2_0), true, blocks_to_float<block_pq2_0, QK_PQ2_0>,
               blocks_from_float_v<block_pq2_0, QK_PQ2_0, enc_absmax<QK_PQ2_0, pack_pq2_0, 3>>},
    TypeTraits{TypeId::PTQ1_0, "PTQ1_0", QK_PTQ1_0, sizeof(block_ptq1_0), true,
               blocks_to_float<block_ptq1_0, QK_PTQ1_0>,
               blocks_from_float_v<block_ptq1_0, QK_PTQ1_0, enc_absmax<QK_PTQ1_0, pack_ptq1_0, 1>>},
};

}  // namespace

void pack_ptq1_0(const int8_t* values, uint16_t d, void* block) {
  pack_base3<24, 2>(values, d, *static_cast<block_ptq1_0*>(block));
}
void pack_tq1_0(const int8_t* values, uint16_t d, void* block) {
  pack_base3<48, 4>(values, d, *static_cast<block_tq1_0*>(block));
}
void pack_pq2_0(const int8_t* values, uint16_t d, void* block) {
  pack_2bit_linear<QK_PQ2_0>(values, d, *static_cast<block_pq2_0*>(block));
}
void pack_tq2_0(const int8_t* values, uint16_t d, void* block) {
  auto& b = *static_cast<block_tq2_0*>(block);
  std::memset(b.qs, 0, sizeof b.qs);
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 32; ++m)
      for (int n = 0; n < 4; ++n)
        b.qs[32 * h + m] |= uint8_t((values[128 * h + m + 32 * n] + 1) << (2 * n));
  b.d = d;
}

std::span<const TypeTraits> all_types() { return kTypes; }

const TypeTraits* find_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (uint32_t(t.id) == id) return &t;
  return nullptr;
}

const TypeTraits* find_type(std::string_view name) {
  for (const auto& t : kTypes) {
    const std::string_view tn = t.name;
    if (tn.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < tn.size() && eq; ++i)
      eq = std::toupper(static_cast<unsigned char>(name[i])) == tn[i];
    if (eq) return &t;
  }
  return nullptr;
}

const TypeTraits& traits(TypeId id) { return *find_type(uint32_t(id)); }

std::optional<uint64_t> row_bytes(TypeId id, uint64_t ne0) {
  const TypeTraits& t = traits(id);
  if (ne0 % uint64_t(t.block_elems) != 0) return std::nullopt;
  // A row length from a file can be anything: 2^62 + 4 F32 elements would wrap to 16 bytes.
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(ne0 / uint64_t(t.block_elems), uint64_t(t.block_bytes), &bytes)) return std::nullopt;
  return bytes;
}

std::optional<uint64_t> tensor_bytes(TypeId id, std::span<const int64_t> ne) {
  if (ne.empty()) return std::nullopt;
  for (int64_t d : ne)
    if (d < 0) return std::nullopt;
  auto bytes = row_bytes(id, uint64_t(ne[0]));
  if (!bytes) return std::nullopt;
  uint64_t total = *bytes;
  for (size_t i = 1; i < ne.size(); ++i)
    if (__builtin_mul_overflow(total, uint64_t(ne[i]), &total)) return std::nullopt;
  return total;
}

}  // namespace bonsai
