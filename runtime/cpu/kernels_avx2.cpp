// AVX2+FMA+F16C kernels. This file alone is compiled with -mavx2 -mfma -mf16c; matmul.cpp calls
// it only when the CPU has all three. It uses blocks.h for the block layouts only (no decoder of
// it is called here, and no std:: template is instantiated here): an inline function compiled
// with AVX2 in this file could otherwise be the copy the linker keeps for every caller.
//
// Quantized weights: every block is unpacked to unsigned 8-bit codes (value = code - offset;
// Q8_0 keeps its signed bytes), 32 at a time, and multiplied with int8 activations by
// _mm256_maddubs_epi16; the offset comes back as a per-block correction computed once per call
// from the activation sums (act_quant.h). Codes come out in a per-type "position" order that
// keeps unpacking cheap; the activations are stored in the same order (act_quant.cpp's layouts).
#include "runtime/cpu/kernels_avx2.h"

#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "formats/blocks.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_tiles.h"

namespace bonsai::cpu::avx2 {
namespace {

using tiles::for_rows;
using tiles::kTokens;
using tiles::min64;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i both_halves(__m128i lo, __m128i hi) { return _mm256_set_m128i(hi, lo); }

// ---- unpackers: K::codes(qs, c) fills c[K::kSub] with 32 codes each, in position order, from a
// block's code bytes (its qs, then its qh where the type has one: all of the block but its scale) ----

// Base-3 digits (spec §1.5): digit n of byte b is ((b * 3^n) mod 256) * 3 >> 8. With b in a 16-bit
// lane, mullo by 3^n << 8 leaves (b * 3^n mod 256) << 8, and mulhi_epu16 by 3 is the "* 3 >> 8".
// `mul` holds 3^n << 8 per lane, so one register can take different digits in different lanes.
// The empty asm hides the constant from GCC, which would otherwise expand each multiply into a
// chain of shifts and adds (measurably slower on PTQ1_0); the constants still get hoisted.
inline __m256i trits(__m256i b16, __m256i mul) {
  asm("" : "+x"(mul));
  return _mm256_mulhi_epu16(_mm256_mullo_epi16(b16, mul), _mm256_set1_epi16(3));
}
inline __m256i pow3(int n) {
  constexpr short p[5] = {1, 3, 9, 27, 81};
  return _mm256_set1_epi16(short(p[n] << 8));
}
// Two registers of 16 digits -> 32 bytes. packus works per 128-bit half, so bytes 0..7 come from
// a's lanes 0..7, 8..15 from b's lanes 0..7, 16..23 from a's 8..15, 24..31 from b's 8..15: with a
// holding elements e..e+15 and b e+16..e+31, bits 3 and 4 of the offset swap (base3_packed).
inline __m256i pack(__m256i a, __m256i b) { return _mm256_packus_epi16(a, b); }

// PTQ1_0: qs[0..15] is a 16-byte stage (digit n of byte m: element 16n+m), qs[16..23] an 8-byte
// stage (digit n of byte m: 80+8n+m), qh[0..1] four digits each (digit n of byte h: 120+2n+h).
// Digit registers D0..D7 of 16 lanes hold elements 16r..16r+15 in order:
//   D0..D4: the 16-byte stage, digits 0..4;
//   D5: stage-8 bytes twice, digits 0 | 1     (80..87, 88..95);
//   D6: stage-8 bytes twice, digits 2 | 3     (96..103, 104..111);
//   D7: stage-8 digit 4, then qh0,qh1 repeated with digits 0,0,1,1,2,2,3,3 (112..119, 120..127).
struct KPTQ1 {
  using Block = block_ptq1_0;
  static constexpr int kSub = 4;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m128i hi = load16(qs + 8);  // qs[8..23], i.e. stage-8 bytes at 8..15 (whole block: 28 B)
    const __m128i h2 = _mm_loadu_si16(qs + sizeof(Block::qs));  // qh
    const __m256i a = _mm256_cvtepu8_epi16(load16(qs));
    const __m256i bb = _mm256_cvtepu8_epi16(_mm_unpackhi_epi64(hi, hi));
    // stage-8 bytes then qh0,qh1 four times
    const __m256i bh = _mm256_cvtepu8_epi16(_mm_unpackhi_epi64(hi, _mm_shuffle_epi8(h2, _mm_set1_epi16(0x0100))));
    c[0] = pack(trits(a, pow3(0)), trits(a, pow3(1)));
    c[1] = pack(trits(a, pow3(2)), trits(a, pow3(3)));
    c[2] = pack(trits(a, pow3(4)), trits(bb, both_halves(_mm_set1_epi16(1 << 8), _mm_set1_epi16(3 << 8))));
    c[3] = pack(trits(bb, both_halves(_mm_set1_epi16(9 << 8), _mm_set1_epi16(27 << 8))),
                trits(bh, _mm256_setr_epi16(81 << 8, 81 << 8, 81 << 8, 81 << 8, 81 << 8, 81 << 8, 81 << 8,
                                            81 << 8, 1 << 8, 1 << 8, 3 << 8, 3 << 8, 9 << 8, 9 << 8, 27 << 8,
                                            27 << 8)));
  }
};

// TQ1_0: a 32-byte stage (digit n of byte m: element 32n+m), a 16-byte stage (160+16n+m), qh[4]
// (digit n of byte h: 240+4n+h). Digit registers D0..D15 hold elements 16r..16r+15 in order:
// D(2n), D(2n+1) = digit n of stage-32 bytes 0..15, 16..31; D(10+n) = digit n of the 16-byte
// stage; D15 = qh0..3 repeated four times with digits 0,1,2,3.
struct KTQ1 {
  using Block = block_tq1_0;
  static constexpr int kSub = 8;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m256i s32 = load32(qs);
    const __m256i lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(s32));
    const __m256i hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(s32, 1));
    const __m256i s16 = _mm256_cvtepu8_epi16(load16(qs + 32));
    int32_t qh;
    std::memcpy(&qh, qs + sizeof(Block::qs), 4);
    const __m256i h = _mm256_cvtepu8_epi16(_mm_set1_epi32(qh));
    for (int n = 0; n < 5; ++n) c[n] = pack(trits(lo, pow3(n)), trits(hi, pow3(n)));
    c[5] = pack(trits(s16, pow3(0)), trits(s16, pow3(1)));
    c[6] = pack(trits(s16, pow3(2)), trits(s16, pow3(3)));
    c[7] = pack(trits(s16, pow3(4)),
                trits(h, both_halves(_mm_setr_epi16(1 << 8, 1 << 8, 1 << 8, 1 << 8, 3 << 8, 3 << 8, 3 << 8, 3 << 8),
                                     _mm_setr_epi16(9 << 8, 9 << 8, 9 << 8, 9 << 8, 27 << 8, 27 << 8, 27 << 8,
                                                    27 << 8))));
  }
};

// TQ2_0: byte 32h+m holds element 128h+32n+m in bits 2n: bit pair n of a half is 32 elements in
// order (identity). Shifting 16-bit lanes is safe: the mask keeps bits of each byte's own.
struct KTQ2 {
  using Block = block_tq2_0;
  static constexpr int kSub = 8;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i x = load32(qs + 32 * h);
      c[4 * h + 0] = _mm256_and_si256(x, m3);
      c[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 2), m3);
      c[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m3);
      c[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(x, 6), m3);
    }
  }
};

// PQ2_0 / Q2_0: element j at bits 2(j%4) of byte j/4. Bit pair n of the QK/4 bytes is a plane
// (elements 4m+n); planes follow each other (two_bit_planes). Q2_0's 16 bytes give two planes per
// register: low half plane 2i, high half plane 2i+1.
template <int QK>
struct K2bit {
  using Block = block_2bit<QK>;
  static constexpr int kSub = QK / 32;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m256i m3 = _mm256_set1_epi8(3);
    if constexpr (QK == 128) {
      const __m256i x = load32(qs);
      for (int n = 0; n < 4; ++n) c[n] = _mm256_and_si256(_mm256_srli_epi16(x, 2 * n), m3);
    } else {
      static_assert(QK == 64, "2-bit kernel for groups of 64 or 128");
      const __m128i x = load16(qs);
      const __m256i y = both_halves(x, _mm_srli_epi16(x, 2));
      c[0] = _mm256_and_si256(y, m3);
      c[1] = _mm256_and_si256(_mm256_srli_epi16(y, 4), m3);
    }
  }
};

// Q1_0: element j is bit j%8 of byte j/8, value +-d, taken as code 0 or 2 with offset 1. With
// y = [x << 1 | x], bit 1 of each byte of y >> 2k is bit 2k of x (low half) or 2k+1 (high half):
// register k is elements 8m+2k then 8m+2k+1 (q1_planes). The 16-bit shifts never carry a
// neighbour's bit into bit 1 of a byte (at most 7 positions within a byte are crossed).
struct KQ1 {
  using Block = block_q1_0;
  static constexpr int kSub = 4;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m128i x = load16(qs);
    const __m256i y = both_halves(_mm_slli_epi16(x, 1), x);
    const __m256i m2 = _mm256_set1_epi8(2);
    for (int k = 0; k < 4; ++k) c[k] = _mm256_and_si256(_mm256_srli_epi16(y, 2 * k), m2);
  }
};

// Q4_0: byte j holds element j (low nibble) and j+16 (high nibble): identity, offset 8.
struct KQ4 {
  using Block = block_q4_0;
  static constexpr int kSub = 1;
  static constexpr bool kSigned = false;
  static void codes(const uint8_t* qs, __m256i* c) {
    const __m128i x = load16(qs);
    c[0] = _mm256_and_si256(both_halves(x, _mm_srli_epi16(x, 4)), _mm256_set1_epi8(15));
  }
};

// Q8_0: the signed bytes themselves (identity).
struct KQ8 {
  using Block = block_q8_0;
  static constexpr int kSub = 1;
  static constexpr bool kSigned = true;
  static void codes(const uint8_t* qs, __m256i* c) { c[0] = load32(qs); }
};

// code*q over 32 positions as 16 int16 pair sums. maddubs takes unsigned x signed bytes; pair
// sums stay far from int16 saturation, and so do the sums of a whole block's registers: codes
// <= 15 (kSub 1), <= 3 with kSub <= 8 (8 * 2*3*127 = 6096); signed codes (kSub 1) have |code| <=
// 128 after the sign transfer: 2*128*127 < 32767.
template <bool Signed>
inline __m256i mul32(__m256i code, const int8_t* q) {
  const __m256i a = load32(q);
  return Signed ? _mm256_maddubs_epi16(_mm256_sign_epi8(code, code), _mm256_sign_epi8(a, code))
                : _mm256_maddubs_epi16(code, a);
}

// ---- rows: where a row's blocks keep their scales and code bytes ----

// A row as stored: nb blocks, each its scale and its code bytes.
template <class K>
struct StoredRow {
  static constexpr bool kSplit = false;
  using Block = typename K::Block;
  const uint8_t* p;
  StoredRow(const uint8_t* row, int64_t) : p(row) {}
  const uint8_t* codes(int64_t i) const { return reinterpret_cast<const uint8_t*>(block(i).qs); }
  float scale(int64_t i) const { return _cvtsh_ss(block(i).d); }
  const Block& block(int64_t i) const { return reinterpret_cast<const Block*>(p)[i]; }
};

// A row split (split_rows): its nb scales first, then its blocks' code bytes one after another,
// so that one load takes eight blocks' scales.
template <class K>
struct SplitRow {
  static constexpr bool kSplit = true;
  static constexpr int64_t kCodeBytes = int64_t(sizeof(typename K::Block)) - 2;
  const uint8_t* p;
  int64_t nb;
  SplitRow(const uint8_t* row, int64_t blocks) : p(row), nb(blocks) {}
  const uint8_t* codes(int64_t i) const { return p + 2 * nb + i * kCodeBytes; }
  float scale(int64_t i) const {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return _cvtsh_ss(h);
  }
  // Blocks i..i+7's scales as floats; lanes from `live` on 0.
  __m256 scales(int64_t i, int live) const {
    if (live == 8) return _mm256_cvtph_ps(load16(p + 2 * i));
    uint16_t h[8] = {};
    std::memcpy(h, p + 2 * i, size_t(2 * live));
    return _mm256_cvtph_ps(load16(h));
  }
};

// A lone token's row asks for its weights kPrefetchBytes ahead (row_tiles.h), one prefetch per
// block: with the hardware prefetcher alone these loops waited on memory. On the 2-core Zen 3
// machine Q8_0's tg rose 1.20x with it, from 65.5% to 76.1% of the roofline (docs/benchmarks.md,
// "Software prefetch on the AVX2 path"); the float kernels, bound by their loads, did not gain
// there, but on the Intel Xeon they do (dot_float).
using tiles::kPrefetchBytes;

// One weight row against T tokens' activations; out[t] for t < T. Each block is unpacked once
// for all T tokens, and its int16 sums become float once per block (one activation scale per
// block, act_quant.h). Split rows take their blocks' weight scales eight at a time, and with them
// the products with the activations' scales and corrections: three vector operations per token
// for eight blocks, where stored rows take each block's scale alone. (Stored rows gathering eight
// scales from eight blocks were slower: TQ2_0's tg lost a tenth, each row's first products
// waiting on its last blocks.)
template <class K, class Rows, int T>
void dot_q8(const Rows& row, int64_t nb, const ActView& a, int64_t t0, float* out) {
  constexpr int kQK = 32 * K::kSub;
  const int8_t* q[T];
  const float* d[T];
  const float* corr[T];
  for (int t = 0; t < T; ++t) {
    q[t] = a.q + (t0 + t) * a.cols;
    d[t] = a.d + (t0 + t) * (a.cols / kQK);
    corr[t] = a.corr + (t0 + t) * (a.cols / kQK);
  }
  // Blocks of 32 (Q8_0, Q4_0) are short: alternate two accumulators so that consecutive blocks'
  // FMAs do not wait on each other.
  constexpr int kAcc = K::kSub == 1 ? 2 : 1;
  __m256 acc[kAcc][T], c8[T];
  float c[T];
  alignas(32) float dd[T][8];  // split rows: weight scale x activation scale of the next eight blocks
  for (int t = 0; t < T; ++t) {
    for (int u = 0; u < kAcc; ++u) acc[u][t] = _mm256_setzero_ps();
    c8[t] = _mm256_setzero_ps();
    c[t] = 0.0f;
  }
  // Block i against every token: split rows scaled by dd[.][j], stored ones by their scale dw.
  auto block = [&](int64_t i, int j, float dw, __m256* acc_u) {
    const uint8_t* w = row.codes(i);
    if constexpr (T == 1) _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
    __m256i codes[K::kSub];
    K::codes(w, codes);
    for (int t = 0; t < T; ++t) {
      const int8_t* qi = q[t] + i * kQK;
      __m256i s = mul32<K::kSigned>(codes[0], qi);
      for (int k = 1; k < K::kSub; ++k) s = _mm256_add_epi16(s, mul32<K::kSigned>(codes[k], qi + 32 * k));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, _mm256_set1_epi16(1)));
      if constexpr (Rows::kSplit) {
        acc_u[t] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&dd[t][j]), acc_u[t]);
      } else {
        acc_u[t] = _mm256_fmadd_ps(f, _mm256_set1_ps(dw * d[t][i]), acc_u[t]);
        if constexpr (!K::kSigned) c[t] += dw * corr[t][i];
      }
    }
  };
  // Blocks i0..i0+n-1, kAcc at a time into the kAcc accumulators.
  auto blocks = [&](int64_t i0, int n) {
    int j = 0;
    for (; j + kAcc <= n; j += kAcc)
      for (int u = 0; u < kAcc; ++u) block(i0 + j + u, j + u, Rows::kSplit ? 0.0f : row.scale(i0 + j + u), acc[u]);
    for (; j < n; ++j) block(i0 + j, j, Rows::kSplit ? 0.0f : row.scale(i0 + j), acc[0]);
  };
  if constexpr (Rows::kSplit) {
    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
      const int live = int(min64(8, nb - i0));
      const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 dw = row.scales(i0, live);
      for (int t = 0; t < T; ++t) {
        _mm256_store_ps(dd[t], _mm256_mul_ps(dw, _mm256_maskload_ps(d[t] + i0, lanes)));
        if constexpr (!K::kSigned) c8[t] = _mm256_fmadd_ps(dw, _mm256_maskload_ps(corr[t] + i0, lanes), c8[t]);
      }
      blocks(i0, live);
    }
  } else {
    blocks(0, int(nb));
  }
  for (int u = 1; u < kAcc; ++u)
    for (int t = 0; t < T; ++t) acc[0][t] = _mm256_add_ps(acc[0][t], acc[u][t]);
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[0][t]) - (Rows::kSplit ? hsum(c8[t]) : c[t]);
}

// ---- prompts: codes unpacked once per tile of rows ----

// Code bytes of the row tile gemm_q8 unpacks at once (on the stack of each thread, in L2).
constexpr int64_t kCodeTileBytes = int64_t(64) << 10;

// A group of T tokens' activations as dot_codes reads them: per block i, the T tokens' kQK
// quantized values one after another, then their scales and corrections, so that one pointer and
// constant offsets reach all of them (eight pointers per stream left too few registers).
template <int QK, int T>
struct TokenGroup {
  static constexpr int64_t kBlockBytes = int64_t(T) * QK + 2 * T * int64_t(sizeof(float));
  static void pack(const ActView& a, int64_t t0, int64_t nb, uint8_t* dst) {
    for (int64_t i = 0; i < nb; ++i, dst += kBlockBytes) {
      float* dc = reinterpret_cast<float*>(dst + T * QK);
      for (int t = 0; t < T; ++t) {
        const int64_t b = (t0 + t) * nb + i;
        std::memcpy(dst + t * QK, a.q + b * QK, QK);
        dc[t] = a.d[b];
        dc[T + t] = a.corr[b];
      }
    }
  }
};

// One row of unpacked codes (position order, Sub registers per block, weight scales dw as float)
// against a packed TokenGroup. A block's int16 sums turn into 8 int32 lanes with 8x their pair
// sums, so that one fmsub per lane, 8*partial*d - corr, carries the block's correction too (the
// lanes add up to 8*(d*S - corr)); the factor 8 leaves at the end, exactly.
template <int Sub, int T>
void dot_codes(const uint8_t* codes, const float* dw, int64_t nb, const uint8_t* group, float* out) {
  constexpr int kQK = 32 * Sub;
  using G = TokenGroup<kQK, T>;
  const __m256i eight = _mm256_set1_epi16(8);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, codes += kQK, group += G::kBlockBytes) {
    __m256i c[Sub];
    for (int j = 0; j < Sub; ++j) c[j] = load32(codes + 32 * j);
    const __m256 wd = _mm256_broadcast_ss(dw + i);
    const float* dc = reinterpret_cast<const float*>(group + T * kQK);
    for (int t = 0; t < T; ++t) {
      const uint8_t* qt = group + t * kQK;
      __m256i s = _mm256_maddubs_epi16(c[0], load32(qt));
      for (int j = 1; j < Sub; ++j) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c[j], load32(qt + 32 * j)));
      const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, eight));
      const __m256 g = _mm256_fmsub_ps(f, _mm256_broadcast_ss(dc + t), _mm256_broadcast_ss(dc + T + t));
      acc[t] = _mm256_fmadd_ps(g, wd, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = 0.125f * hsum(acc[t]);
}

// A prompt-sized product (kGemmTokens tokens or more). dot_q8 unpacks each block once per
// kTokens tokens, which for prompts costs about as much as the products (PTQ1_0's base-3 digits
// most); here each tile of rows is unpacked once, into plain codes on the thread's stack, and
// then meets every group of T tokens (packed once per call, in L1 across the tile's rows). The
// last group is shifted back to end at the last token (n_tokens >= T): the tokens it shares with
// the group before get the same sums again. Each tile is one thread's, so the thread count
// cannot change a bit. False (nothing computed) for rows too wide for one tile.
template <class K, class Rows>
bool gemm_q8(const uint8_t* w, int64_t rows, int64_t cols, const ActView& a, float* y) {
  using Block = typename K::Block;
  constexpr int kQK = 32 * K::kSub;
  constexpr int T = K::kSub <= 4 ? 8 : 4;  // the codes of a block and T accumulators fit in 16 registers
  using G = TokenGroup<kQK, T>;
  static_assert(!K::kSigned, "signed codes (Q8_0) have nothing to unpack: dot_q8");
  if (cols > kCodeTileBytes || a.n_tokens < T) return false;
  const int64_t nb = cols / kQK, rb = nb * int64_t(sizeof(Block));
  const int64_t groups = (a.n_tokens + T - 1) / T, group_bytes = nb * G::kBlockBytes;
  auto group_start = [&](int64_t g) { return min64(g * T, a.n_tokens - T); };
  const bool parallel = rows * cols * a.n_tokens >= kParallelWork;
  // Plain new[]: no std:: template may be instantiated in this file (see kernels_avx2.h).
  uint8_t* packed = new uint8_t[size_t(groups * group_bytes)];
  parallel_for(groups, parallel, [&](int64_t g) { G::pack(a, group_start(g), nb, packed + g * group_bytes); });
  const int64_t tile = min64(rows, kCodeTileBytes / cols), tiles = (rows + tile - 1) / tile;
  parallel_dynamic(tiles, parallel, [&](int64_t i) {
    alignas(32) uint8_t codes[kCodeTileBytes];
    float dw[kCodeTileBytes / kQK];
    const int64_t r0 = i * tile, nr = min64(tile, rows - r0);
    for (int64_t r = 0; r < nr; ++r) {
      const Rows row(w + (r0 + r) * rb, nb);
      for (int64_t b = 0; b < nb; ++b) {
        __m256i c[K::kSub];
        K::codes(row.codes(b), c);
        for (int j = 0; j < K::kSub; ++j)
          _mm256_store_si256(reinterpret_cast<__m256i*>(codes + r * cols + b * kQK + 32 * j), c[j]);
        dw[r * nb + b] = row.scale(b);
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t t0 = group_start(g);
      for (int64_t r = 0; r < nr; ++r) {
        float out[T];
        dot_codes<K::kSub, T>(codes + r * cols, dw + r * nb, nb, packed + g * group_bytes, out);
        for (int t = 0; t < T; ++t) y[(t0 + t) * rows + r0 + r] = out[t];
      }
    }
  });
  delete[] packed;
  return true;
}

// ---- float weights ----

struct LF32 {
  static constexpr int kBytes = 4;  // bytes a weight
  static __m256 load8(const uint8_t* row, int64_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
  static float at(const uint8_t* row, int64_t k) {
    float v;
    std::memcpy(&v, row + 4 * k, 4);
    return v;
  }
};
struct LF16 {
  static constexpr int kBytes = 2;  // bytes a weight
  static __m256 load8(const uint8_t* row, int64_t k) { return _mm256_cvtph_ps(load16(row + 2 * k)); }
  static float at(const uint8_t* row, int64_t k) {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    return _cvtsh_ss(h);
  }
};
struct LBF16 {  // bf16 is the top half of a float32
  static constexpr int kBytes = 2;  // bytes a weight
  static __m256 load8(const uint8_t* row, int64_t k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(row + 2 * k)), 16));
  }
  static float at(const uint8_t* row, int64_t k) {
    uint16_t h;
    std::memcpy(&h, row + 2 * k, 2);
    const uint32_t u = uint32_t(h) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  }
};

// One weight row against T tokens (x rows of `cols`). T == 1 keeps four accumulators so FMA
// latency does not bound a lone dot product; with T tokens each token's chain is independent.
// A lone token asks for each weight line kL2PrefetchBytes ahead, into L2: on the 2-core Intel Xeon
// the float rows streamed from memory at half the bandwidth probe's speed without it and F16's tg
// rose from 52-55% to 84-88% of the roofline with it (docs/benchmarks.md, "The float rows
// prefetch into L2"); T0 at 4 KB gained a little less.
template <class L, int T>
void dot_float(const uint8_t* row, const float* x, int64_t cols, float* out) {
  constexpr int kAcc = T == 1 ? 4 : 1;
  __m256 acc[T][kAcc];
  for (int t = 0; t < T; ++t)
    for (int u = 0; u < kAcc; ++u) acc[t][u] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 * kAcc <= cols; k += 8 * kAcc) {
    if constexpr (T == 1)
      for (int b = 0; b < 8 * kAcc * L::kBytes; b += 64)
        _mm_prefetch(reinterpret_cast<const char*>(row + k * L::kBytes + b + tiles::kL2PrefetchBytes), _MM_HINT_T1);
    for (int u = 0; u < kAcc; ++u) {
      const __m256 w = L::load8(row, k + 8 * u);
      for (int t = 0; t < T; ++t) acc[t][u] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * cols + k + 8 * u), acc[t][u]);
    }
  }
  for (; k + 8 <= cols; k += 8) {
    const __m256 w = L::load8(row, k);
    for (int t = 0; t < T; ++t) acc[t][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + t * cols + k), acc[t][0]);
  }
  for (int t = 0; t < T; ++t) {
    __m256 s = acc[t][0];
    for (int u = 1; u < kAcc; ++u) s = _mm256_add_ps(s, acc[t][u]);
    float r = hsum(s);
    for (int64_t j = k; j < cols; ++j) r += L::at(row, j) * x[t * cols + j];
    out[t] = r;
  }
}

// Two rows (row, row + rb) and T >= 2 tokens: each activation load serves both rows, 2T
// multiply-adds to T + 2 loads where one row at a time does T to T + 1, and a prompt's float
// matmul is bound by loads. Each (row, token) sum runs in dot_float's order, so the results are
// the same to the bit.
template <class L, int T>
void dot_float2(const uint8_t* row, int64_t rb, const float* x, int64_t cols, float (*out)[kTokens]) {
  static_assert(T >= 2, "one token: dot_float");
  __m256 acc[2][T];
  for (int i = 0; i < 2; ++i)
    for (int t = 0; t < T; ++t) acc[i][t] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    const __m256 w0 = L::load8(row, k), w1 = L::load8(row + rb, k);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * cols + k);
      acc[0][t] = _mm256_fmadd_ps(w0, xv, acc[0][t]);
      acc[1][t] = _mm256_fmadd_ps(w1, xv, acc[1][t]);
    }
  }
  for (int i = 0; i < 2; ++i)
    for (int t = 0; t < T; ++t) {
      float r = hsum(acc[i][t]);
      for (int64_t j = k; j < cols; ++j) r += L::at(row + i * rb, j) * x[t * cols + j];
      out[i][t] = r;
    }
}

template <class K, class Rows = StoredRow<K>>
void run_q8(const uint8_t* w, int64_t rows, int64_t cols, const ActView& a, float* y) {
  if constexpr (!K::kSigned)
    if (a.n_tokens >= kGemmTokens && gemm_q8<K, Rows>(w, rows, cols, a, y)) return;
  const int64_t nb = cols / (32 * K::kSub);
  const int64_t rb = nb * int64_t(sizeof(typename K::Block));
  for_rows<1>(rows, a.n_tokens, rb, cols, [&](int64_t r, int, int64_t t0, int nt) {
    float out[kTokens];
    const Rows row(w + r * rb, nb);
    switch (nt) {
      case 1: dot_q8<K, Rows, 1>(row, nb, a, t0, out); break;
      case 2: dot_q8<K, Rows, 2>(row, nb, a, t0, out); break;
      case 3: dot_q8<K, Rows, 3>(row, nb, a, t0, out); break;
      default: dot_q8<K, Rows, 4>(row, nb, a, t0, out); break;
    }
    for (int t = 0; t < nt; ++t) y[(t0 + t) * rows + r] = out[t];
  });
}

template <class L>
void run_float(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y) {
  const int64_t rb = cols * L::kBytes;
  for_rows<2>(rows, n_tokens, rb, cols, [&](int64_t r, int nr, int64_t t0, int nt) {
    float out[2][kTokens];
    const uint8_t* row = w + r * rb;
    const float* xt = x + t0 * cols;
    if (nr == 2 && nt > 1) {
      switch (nt) {
        case 2: dot_float2<L, 2>(row, rb, xt, cols, out); break;
        case 3: dot_float2<L, 3>(row, rb, xt, cols, out); break;
        default: dot_float2<L, 4>(row, rb, xt, cols, out); break;
      }
    } else {
      for (int i = 0; i < nr; ++i) switch (nt) {
          case 1: dot_float<L, 1>(row + i * rb, xt, cols, out[i]); break;
          case 2: dot_float<L, 2>(row + i * rb, xt, cols, out[i]); break;
          case 3: dot_float<L, 3>(row + i * rb, xt, cols, out[i]); break;
          default: dot_float<L, 4>(row + i * rb, xt, cols, out[i]); break;
        }
    }
    for (int i = 0; i < nr; ++i)
      for (int t = 0; t < nt; ++t) y[(t0 + t) * rows + r + i] = out[i][t];
  });
}

}  // namespace

void quantize_act(const int32_t* elem, int qk, int offset, const float* x, int64_t cols, int64_t n_tokens,
                  int8_t* q, float* d, float* corr) {
  bool identity = true;
  for (int p = 0; p < qk; ++p) identity = identity && elem[p] == p;
  const int64_t nblocks = n_tokens * (cols / qk);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(__builtin_huge_valf());
  auto quantize_block = [&](int64_t b) {
    const float* xb = x + b * qk;  // tokens are contiguous rows of cols = whole blocks
    auto load8 = [&](int p) {
      return identity ? _mm256_loadu_ps(xb + p) : _mm256_i32gather_ps(xb, load32(elem + p), 4);
    };
    __m256 amax8 = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int p = 0; p < qk; p += 8) {
      const __m256 a = _mm256_and_ps(load8(p), abs_mask);
      amax8 = _mm256_max_ps(amax8, a);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // inf or NaN
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    int8_t* qb = q + b * qk;
    float db;
    int sum = 0;
    if (_mm256_movemask_ps(bad)) {
      db = __builtin_nanf("");
      for (int p = 0; p < qk; p += 32)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + p), _mm256_setzero_si256());
    } else {
      db = amax / 127.0f;
      const __m256 id = _mm256_set1_ps(db > 0.0f ? 1.0f / db : 0.0f);
      __m256i s = _mm256_setzero_si256();
      for (int p = 0; p < qk; p += 32) {
        __m256i i32[4];
        for (int j = 0; j < 4; ++j) {
          const __m256 r = _mm256_round_ps(_mm256_mul_ps(load8(p + 8 * j), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          i32[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f)));
          s = _mm256_add_epi32(s, i32[j]);
        }
        // packs work per 128-bit half: dwords come out as 0,4,1,5,2,6,3,7 of the wanted order.
        const __m256i pk = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + p),
                            _mm256_permutevar8x32_epi32(pk, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
      sum = _mm_cvtsi128_si32(s4);
    }
    d[b] = db;
    corr[b] = float(offset) * (db * float(sum));  // as act_quant.cpp: two roundings, no FMA
  };
  parallel_for(nblocks, n_tokens * cols >= kParallelWork, quantize_block);
}

bool matmul_q8(TypeId type, bool split, const uint8_t* w, int64_t rows, int64_t cols, const ActView& a, float* y) {
  if (split) switch (type) {
      case TypeId::Q8_0: run_q8<KQ8, SplitRow<KQ8>>(w, rows, cols, a, y); return true;
      case TypeId::PQ2_0: run_q8<K2bit<QK_PQ2_0>, SplitRow<K2bit<QK_PQ2_0>>>(w, rows, cols, a, y); return true;
      default: return false;
    }
  switch (type) {
    case TypeId::Q8_0: run_q8<KQ8>(w, rows, cols, a, y); return true;
    case TypeId::Q4_0: run_q8<KQ4>(w, rows, cols, a, y); return true;
    case TypeId::Q1_0: run_q8<KQ1>(w, rows, cols, a, y); return true;
    case TypeId::Q2_0: run_q8<K2bit<QK2_0>>(w, rows, cols, a, y); return true;
    case TypeId::PQ2_0: run_q8<K2bit<QK_PQ2_0>>(w, rows, cols, a, y); return true;
    case TypeId::TQ2_0: run_q8<KTQ2>(w, rows, cols, a, y); return true;
    case TypeId::TQ1_0: run_q8<KTQ1>(w, rows, cols, a, y); return true;
    case TypeId::PTQ1_0: run_q8<KPTQ1>(w, rows, cols, a, y); return true;
    default: return false;
  }
}

bool split_rows(TypeId type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  static_assert(QK_PTQ1_0 == QK_PQ2_0 && sizeof(block_pq2_0) == sizeof(block_q8_0), "34-byte blocks out");
  constexpr int64_t kOut = sizeof(block_q8_0), kCodes = kOut - 2;
  if (type != TypeId::Q8_0 && type != TypeId::PTQ1_0) return false;
  const bool ptq1 = type == TypeId::PTQ1_0;
  const int64_t in = ptq1 ? sizeof(block_ptq1_0) : sizeof(block_q8_0);
  const int64_t nb = cols / (ptq1 ? QK_PTQ1_0 : QK8_0), blocks = rows * nb;
  // Element j of PQ2_0 is bits 2(j%4) of byte j/4, so a byte is four consecutive codes c0..c3
  // weighed 1, 4, 16, 64: maddubs and madd sum them within each dword of element-ordered codes.
  const __m256i weights = _mm256_set1_epi32(0x40100401);
  const __m256i ones = _mm256_set1_epi16(1);
  parallel_for(blocks, blocks >= kParallelWork / QK_PTQ1_0, [&](int64_t i) {
    const int64_t r = i / nb, b = i % nb;
    const uint8_t* blk = src + i * in;
    uint8_t* row = dst + r * nb * kOut;
    uint8_t* codes = row + 2 * nb + b * kCodes;
    if (!ptq1) {
      std::memcpy(row + 2 * b, blk + offsetof(block_q8_0, d), 2);
      std::memcpy(codes, blk + offsetof(block_q8_0, qs), kCodes);
      return;
    }
    std::memcpy(row + 2 * b, blk + offsetof(block_ptq1_0, d), 2);
    __m256i c[KPTQ1::kSub], w[KPTQ1::kSub];
    KPTQ1::codes(blk + offsetof(block_ptq1_0, qs), c);
    for (int k = 0; k < KPTQ1::kSub; ++k) {
      // base3_packed order -> element order: the 8-byte quarters come as a0 b0 a1 b1 (pack()).
      const __m256i e = _mm256_permute4x64_epi64(c[k], 0xd8);
      w[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(e, weights), ones);  // 8 bytes, one a dword
    }
    // dwords of w0..w3 -> 32 bytes in order; packs interleave per 128-bit half, permute undoes it.
    const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(w[0], w[1]), _mm256_packus_epi32(w[2], w[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  });
  return true;
}

uint64_t read_sum(const uint64_t* p, int64_t n, int64_t ahead) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (ahead > 0) {  // prefetches do not fault past the end
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + ahead, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + ahead + 64, _MM_HINT_T0);
    }
    for (int u = 0; u < 4; ++u) a[u] = _mm256_add_epi64(a[u], load32(p + i + 4 * u));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3]));
  uint64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), s);
  uint64_t total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) total += p[i];
  return total;
}

bool matmul_float(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                  int64_t n_tokens, float* y) {
  switch (type) {
    case TypeId::F32: run_float<LF32>(w, rows, cols, x, n_tokens, y); return true;
    case TypeId::F16: run_float<LF16>(w, rows, cols, x, n_tokens, y); return true;
    case TypeId::BF16: run_float<LBF16>(w, rows, cols, x, n_tokens, y); return true;
    default: return false;
  }
}

namespace {
template <class L>
void decode_float(const uint8_t* src, int64_t n, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, L::load8(src, k));
  for (; k < n; ++k) dst[k] = L::at(src, k);
}
}  // namespace

bool float_to_f32(TypeId type, const uint8_t* src, int64_t n, float* dst) {
  switch (type) {
    case TypeId::F32: decode_float<LF32>(src, n, dst); return true;
    case TypeId::F16: decode_float<LF16>(src, n, dst); return true;
    case TypeId::BF16: decode_float<LBF16>(src, n, dst); return true;
    default: return false;
  }
}

}  // namespace bonsai::cpu::avx2
