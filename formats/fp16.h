// IEEE binary16 and bfloat16 <-> float32, bit-exact with ggml's software conversions
// (shared/specs/formats.md §1.1): round to nearest even, subnormals kept, overflow to inf,
// NaN -> quiet NaN with the sign kept. Host and device.
#pragma once
#include <cstdint>
#include <cstring>

#include "formats/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace bonsai {

BONSAI_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

BONSAI_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

BONSAI_HD inline float fp16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));  // one exact hardware conversion
#else
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // Subnormal: value = mant * 2^-24, exactly representable in float32.
  const float v = float(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
#endif
}

BONSAI_HD inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00; // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                       // below 2^-14: subnormal or zero
    // f * 2^24 is exact (a power-of-two scale); round half to even to the subnormal step.
    const float scaled = f32_from_bits(ax) * 16777216.0f;
    uint32_t q = uint32_t(scaled);
    const float frac = scaled - float(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1))) ++q;
    return uint16_t(sign | q);  // q may reach 0x400, the smallest normal: correct encoding
  }
  const uint32_t mant = ax & 0x7fffff;
  uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return uint16_t(sign | h);
}

BONSAI_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

BONSAI_HD inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64);  // quiet NaN
  return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

}  // namespace bonsai
