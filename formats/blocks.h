// Every quantized block layout, defined once (shared/specs/formats.md §1), with its decoder.
// Compiled by the C++ compiler and by nvcc: the CPU and CUDA backends both include this file
// and never define a layout of their own. Scales are IEEE fp16 bits (see fp16.h).
#pragma once
#include <cstdint>

#include "formats/fp16.h"
#include "formats/hd.h"

namespace bonsai {

constexpr int QK8_0 = 32;
constexpr int QK4_0 = 32;
constexpr int QK_K = 256;    // TQ1_0, TQ2_0
constexpr int QK1_0 = 128;
constexpr int QK2_0 = 64;
constexpr int QK_PQ2_0 = 128;
constexpr int QK_PTQ1_0 = 128;

struct block_q8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");

struct block_q4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];  // byte j: element j (low nibble), element j+16 (high nibble)
};
static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");

struct block_tq1_0 {
  uint8_t qs[48];  // base-3, five trits a byte: stages of 32 then 16 bytes
  uint8_t qh[4];   // four trits a byte
  uint16_t d;      // scale last
};
static_assert(sizeof(block_tq1_0) == 54, "TQ1_0 block is 54 bytes");

struct block_tq2_0 {
  uint8_t qs[QK_K / 4];  // byte 32h+m: elements 128h+m+32n in bits 2n..2n+1
  uint16_t d;            // scale last
};
static_assert(sizeof(block_tq2_0) == 66, "TQ2_0 block is 66 bytes");

struct block_q1_0 {
  uint16_t d;
  uint8_t qs[QK1_0 / 8];  // element j: bit j%8 of byte j/8; 1 -> +d, 0 -> -d
};
static_assert(sizeof(block_q1_0) == 18, "Q1_0 block is 18 bytes");

// Q2_0 (group 64) and PQ2_0 (group 128) are one codec at two group sizes: element j is the
// 2-bit field at bits 2*(j%4) of byte j/4, value (code - 1) * d; code 3 (+2d) must decode.
template <int QK>
struct block_2bit {
  uint16_t d;
  uint8_t qs[QK / 4];
};
using block_q2_0 = block_2bit<QK2_0>;
using block_pq2_0 = block_2bit<QK_PQ2_0>;
static_assert(sizeof(block_q2_0) == 18, "Q2_0 block is 18 bytes");
static_assert(sizeof(block_pq2_0) == 34, "PQ2_0 block is 34 bytes");

struct block_ptq1_0 {
  uint8_t qs[24];  // base-3: one stage of 16 bytes, one of 8
  uint8_t qh[2];
  uint16_t d;      // scale last
};
static_assert(sizeof(block_ptq1_0) == 28, "PTQ1_0 block is 28 bytes");

// ---- base-3 packing shared by TQ1_0 and PTQ1_0 (spec §1.5) ----

// Digit n (0 = most significant) of a byte packed by the ceil(q*256/243) map.
BONSAI_HD inline int trit_digit(uint8_t byte, int n) {
  constexpr uint8_t pow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = uint8_t(byte * pow3[n]);
  return (uint16_t(q) * 3) >> 8;
}

// Walks the element placement of a base-3 block: qs in stages of 32, 16 then 8 bytes (as many
// whole stages of each width as fit, widest first), then qh with four trits a byte.
// f(element index, pointer to the byte, digit n) is called for every element.
template <int QS, int QH, typename F>
BONSAI_HD inline void for_each_trit(F&& f) {
  int e = 0, off = 0;
  for (int w = 32; w >= 8; w /= 2) {
    while (QS - off >= w) {
      for (int m = 0; m < w; ++m)
        for (int n = 0; n < 5; ++n) f(e + m + w * n, off + m, n);
      off += w;
      e += 5 * w;
    }
  }
  for (int h = 0; h < QH; ++h)
    for (int n = 0; n < 4; ++n) f(e + h + QH * n, QS + h, n);
}

template <int QS, int QH, typename Block>
BONSAI_HD inline void decode_base3(const Block& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for_each_trit<QS, QH>([&](int e, int byte, int n) {
    const uint8_t v = byte < QS ? b.qs[byte] : b.qh[byte - QS];
    y[e] = float(trit_digit(v, n) - 1) * d;
  });
}

// ---- per-block decoders ----

BONSAI_HD inline void decode_block(const block_q8_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < QK8_0; ++j) y[j] = float(b.qs[j]) * d;
}

BONSAI_HD inline void decode_block(const block_q4_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < QK4_0 / 2; ++j) {
    y[j] = float((b.qs[j] & 0x0f) - 8) * d;
    y[j + QK4_0 / 2] = float((b.qs[j] >> 4) - 8) * d;
  }
}

BONSAI_HD inline void decode_block(const block_tq1_0& b, float* y) { decode_base3<48, 4>(b, y); }

BONSAI_HD inline void decode_block(const block_ptq1_0& b, float* y) { decode_base3<24, 2>(b, y); }

BONSAI_HD inline void decode_block(const block_tq2_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 32; ++m)
      for (int n = 0; n < 4; ++n)
        y[128 * h + m + 32 * n] = float(((b.qs[32 * h + m] >> (2 * n)) & 3) - 1) * d;
}

BONSAI_HD inline void decode_block(const block_q1_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < QK1_0; ++j) y[j] = ((b.qs[j / 8] >> (j % 8)) & 1) ? d : -d;
}

template <int QK>
BONSAI_HD inline void decode_block(const block_2bit<QK>& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < QK; ++j) y[j] = float(((b.qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
}

}  // namespace bonsai
