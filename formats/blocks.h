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

// Digit n (0 = most significant) of each of the four bytes of q, packed by the ceil(q*256/243)
// map, one digit a byte. With x = b*3^n = 256k + r, the digit is floor(3r/256) =
// floor(3x/256) - 3*floor(x/256); both floors are taken for two bytes at once in 16-bit lanes
// (b*3^5 < 2^16, so no lane overflows) and the difference is exact on the whole word because
// every byte of it is 0..2.
BONSAI_HD constexpr uint32_t trit_floor4(uint32_t q, uint32_t p) {  // bytes floor(b*p/256), p <= 243
  const uint32_t e = (q & 0x00ff00ffu) * p, o = ((q >> 8) & 0x00ff00ffu) * p;
#if defined(__CUDA_ARCH__)
  return __byte_perm(e, o, 0x7351);
#else
  return ((e >> 8) & 0x00ff00ffu) | (o & 0xff00ff00u);
#endif
}
BONSAI_HD constexpr uint32_t trit_digits4(uint32_t q, int n) {
  constexpr uint32_t pow3[6] = {1, 3, 9, 27, 81, 243};
  return trit_floor4(q, pow3[n + 1]) - 3 * trit_floor4(q, pow3[n]);
}

// Walks the element placement of a base-3 block: qs in stages of 32, 16 then 8 bytes (as many
// whole stages of each width as fit, widest first), then qh with four trits a byte.
// f(element index, pointer to the byte, digit n) is called for every element.
template <int QS, int QH, typename F>
BONSAI_HD constexpr void for_each_trit(F&& f) {
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

// Inverse of for_each_trit: the byte and digit that hold element j.
template <int QS, int QH>
BONSAI_HD inline void trit_place(int j, int& byte, int& digit) {
  int e = 0, off = 0;
  for (int w = 32; w >= 8; w /= 2) {
    while (QS - off >= w) {
      if (j < e + 5 * w) {
        byte = off + (j - e) % w;
        digit = (j - e) / w;
        return;
      }
      off += w;
      e += 5 * w;
    }
  }
  byte = QS + (j - e) % QH;
  digit = (j - e) / QH;
}

// ---- the code view of each block type: the one description of where element j lives ----
//
// Every quantized type here stores element j as an integer code times the block's scale d. A
// CodeView says: the block's code bytes (contiguous, kBytes of them), the byte and digit that
// hold element j (place), and digit n of four code bytes at once, one a byte (digits4: a 32-bit
// word of code bytes in, four small unsigned digits out). The signed integer a digit stands for
// is kMul * digit + kOff (code_value; Q8_0's digit is the signed byte itself). decode_block below
// is written once over it; the CUDA dp4a kernels multiply digits4 words with int8 activations.
// All values are small integers, so value * d is exact as the layouts define it.
template <typename Block>
struct CodeView;

template <>
struct CodeView<block_q8_0> {
  static constexpr int kElems = QK8_0, kBytes = QK8_0, kDigits = 1, kMul = 1, kOff = 0;
  BONSAI_HD static const uint8_t* bytes(const block_q8_0& b) { return reinterpret_cast<const uint8_t*>(b.qs); }
  BONSAI_HD static float scale(const block_q8_0& b) { return fp16_to_f32(b.d); }
  BONSAI_HD static void place(int j, int& byte, int& digit) { byte = j, digit = 0; }
  BONSAI_HD static uint32_t digits4(uint32_t q, int) { return q; }
};

template <>
struct CodeView<block_q4_0> {  // byte j: element j (low nibble), element j+16 (high nibble)
  static constexpr int kElems = QK4_0, kBytes = QK4_0 / 2, kDigits = 2, kMul = 1, kOff = -8;
  BONSAI_HD static const uint8_t* bytes(const block_q4_0& b) { return b.qs; }
  BONSAI_HD static float scale(const block_q4_0& b) { return fp16_to_f32(b.d); }
  BONSAI_HD static void place(int j, int& byte, int& digit) { byte = j % 16, digit = j / 16; }
  BONSAI_HD static uint32_t digits4(uint32_t q, int n) { return (q >> (4 * n)) & 0x0f0f0f0fu; }
};

template <int QS, int QH>
struct Base3View {  // TQ1_0 and PTQ1_0: qs then qh, contiguous in the block
  static constexpr int kBytes = QS + QH, kDigits = 5, kMul = 1, kOff = -1;
  BONSAI_HD static void place(int j, int& byte, int& digit) { trit_place<QS, QH>(j, byte, digit); }
  BONSAI_HD static uint32_t digits4(uint32_t q, int n) { return trit_digits4(q, n); }
};

template <>
struct CodeView<block_tq1_0> : Base3View<48, 4> {
  static constexpr int kElems = QK_K;
  BONSAI_HD static const uint8_t* bytes(const block_tq1_0& b) { return b.qs; }
  BONSAI_HD static float scale(const block_tq1_0& b) { return fp16_to_f32(b.d); }
};

template <>
struct CodeView<block_ptq1_0> : Base3View<24, 2> {
  static constexpr int kElems = QK_PTQ1_0;
  BONSAI_HD static const uint8_t* bytes(const block_ptq1_0& b) { return b.qs; }
  BONSAI_HD static float scale(const block_ptq1_0& b) { return fp16_to_f32(b.d); }
};

template <>
struct CodeView<block_tq2_0> {  // byte 32h+m: elements 128h+m+32n in bits 2n..2n+1
  static constexpr int kElems = QK_K, kBytes = QK_K / 4, kDigits = 4, kMul = 1, kOff = -1;
  BONSAI_HD static const uint8_t* bytes(const block_tq2_0& b) { return b.qs; }
  BONSAI_HD static float scale(const block_tq2_0& b) { return fp16_to_f32(b.d); }
  BONSAI_HD static void place(int j, int& byte, int& digit) { byte = 32 * (j / 128) + j % 32, digit = (j % 128) / 32; }
  BONSAI_HD static uint32_t digits4(uint32_t q, int n) { return (q >> (2 * n)) & 0x03030303u; }
};

template <>
struct CodeView<block_q1_0> {  // element j: bit j%8 of byte j/8; 1 -> +d, 0 -> -d
  static constexpr int kElems = QK1_0, kBytes = QK1_0 / 8, kDigits = 8, kMul = 2, kOff = -1;
  BONSAI_HD static const uint8_t* bytes(const block_q1_0& b) { return b.qs; }
  BONSAI_HD static float scale(const block_q1_0& b) { return fp16_to_f32(b.d); }
  BONSAI_HD static void place(int j, int& byte, int& digit) { byte = j / 8, digit = j % 8; }
  BONSAI_HD static uint32_t digits4(uint32_t q, int n) { return (q >> n) & 0x01010101u; }
};

template <int QK>
struct CodeView<block_2bit<QK>> {  // element j: bits 2*(j%4) of byte j/4, value code - 1
  static constexpr int kElems = QK, kBytes = QK / 4, kDigits = 4, kMul = 1, kOff = -1;
  BONSAI_HD static const uint8_t* bytes(const block_2bit<QK>& b) { return b.qs; }
  BONSAI_HD static float scale(const block_2bit<QK>& b) { return fp16_to_f32(b.d); }
  BONSAI_HD static void place(int j, int& byte, int& digit) { byte = j / 4, digit = j % 4; }
  BONSAI_HD static uint32_t digits4(uint32_t q, int n) { return (q >> (2 * n)) & 0x03030303u; }
};

// The signed integer that digit n of a code byte stands for.
template <typename V>
BONSAI_HD inline int code_value(uint8_t byte, int n) {
  return V::kMul * int(int8_t(uint8_t(V::digits4(byte, n)))) + V::kOff;
}

// Element j of a block.
template <typename Block>
BONSAI_HD inline float block_value(const Block& b, int j) {
  using V = CodeView<Block>;
  int byte = 0, digit = 0;
  V::place(j, byte, digit);
  return float(code_value<V>(V::bytes(b)[byte], digit)) * V::scale(b);
}

// The whole block, decoded.
template <typename Block>
BONSAI_HD inline void decode_block(const Block& b, float* y) {
  for (int j = 0; j < CodeView<Block>::kElems; ++j) y[j] = block_value(b, j);
}

}  // namespace bonsai
