// AVX-512 kernels (F, BW, VL, VNNI, VBMI). This file alone is compiled with those instructions;
// matmul.cpp calls it only when avx512_usable(). Like kernels_avx2.cpp it takes the block layouts
// from blocks.h and calls no library code.
//
// PTQ1_0, any number of tokens. The AVX2 kernel turns each base-3 byte into digits with two
// 16-bit multiplies per 16 digits; on a machine whose memory streams 30+ GB/s per core that
// decode, not memory, sets the speed (21% of the bandwidth roofline on a 2-core Zen 5). Here the
// digits of 64 bytes at once come from table lookups: a 256-entry byte table is two 128-entry byte
// permutes (vpermi2b: the byte's low 7 bits pick the entry) and a blend on its top bit. One table
// packs digits 0..3 two bits each (a shift and a mask pick one), another holds digit 4; their
// 2 x 4 registers stay loaded. Four blocks (a "quad") go through together, one block per 128-bit
// lane, and VNNI's vpdpbusd multiplies the 0..2 codes with the int8 activations and sums them in
// int32. Those activations are the ones AVX2 quantized (act_quant.h, one scale per block), only
// reordered into the quad's register order once per call. The weights are read regrouped by
// quads (pack_ptq1, made once per weight by the caller): a quad's codes are then one 64-byte load
// and one byte permute instead of eight 16-byte loads (four of them masked) and six lane inserts,
// and its four scales one 8-byte load instead of four scalar loads and inserts.
//
// Q8_0, any number of tokens. Its codes need no unpacking; what AVX-512 saves over AVX2 is the
// per-block work: two blocks per register, one vpdpbusd per register and token instead of AVX2's
// two sign transfers, maddubs and madd per block.
#include "runtime/cpu/kernels_avx512.h"

// GCC 12's AVX-512 intrinsics start from _mm*_undefined_*() values, which -W(maybe-)uninitialized
// reports as uninitialized at inlined uses (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "formats/blocks.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_tiles.h"

namespace bonsai::cpu::avx512 {
namespace {

using tiles::for_rows;
using tiles::kTokens;
using tiles::min64;

// ---- PTQ1_0 quads ----
//
// A quad's codes are ten registers of 64 bytes, lane k (bytes 16k..16k+15) from block k:
//   S0..S4: digit n of qs[0..15]: byte j is element 16n + j (spec §1.5's 16-byte stage);
//   R0..R4: digit n of qs[16..23] and qh[0..1], loaded as ten bytes (the rest of the lane is 0):
//           byte j < 8 is element 80 + 8n + j, byte 8 + h (n < 4) is element 120 + 2n + h.
// The activations are stored in the same order, with 0 where a byte holds no element (qh's
// fifth digit, the six bytes past qh), so those codes add nothing.
constexpr int kQuad = 4;
constexpr int kRegs = 10;
constexpr int64_t kQuadBytes = 64 * kRegs;  // activation bytes per quad and token
constexpr int64_t kQuadBytesW = kQuad * int64_t(sizeof(block_ptq1_0));  // weight bytes per quad

// The element of a block that byte j of register z's lane holds, or -1.
constexpr int quad_elem(int z, int j) {
  if (z < 5) return 16 * z + j;
  const int n = z - 5;
  if (j < 8) return 80 + 8 * n + j;
  if (j < 10 && n < 4) return 120 + 2 * n + (j - 8);
  return -1;
}

// Digit n of byte b (spec §1.5): ((b * 3^n) mod 256) * 3 >> 8, for all 256 bytes (the encoder
// writes b < 243; the others decode by the same formula, as to_float does). Table 0 holds digits
// 0..3 of each byte, two bits each (digit n at bit 2n); table 1 digit 4.
struct DigitTables {
  alignas(64) uint8_t t[2][256];
};
constexpr DigitTables make_digit_tables() {
  DigitTables d{};
  int p = 1;
  for (int n = 0; n < 5; ++n, p *= 3)
    for (int b = 0; b < 256; ++b) d.t[n / 4][b] |= uint8_t(((((b * p) & 255) * 3) >> 8) << (2 * (n % 4)));
  return d;
}
constexpr DigitTables kDigits = make_digit_tables();

struct Lut {
  __m512i t[2][4];  // table k, entries 64q .. 64q + 63
  Lut() {
    for (int k = 0; k < 2; ++k)
      for (int q = 0; q < 4; ++q) t[k][q] = _mm512_load_si512(kDigits.t[k] + 64 * q);
  }
  // Table k's entries for the 64 bytes b; hi: the bytes >= 128.
  __m512i lookup(int k, __m512i b, __mmask64 hi) const {
    const __m512i lo = _mm512_permutex2var_epi8(t[k][0], b, t[k][1]);
    const __m512i up = _mm512_permutex2var_epi8(t[k][2], b, t[k][3]);
    return _mm512_mask_blend_epi8(hi, lo, up);
  }
  // The five digits of the 64 bytes b.
  void digits(__m512i b, __m512i* c) const {
    const __mmask64 hi = _mm512_movepi8_mask(b);
    const __m512i three = _mm512_set1_epi8(3), d03 = lookup(0, b, hi);
    c[0] = _mm512_and_si512(d03, three);
    // 16-bit shifts: the bits the high byte pushes into the low one are masked off
    for (int n = 1; n < 4; ++n) c[n] = _mm512_and_si512(_mm512_srli_epi16(d03, 2 * n), three);
    c[4] = lookup(1, b, hi);
  }
};

// Reorders token rows of AVX2-ordered activations (elem: position -> element within a block)
// into quad order: per block, three masked byte permutes of its 128 bytes give its ten 16-byte
// register lanes, which go to lane k of the quad's registers.
void reorder_ptq1(const int32_t* elem, const int8_t* q, int64_t cols, int64_t n_tokens, int8_t* dst) {
  uint8_t pos[QK_PTQ1_0];  // element -> position
  for (int p = 0; p < QK_PTQ1_0; ++p) pos[elem[p]] = uint8_t(p);
  alignas(64) uint8_t idx[3 * 64] = {};
  uint64_t keep[3] = {};
  for (int z = 0; z < kRegs; ++z)
    for (int j = 0; j < 16; ++j) {
      const int e = quad_elem(z, j), o = 16 * z + j;
      if (e < 0) continue;
      idx[o] = pos[e];
      keep[o / 64] |= uint64_t(1) << (o % 64);
    }
  const __m512i i0 = _mm512_load_si512(idx), i1 = _mm512_load_si512(idx + 64), i2 = _mm512_load_si512(idx + 128);
  const int64_t nb = cols / QK_PTQ1_0;
  for (int64_t b = 0; b < n_tokens * nb; ++b) {
    const int8_t* src = q + b * QK_PTQ1_0;
    const __m512i lo = _mm512_loadu_si512(src), hi = _mm512_loadu_si512(src + 64);
    alignas(64) int8_t lanes[3 * 64];
    _mm512_store_si512(lanes, _mm512_maskz_permutex2var_epi8(keep[0], lo, i0, hi));
    _mm512_store_si512(lanes + 64, _mm512_maskz_permutex2var_epi8(keep[1], lo, i1, hi));
    _mm512_store_si512(lanes + 128, _mm512_maskz_permutex2var_epi8(keep[2], lo, i2, hi));
    // block b is token b / nb, quad (b % nb) / 4, lane b % 4
    int8_t* quad = dst + (b / nb) * (nb / kQuad) * kQuadBytes + (b % nb) / kQuad * kQuadBytes + 16 * (b % kQuad);
    for (int z = 0; z < kRegs; ++z)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(quad + 64 * z), _mm_load_si128(reinterpret_cast<const __m128i*>(lanes + 16 * z)));
  }
}

// The quad layout (pack_ptq1): a row's blocks four at a time, each quad 112 bytes (as many as its
// four blocks), [0, 64): block k's qs[0..16) at 16k (register S's lanes as they are), [64, 104):
// block k's qs[16..24) and qh[0..2) at 64 + 10k (R's ten bytes a lane), [104, 112): block k's d
// at 104 + 2k. Long rows go in pairs interleaved quad by quad (interleaved(); the last row of an
// odd count alone).
constexpr int kQuadR = 64, kQuadD = 104, kRBytes = 10;
static_assert(kQuadD + 2 * kQuad == kQuad * int(sizeof(block_ptq1_0)), "a quad is as long as its blocks");

// R's lanes from the 64 bytes at quad + 48 (inside the quad): lane k byte j <- 16 + 10k + j. Bytes
// 10..15 of a lane take the next ones, which meet zero activations.
__m512i r_lanes(const uint8_t* quad) {
  alignas(64) static constexpr struct Idx {
    uint8_t v[64];
    constexpr Idx() : v() {
      for (int k = 0; k < kQuad; ++k)
        for (int j = 0; j < 16; ++j) v[16 * k + j] = uint8_t(kQuadR - 48 + kRBytes * k + j);
    }
  } idx;
  return _mm512_permutexvar_epi8(_mm512_load_si512(idx.v), _mm512_loadu_si512(quad + 48));
}

// The sums of four registers' lanes, as the four lanes of one.
__m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half(a), half(b)), _mm256_hadd_ps(half(c), half(d)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// R PTQ1_0 rows w[0..R) against T tokens (quad-ordered activations act + t * stride; per-block
// scales d[t] and corrections corr[t] as act_quant.h); out[row][t]. Each quad's four blocks sum in
// int32 lanes 4k..4k+3 (block k), then turn float once with their four scales dw_k * d_k. A row
// of 2048 columns is only four quads: R rows per call share the tables' loads and the final
// reductions, which one row alone pays for every four quads.
template <int R, int T>
void dot_ptq1(const Lut& lut, const uint8_t* const* w, int64_t qstride, int64_t nq, const int8_t* act,
              int64_t stride, const float* const* d, const float* const* corr, float (*out)[kTokens]) {
  const __m512i lane_of = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512 acc[R][T];
  __m128 cacc[R][T];
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) {
      acc[k][t] = _mm512_setzero_ps();
      cacc[k][t] = _mm_setzero_ps();
    }
  for (int64_t i = 0; i < nq; ++i, act += kQuadBytes) {
    for (int k = 0; k < R; ++k) {
      const uint8_t* q = w[k] + qstride * i;
      __m512i c[kRegs];
      lut.digits(_mm512_loadu_si512(q), c);
      lut.digits(r_lanes(q), c + 5);
      const __m128 dw = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + kQuadD)));
      for (int t = 0; t < T; ++t) {
        // two chains of five vpdpbusd (S, then R registers) instead of one of ten
        const int8_t* a = act + t * stride;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], _mm512_loadu_si512(a));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[5], _mm512_loadu_si512(a + 64 * 5));
        for (int n = 1; n < 5; ++n) {
          s0 = _mm512_dpbusd_epi32(s0, c[n], _mm512_loadu_si512(a + 64 * n));
          s1 = _mm512_dpbusd_epi32(s1, c[5 + n], _mm512_loadu_si512(a + 64 * (5 + n)));
        }
        const __m128 s4 = _mm_mul_ps(dw, _mm_loadu_ps(d[t] + kQuad * i));
        acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                    _mm512_permutexvar_ps(lane_of, _mm512_castps128_ps512(s4)), acc[k][t]);
        cacc[k][t] = _mm_fmadd_ps(dw, _mm_loadu_ps(corr[t] + kQuad * i), cacc[k][t]);
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int t = 0; t < T; ++t) acc[k][t] = _mm512_sub_ps(acc[k][t], _mm512_zextps128_ps512(cacc[k][t]));
  if constexpr (R == 4 && T == 1) {
    alignas(16) float o[4];
    _mm_store_ps(o, reduce4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
    for (int k = 0; k < R; ++k) out[k][0] = o[k];
  } else {
    for (int k = 0; k < R; ++k)
      for (int t = 0; t < T; ++t) out[k][t] = _mm512_reduce_add_ps(acc[k][t]);
  }
}

// Rows per call of dot_ptq1 for one token (groups of tokens already share each row's overhead
// among their kTokens tokens): four where a row is at most kShortQuads quads (they share the
// tables' loads and the final reductions, which one short row pays for every four quads), two
// otherwise (two independent sums keep more of the core busy), those two interleaved quad by quad
// in the layout so that the call reads one stream. Measured with bench_matmul on the 2-core Zen 5,
// 2 threads, weights from memory: 6144 x 2048 at 29-31 GB/s with two interleaved rows, 16 with
// two rows side by side (two streams) and 23-27 with one row per call (c947da6).
constexpr int kRowsPtq1 = 4;
constexpr int64_t kShortQuads = 4;

// Rows stored interleaved in the quad layout: the pairs of long rows. (Short rows' fours stay
// side by side: interleaved, the four-row call ran 10% slower from cache, 13.3 against 14.7-15.2
// GB/s on one core, and no faster from memory.)
int64_t interleaved(int64_t nq) { return nq <= kShortQuads ? 1 : 2; }

// Where row r's first quad lies in the quad layout, and the bytes from one of its quads to the next.
struct QuadRow {
  int64_t offset, stride;
};
QuadRow quad_row(int64_t r, int64_t rows, int64_t nq) {
  const int64_t g = interleaved(nq), first = r / g * g, n = min64(g, rows - first);
  return {first * nq * kQuadBytesW + (r - first) * kQuadBytesW, n * kQuadBytesW};
}

void run_ptq1(const uint8_t* w, int64_t rows, int64_t cols, const avx2::ActView& a, const int32_t* elem,
              int8_t* scratch, float* y) {
  reorder_ptq1(elem, a.q, cols, a.n_tokens, scratch);
  const int64_t nb = cols / QK_PTQ1_0, nq = nb / kQuad, stride = nq * kQuadBytes;
  const int64_t rb = nb * int64_t(sizeof(block_ptq1_0));
  for_rows<kRowsPtq1>(rows, a.n_tokens, rb, cols, [&](int64_t r, int nr, int64_t t0, int nt) {
    const Lut lut;
    const uint8_t* row[kRowsPtq1];
    int64_t qstride[kRowsPtq1];
    for (int k = 0; k < nr; ++k) {
      const QuadRow q = quad_row(r + k, rows, nq);
      row[k] = w + q.offset;
      qstride[k] = q.stride;
    }
    const int8_t* act = scratch + t0 * stride;
    const float* d[kTokens];
    const float* corr[kTokens];
    for (int t = 0; t < nt; ++t) {
      d[t] = a.d + (t0 + t) * nb;
      corr[t] = a.corr + (t0 + t) * nb;
    }
    float out[kRowsPtq1][kTokens];
    if (nr == kRowsPtq1 && nt == 1 && nq <= kShortQuads) {
      dot_ptq1<kRowsPtq1, 1>(lut, row, qstride[0], nq, act, stride, d, corr, out);
    } else if (nr == kRowsPtq1 && nt == 1) {
      dot_ptq1<2, 1>(lut, row, qstride[0], nq, act, stride, d, corr, out);
      dot_ptq1<2, 1>(lut, row + 2, qstride[2], nq, act, stride, d, corr, out + 2);
    } else {
      for (int k = 0; k < nr; ++k) switch (nt) {
          case 1: dot_ptq1<1, 1>(lut, row + k, qstride[k], nq, act, stride, d, corr, out + k); break;
          case 2: dot_ptq1<1, 2>(lut, row + k, qstride[k], nq, act, stride, d, corr, out + k); break;
          case 3: dot_ptq1<1, 3>(lut, row + k, qstride[k], nq, act, stride, d, corr, out + k); break;
          default: dot_ptq1<1, 4>(lut, row + k, qstride[k], nq, act, stride, d, corr, out + k); break;
        }
    }
    for (int k = 0; k < nr; ++k)
      for (int t = 0; t < nt; ++t) y[(t0 + t) * rows + r + k] = out[k][t];
  });
}

// ---- Q8_0 pairs ----
//
// Two blocks per register, 32 signed codes each. vpdpbusd multiplies unsigned by signed bytes,
// so the codes go in as w + 128 (their sign bit flipped), and each block's dot product starts
// from -128 * sum(a) instead of 0, spread as -16 * sum(a) over its eight int32 lanes: the lanes'
// sum is then exactly the block's sum of w * a, as AVX2 computes it. Those starting values are
// laid out per token and block, eight lanes each, by prep_q8.
constexpr int kLanes = 8;  // int32 lanes per block in a register

void prep_q8(const int8_t* q, int64_t cols, int64_t n_tokens, int32_t* start) {
  for (int64_t b = 0; b < n_tokens * (cols / QK8_0); ++b) {
    int32_t sum = 0;
    for (int j = 0; j < QK8_0; ++j) sum += q[b * QK8_0 + j];
    for (int k = 0; k < kLanes; ++k) start[b * kLanes + k] = -16 * sum;
  }
}

__m512i load_pair(const block_q8_0* w) {
  const __m512i pair = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[0].qs))),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[1].qs)), 1);
  return _mm512_xor_si512(pair, _mm512_set1_epi8(int8_t(0x80)));
}

// One Q8_0 row against T tokens (activations q[t], scales d[t], starting sums start[t]), four
// blocks per step: two registers, each with its own accumulator so that their FMAs overlap.
template <int T>
void dot_q8(const block_q8_0* w, int64_t nb, const int8_t* const* q, const float* const* d,
            const int32_t* const* start, float* out) {
  const __m512i pair0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i pair1 = _mm512_add_epi32(pair0, _mm512_set1_epi32(2));
  __m512 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i += kQuad) {
    const __m512i c0 = load_pair(w + i), c1 = load_pair(w + i + 2);
    const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(short(w[i].d), short(w[i + 1].d), short(w[i + 2].d), short(w[i + 3].d), 0, 0, 0, 0));
    for (int t = 0; t < T; ++t) {
      const int32_t* s = start[t] + i * kLanes;
      const int8_t* a = q[t] + i * QK8_0;
      const __m512i s0 = _mm512_dpbusd_epi32(_mm512_loadu_si512(s), c0, _mm512_loadu_si512(a));
      const __m512i s1 = _mm512_dpbusd_epi32(_mm512_loadu_si512(s + 2 * kLanes), c1, _mm512_loadu_si512(a + 2 * QK8_0));
      const __m512 scale = _mm512_castps128_ps512(_mm_mul_ps(dw, _mm_loadu_ps(d[t] + i)));
      acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_permutexvar_ps(pair0, scale), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_permutexvar_ps(pair1, scale), acc1[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
}

void run_q8_0(const uint8_t* w, int64_t rows, int64_t cols, const avx2::ActView& a, int8_t* scratch, float* y) {
  auto* start = reinterpret_cast<int32_t*>(scratch);
  prep_q8(a.q, cols, a.n_tokens, start);
  const int64_t nb = cols / QK8_0, rb = nb * int64_t(sizeof(block_q8_0));
  for_rows<1>(rows, a.n_tokens, rb, cols, [&](int64_t r, int, int64_t t0, int nt) {
    const auto* row = reinterpret_cast<const block_q8_0*>(w + r * rb);
    const int8_t* q[kTokens];
    const float* d[kTokens];
    const int32_t* s[kTokens];
    for (int t = 0; t < nt; ++t) {
      q[t] = a.q + (t0 + t) * cols;
      d[t] = a.d + (t0 + t) * nb;
      s[t] = start + (t0 + t) * nb * kLanes;
    }
    float out[kTokens];
    switch (nt) {
      case 1: dot_q8<1>(row, nb, q, d, s, out); break;
      case 2: dot_q8<2>(row, nb, q, d, s, out); break;
      case 3: dot_q8<3>(row, nb, q, d, s, out); break;
      default: dot_q8<4>(row, nb, q, d, s, out); break;
    }
    for (int t = 0; t < nt; ++t) y[(t0 + t) * rows + r] = out[t];
  });
}

}  // namespace

bool packs(TypeId type, int64_t cols) { return type == TypeId::PTQ1_0 && cols % (kQuad * QK_PTQ1_0) == 0; }

void pack_ptq1(const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t nq = cols / (kQuad * QK_PTQ1_0);
  const auto* blocks = reinterpret_cast<const block_ptq1_0*>(w);
  for (int64_t r = 0; r < rows; ++r) {
    const QuadRow row = quad_row(r, rows, nq);
    for (int64_t i = 0; i < nq; ++i) {
      const block_ptq1_0* b = blocks + (r * nq + i) * kQuad;
      uint8_t* q = out + row.offset + row.stride * i;
      for (int k = 0; k < kQuad; ++k) {
        std::memcpy(q + 16 * k, b[k].qs, 16);
        std::memcpy(q + kQuadR + kRBytes * k, b[k].qs + 16, 8);
        std::memcpy(q + kQuadR + kRBytes * k + 8, b[k].qh, 2);
        std::memcpy(q + kQuadD + 2 * k, &b[k].d, 2);
      }
    }
  }
}

int64_t scratch_bytes(TypeId type, int64_t cols, int64_t n_tokens) {
  switch (type) {
    case TypeId::PTQ1_0:
      if (!packs(type, cols)) return 0;
      return n_tokens * (cols / (kQuad * QK_PTQ1_0)) * kQuadBytes;
    case TypeId::Q8_0:
      if (cols % (kQuad * QK8_0) != 0) return 0;
      return n_tokens * (cols / QK8_0) * kLanes * int64_t(sizeof(int32_t));
    default: return 0;
  }
}

void matmul_q8(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, const avx2::ActView& a,
               const int32_t* elem, int8_t* scratch, float* y) {
  if (type == TypeId::PTQ1_0) run_ptq1(w, rows, cols, a, elem, scratch, y);
  if (type == TypeId::Q8_0) run_q8_0(w, rows, cols, a, scratch, y);
}

}  // namespace bonsai::cpu::avx512
