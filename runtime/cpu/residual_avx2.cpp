// See residual_avx2.h. Compiled with -mavx2 -mfma -mf16c (runtime/cpu/CMakeLists.txt); includes
// no library header with inline code (formats/residual.h's index_at is re-done here on purpose).
#include "runtime/cpu/residual_avx2.h"

#include <immintrin.h>

#include <cstring>

namespace bonsai::cpu::avx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Index p of a row of `bits`-bit indices, LSB first (the layout formats/residual.h packs).
inline uint32_t index_bits_at(const uint8_t* row, int64_t p, int bits) {
  const uint64_t bit = uint64_t(p) * uint64_t(bits);
  uint32_t v = 0;
  for (int k = 0; k < bits; ++k) v |= uint32_t((row[(bit + uint64_t(k)) >> 3] >> ((bit + uint64_t(k)) & 7)) & 1u) << k;
  return v;
}

// The eight indices p0..p0+7 (p0 a multiple of 8, so they start on a byte) as int32 lanes.
template <int Bits>
inline __m256i eight_indices(const uint8_t* row, int64_t p0) {
  const uint8_t* src = row + p0 * Bits / 8;
  if constexpr (Bits == 8) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  } else {
    uint32_t w = 0;
    std::memcpy(&w, src, Bits);  // 8 indices of Bits bits = Bits bytes, little-endian
    const __m256i shifts = _mm256_setr_epi32(0, Bits, 2 * Bits, 3 * Bits, 4 * Bits, 5 * Bits, 6 * Bits, 7 * Bits);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w)), shifts), _mm256_set1_epi32((1 << Bits) - 1));
  }
}

template <int Bits>
void gather_rows(const float* lut, int64_t size, int64_t per_row, const uint8_t* idx, uint64_t row_bytes, int64_t n,
                 float* y) {
  // Lane i of `base` is the table offset of sub-vector p0 + i; it moves on by 8 tables per step.
  const __m256i first = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(size)));
  const __m256i step = _mm256_set1_epi32(int(8 * size));
  const int64_t full = per_row / 8 * 8;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = idx + uint64_t(r) * row_bytes;
    __m256i base = first;
    // Two accumulators: consecutive gathers do not wait on each other's add.
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= full; p += 16) {
      const __m256i o0 = _mm256_add_epi32(eight_indices<Bits>(row, p), base);
      base = _mm256_add_epi32(base, step);
      const __m256i o1 = _mm256_add_epi32(eight_indices<Bits>(row, p + 8), base);
      base = _mm256_add_epi32(base, step);
      acc0 = _mm256_add_ps(acc0, _mm256_i32gather_ps(lut, o0, 4));
      acc1 = _mm256_add_ps(acc1, _mm256_i32gather_ps(lut, o1, 4));
    }
    for (; p < full; p += 8) {
      acc0 = _mm256_add_ps(acc0, _mm256_i32gather_ps(lut, _mm256_add_epi32(eight_indices<Bits>(row, p), base), 4));
      base = _mm256_add_epi32(base, step);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; p < per_row; ++p) s += lut[p * size + int64_t(index_bits_at(row, p, Bits))];
    y[r] += s;
  }
}

// Eight rows at once for indices of Bits <= 4 (codebooks of up to 16 centroids): the tables are
// small enough for register permutes, so no gather per index. One 32-bit word of each of the
// eight rows holds the same 32/Bits sub-vectors; lane r of `w` is row r's word, and for each
// sub-vector p its index in every lane selects from p's table (one permute for up to 8 entries,
// two and a blend on bit 3 for up to 16). The eight sums come out as one vector: no horizontal add.
// lut must be readable 16 floats past its last table (residual.cpp pads it).
template <int Bits>
void permute_rows8(const float* lut, int64_t size, int64_t per_row, const uint8_t* idx, uint64_t row_bytes,
                   float* y) {
  constexpr int kPerWord = 32 / Bits;
  const __m256i mask = _mm256_set1_epi32((1 << Bits) - 1);
  const int64_t full = per_row / kPerWord * kPerWord;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t p0 = 0; p0 < full; p0 += kPerWord) {
    uint32_t words[8];
    for (int r = 0; r < 8; ++r) std::memcpy(&words[r], idx + uint64_t(r) * row_bytes + p0 * Bits / 8, 4);
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
    for (int j = 0; j < kPerWord; ++j) {
      const float* lp = lut + (p0 + j) * size;
      const __m256i shifted = _mm256_srli_epi32(w, j * Bits);
      if constexpr (Bits == 4) {
        // The permutes read only an index's low 3 bits; its bit 3, moved to the sign bit, picks
        // the upper 8 entries in the blend.
        const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lp), shifted);
        const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lp + 8), shifted);
        const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(w, 28 - j * 4));
        acc = _mm256_add_ps(acc, _mm256_blendv_ps(lo, hi, upper));
      } else {
        acc = _mm256_add_ps(acc, _mm256_permutevar8x32_ps(_mm256_loadu_ps(lp), _mm256_and_si256(shifted, mask)));
      }
    }
  }
  float s[8];
  _mm256_storeu_ps(s, acc);
  for (int r = 0; r < 8; ++r) {
    const uint8_t* row = idx + uint64_t(r) * row_bytes;
    for (int64_t p = full; p < per_row; ++p) s[r] += lut[p * size + int64_t(index_bits_at(row, p, Bits))];
    y[r] += s[r];
  }
}

template <int Bits>
void small_rows(const float* lut, int64_t size, int64_t per_row, const uint8_t* idx, uint64_t row_bytes, int64_t n,
                float* y) {
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) permute_rows8<Bits>(lut, size, per_row, idx + uint64_t(r) * row_bytes, row_bytes, y + r);
  gather_rows<Bits>(lut, size, per_row, idx + uint64_t(r) * row_bytes, row_bytes, n - r, y + r);
}

}  // namespace

void residual_lut(const float* ct, int64_t size, int64_t dim, const float* x, int64_t per_row, float* lut,
                  float* xsum) {
  const int64_t full = size / 8 * 8;
  for (int64_t p = 0; p < per_row; ++p) {
    const float* xp = x + p * dim;
    float* out = lut + p * size;
    float sum = 0.0f;
    for (int64_t j = 0; j < dim; ++j) sum += xp[j];
    xsum[p] = sum;
    int64_t k = 0;
    for (; k + 16 <= full; k += 16) {  // two chunks of centroids per pass over the sub-vector
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int64_t j = 0; j < dim; ++j) {
        const __m256 xj = _mm256_set1_ps(xp[j]);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(ct + j * size + k), xj, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(ct + j * size + k + 8), xj, a1);
      }
      _mm256_storeu_ps(out + k, a0);
      _mm256_storeu_ps(out + k + 8, a1);
    }
    for (; k < full; k += 8) {
      __m256 a = _mm256_setzero_ps();
      for (int64_t j = 0; j < dim; ++j) a = _mm256_fmadd_ps(_mm256_loadu_ps(ct + j * size + k), _mm256_set1_ps(xp[j]), a);
      _mm256_storeu_ps(out + k, a);
    }
    for (; k < size; ++k) {
      float d = 0.0f;
      for (int64_t j = 0; j < dim; ++j) d += ct[j * size + k] * xp[j];
      out[k] = d;
    }
  }
}

void residual_lut_i8(const float* lut, int64_t size, int64_t per_row, int8_t* q, float* scale) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // Table p is lut[p·size ..] with size <= 16: entries past `size` are masked off (read as 0).
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(size)), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(size) - 8), lane);
  for (int64_t c0 = 0; c0 < per_row; c0 += kLookupChunk) {
    const int64_t c1 = c0 + kLookupChunk < per_row ? c0 + kLookupChunk : per_row;
    __m256 m = _mm256_setzero_ps();
    for (int64_t p = c0; p < c1; ++p) {
      m = _mm256_max_ps(m, _mm256_and_ps(_mm256_maskload_ps(lut + p * size, m0), abs_mask));
      m = _mm256_max_ps(m, _mm256_and_ps(_mm256_maskload_ps(lut + p * size + 8, m1), abs_mask));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, m);
    float amax = 0.0f;
    for (float v : lanes) amax = amax > v ? amax : v;
    scale[c0 / kLookupChunk] = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int64_t p = c0; p < c1; ++p) {
      // 16 entries -> 16 int8, rounded to nearest even (the MXCSR default); |entry · inv| <= 127.
      const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(lut + p * size, m0), inv));
      const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(lut + p * size + 8, m1), inv));
      // packs work per 128-bit half: words a0..3 b0..3 | a4..7 b4..7, then bytes of both halves.
      const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
      const __m128i bytes = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * p), bytes);
    }
  }
  if (per_row % 2) std::memset(q + 16 * per_row, 0, 16);  // the pair's missing table: adds nothing
}

void residual_lookup32(const int8_t* q, const float* scale, int64_t per_row, const uint8_t* packed, int64_t blocks,
                       float* y) {
  const int64_t pairs = (per_row + 1) / 2;
  const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < blocks; ++b, packed += pairs * 32, y += 32) {
    // out[k]: rows 8k..8k+7 in float
    __m256 out[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t c0 = 0; c0 < pairs; c0 += kLookupChunk / 2) {
      const int64_t c1 = c0 + kLookupChunk / 2 < pairs ? c0 + kLookupChunk / 2 : pairs;
      // acc_a: rows 0..7 | 16..23, acc_b: rows 8..15 | 24..31 (unpack works per 128-bit half)
      __m256i acc_a = _mm256_setzero_si256(), acc_b = _mm256_setzero_si256();
      for (int64_t k = c0; k < c1; ++k) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + 32 * k));
        const __m256i i0 = _mm256_and_si256(x, low4), i1 = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
        const __m256i t0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * k)));
        const __m256i t1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32 * k + 16)));
        const __m256i l0 = _mm256_shuffle_epi8(t0, i0), l1 = _mm256_shuffle_epi8(t1, i1);
        // each row's two entries side by side, added into one int16 by maddubs(1, ·)
        acc_a = _mm256_add_epi16(acc_a, _mm256_maddubs_epi16(ones, _mm256_unpacklo_epi8(l0, l1)));
        acc_b = _mm256_add_epi16(acc_b, _mm256_maddubs_epi16(ones, _mm256_unpackhi_epi8(l0, l1)));
      }
      const __m256 sc = _mm256_set1_ps(scale[2 * c0 / kLookupChunk]);
      auto to_float = [](__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(v)); };
      out[0] = _mm256_fmadd_ps(to_float(_mm256_castsi256_si128(acc_a)), sc, out[0]);
      out[1] = _mm256_fmadd_ps(to_float(_mm256_castsi256_si128(acc_b)), sc, out[1]);
      out[2] = _mm256_fmadd_ps(to_float(_mm256_extracti128_si256(acc_a, 1)), sc, out[2]);
      out[3] = _mm256_fmadd_ps(to_float(_mm256_extracti128_si256(acc_b, 1)), sc, out[3]);
    }
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(_mm256_loadu_ps(y + 8 * k), out[k]));
  }
}

bool residual_gather(const float* lut, int64_t size, int bits, int64_t per_row, const uint8_t* idx,
                     uint64_t row_bytes, int64_t n, float* y) {
  if (per_row * size >= (int64_t{1} << 31)) return false;  // gather offsets are int32
  switch (bits) {
    case 1: small_rows<1>(lut, size, per_row, idx, row_bytes, n, y); return true;
    case 2: small_rows<2>(lut, size, per_row, idx, row_bytes, n, y); return true;
    case 4: small_rows<4>(lut, size, per_row, idx, row_bytes, n, y); return true;
    case 8: gather_rows<8>(lut, size, per_row, idx, row_bytes, n, y); return true;
    default: return false;
  }
}

}  // namespace bonsai::cpu::avx2
