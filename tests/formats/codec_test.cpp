// Scalar codecs: conversions against an independent reference (the compiler's _Float16), and
// round trips of every block type on random and adversarial blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "formats/blocks.h"
#include "formats/fp16.h"
#include "formats/types.h"

using namespace bonsai;

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Fp16, MatchesCompilerConversion) {
  // GCC's _Float16 conversion rounds to nearest even in software: an independent reference.
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t ref;
    std::memcpy(&ref, &h, 2);
    ASSERT_EQ(f32_to_fp16(f), ref) << f;
  }
  // Ties and boundaries: 65504 is the largest half, 65520 rounds to inf, 2^-25 ties to zero.
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_fp16(-std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaN) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(TypeTable, IdsSizesAndLookups) {
  struct Want { TypeId id; const char* name; int qk, bytes; double bpw; };
  const Want want[] = {
      {TypeId::F32, "F32", 1, 4, 32},          {TypeId::F16, "F16", 1, 2, 16},
      {TypeId::BF16, "BF16", 1, 2, 16},        {TypeId::Q8_0, "Q8_0", 32, 34, 8.5},
      {TypeId::Q4_0, "Q4_0", 32, 18, 4.5},     {TypeId::Q1_0, "Q1_0", 128, 18, 1.125},
      {TypeId::TQ1_0, "TQ1_0", 256, 54, 1.6875}, {TypeId::TQ2_0, "TQ2_0", 256, 66, 2.0625},
      {TypeId::PQ2_0, "PQ2_0", 128, 34, 2.125},  {TypeId::PTQ1_0, "PTQ1_0", 128, 28, 1.75},
  };
  for (const auto& w : want) {
    const TypeTraits* t = find_type(uint32_t(w.id));
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_STREQ(t->name, w.name);
    EXPECT_EQ(t->block_elems, w.qk);
    EXPECT_EQ(t->block_bytes, w.bytes);
    EXPECT_DOUBLE_EQ(t->bits_per_weight(), w.bpw);
  }
  EXPECT_EQ(uint32_t(TypeId::PQ2_0), 142u);
  EXPECT_EQ(uint32_t(TypeId::PTQ1_0), 143u);
  EXPECT_EQ(find_type("ptq1_0"), find_type(143u));
  EXPECT_EQ(find_type(199u), nullptr);
  EXPECT_EQ(find_type("q3_k"), nullptr);
  const int64_t ok[] = {256, 3};
  EXPECT_EQ(tensor_bytes(TypeId::PTQ1_0, ok), 2u * 28u * 3u);
  const int64_t bad[] = {100, 3};
  EXPECT_FALSE(tensor_bytes(TypeId::PTQ1_0, bad));
  const int64_t huge[] = {int64_t(1) << 40, int64_t(1) << 40};
  EXPECT_FALSE(tensor_bytes(TypeId::F32, huge));
  // One row whose bytes wrap around 2^64 (4 x (2^62 + 4) = 16 mod 2^64).
  const int64_t wraps[] = {(int64_t(1) << 62) + 4};
  EXPECT_FALSE(tensor_bytes(TypeId::F32, wraps));
  EXPECT_FALSE(row_bytes(TypeId::F32, uint64_t(wraps[0])));
  EXPECT_FALSE(row_bytes(TypeId::Q8_0, ~uint64_t(0) / 32 * 32));  // 2^59 blocks of 34 bytes
}

namespace {

std::vector<float> encode_decode(const TypeTraits& t, const std::vector<float>& x, std::vector<uint8_t>* bytes) {
  bytes->assign(x.size() / size_t(t.block_elems) * size_t(t.block_bytes), 0);
  t.from_float(x.data(), bytes->data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  t.to_float(bytes->data(), y.data(), int64_t(x.size()));
  return y;
}

// Largest error the reference rule allows for one block: half a step of the grid (absmax
// types), plus the fp16 rounding of the scale applied to the largest code.
double allowed_error(const TypeTraits& t, const float* x) {
  double amax = 0, asum = 0;
  for (int j = 0; j < t.block_elems; ++j) {
    amax = std::max(amax, double(std::fabs(x[j])));
    asum += std::fabs(x[j]);
  }
  const double fp16_rel = 1.0 / 1024;
  switch (t.id) {
    case TypeId::Q8_0: return amax / 127 * (0.5 + 127 * fp16_rel) + 1e-30;
    case TypeId::Q4_0: return amax / 8 * (0.5 + 8 * fp16_rel) + amax / 8 + 1e-30;  // ties toward +inf
    case TypeId::Q1_0: return amax + asum / t.block_elems * (1 + fp16_rel);           // sign-only codec
    default: return amax * (0.5 + 2 * fp16_rel) + 1e-30;                               // ternary / 2-bit
  }
}

}  // namespace

TEST(Codecs, RandomBlocksRoundTripWithinHalfStep) {
  std::mt19937 rng(42);
  for (const TypeTraits& t : all_types()) {
    if (t.id == TypeId::I8) continue;  // integers: Codecs.I8RoundsAndSaturates
    for (double sigma : {1e-3, 0.02, 1.0, 300.0}) {
      std::normal_distribution<float> nd(0.0f, float(sigma));
      std::vector<float> x(size_t(t.block_elems) * 8);
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> bytes;
      const auto y = encode_decode(t, x, &bytes);
      for (size_t b = 0; b < x.size() / size_t(t.block_elems); ++b) {
        const float* xb = x.data() + b * size_t(t.block_elems);
        const double tol = t.quantized ? allowed_error(t, xb) : std::fabs(*xb) * 1e-2 + 1e-30;
        for (int j = 0; j < t.block_elems; ++j) {
          const double err = std::fabs(double(y[b * size_t(t.block_elems) + size_t(j)]) - xb[j]);
          const double e_tol = t.quantized ? tol : std::fabs(xb[j]) * (t.id == TypeId::F32 ? 0 : 1.0 / 128) + 1e-30;
          ASSERT_LE(err, e_tol) << t.name << " sigma " << sigma << " block " << b << " elem " << j;
        }
      }
      // Decoding the encoding and encoding again gives the same bytes for the ternary and 2-bit
      // absmax types (their decoded block holds the scale exactly): what stage-1 files rely on.
      if (t.id == TypeId::PTQ1_0 || t.id == TypeId::PQ2_0 || t.id == TypeId::TQ1_0 || t.id == TypeId::TQ2_0) {
        std::vector<uint8_t> again;
        encode_decode(t, y, &again);
        ASSERT_EQ(again, bytes) << t.name << " re-encode";
      }
    }
  }
}

TEST(Codecs, I8RoundsAndSaturates) {
  const TypeTraits& t = traits(TypeId::I8);
  const std::vector<float> x = {0.0f, 1.4f, -1.5f, 2.5f, 127.0f, 300.0f, -129.0f, -0.49f};
  const std::vector<float> want = {0.0f, 1.0f, -2.0f, 3.0f, 127.0f, 127.0f, -128.0f, 0.0f};
  std::vector<uint8_t> bytes;
  EXPECT_EQ(encode_decode(t, x, &bytes), want);
  EXPECT_EQ(bytes[2], 0xfe);  // two's complement, one byte per element
}

TEST(Codecs, AdversarialBlocks) {
  for (const TypeTraits& t : all_types()) {
    if (!t.quantized) continue;
    const size_t n = size_t(t.block_elems);
    std::vector<uint8_t> bytes;
    // All zeros decode to zeros (sign aside) and store a zero scale.
    auto y = encode_decode(t, std::vector<float>(n, 0.0f), &bytes);
    for (float v : y) ASSERT_EQ(std::fabs(v), 0.0f) << t.name;
    // Denormal and tiny scales: finite output, never NaN.
    for (float s : {1e-8f, 1e-30f, 1e-38f, 1e-45f}) {
      std::vector<float> x(n);
      for (size_t j = 0; j < n; ++j) x[j] = (j % 3 == 0 ? -s : s) * float(j % 7);
      y = encode_decode(t, x, &bytes);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << t.name << " scale " << s;
    }
    // Huge but representable scales stay finite; the largest half is the limit.
    std::vector<float> x(n, 1.0f);
    x[n / 2] = 60000.0f;
    y = encode_decode(t, x, &bytes);
    for (float v : y) ASSERT_TRUE(std::isfinite(v)) << t.name;
    // Code 3 (+2d) decodes for the 2-bit types: a block of all-3 codes is 2d everywhere.
    if (t.id == TypeId::PQ2_0 || t.id == TypeId::Q2_0) {
      std::vector<uint8_t> b(size_t(t.block_bytes), 0xff);
      b[0] = 0x00;
      b[1] = 0x3c;  // d = 1.0
      std::vector<float> z(n);
      t.to_float(b.data(), z.data(), int64_t(n));
      for (float v : z) ASSERT_EQ(v, 2.0f);
    }
  }
}

TEST(Codecs, PackedCodesDecodeToThemselves) {
  std::mt19937 rng(7);
  struct P { TypeId id; void (*pack)(const int8_t*, uint16_t, void*); int lo, hi; };
  for (const P& p : {P{TypeId::PTQ1_0, pack_ptq1_0, -1, 1}, P{TypeId::TQ1_0, pack_tq1_0, -1, 1},
                     P{TypeId::PQ2_0, pack_pq2_0, -1, 2}, P{TypeId::TQ2_0, pack_tq2_0, -1, 2}}) {
    const TypeTraits& t = traits(p.id);
    std::vector<int8_t> v(size_t(t.block_elems));
    std::uniform_int_distribution<int> ud(p.lo, p.hi);
    for (int rep = 0; rep < 200; ++rep) {
      for (auto& c : v) c = int8_t(ud(rng));
      std::vector<uint8_t> b(size_t(t.block_bytes));
      p.pack(v.data(), f32_to_fp16(-0.5f), b.data());
      std::vector<float> y(v.size());
      t.to_float(b.data(), y.data(), int64_t(v.size()));
      for (size_t j = 0; j < v.size(); ++j) ASSERT_EQ(y[j], float(v[j]) * -0.5f) << t.name << " " << j;
    }
  }
}
