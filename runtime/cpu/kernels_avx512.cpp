// AVX-512 kernels (F, BW, VL, VNNI, VBMI2). This file alone is compiled with those
// instructions; matmul.cpp calls it only when avx512_usable(). Like kernels_avx2.cpp it takes the
// block layouts from blocks.h and calls no library code.
//
// PTQ1_0, any number of tokens, by table lookups (as T-MAC and bitnet.cpp's TL kernels do): the
// copy (pack) holds three trits in a five-bit code, three codes to a 16-bit lane and one row per
// lane, and each three activations get a table of the 27 sums their trits can make; vpermw then
// looks up 32 rows' codes at once. Per 32 rows and 9 weights: two shifts, three lookups and three
// adds. The slab kernel before it decoded each base-3 byte into five digit registers (nine
// operations, then five vpdpbusd per 64 bytes and row) and was bound by that work, not by memory
// (docs/benchmarks.md, "PTQ1_0 by table lookups").
//
// Q8_0 and PQ2_0, any number of tokens. Their copies are in slabs of 16 blocks, each row's scales
// first, so that the per-block work (scales, conversion to float) comes once per slab: a register of
// Q8_0's codes (made unsigned) costs one load and one vpdpbusd per token, one of PQ2_0's a shift and
// a mask per plane of two-bit codes and four vpdpbusd (docs/benchmarks.md, "Q8_0 in slabs").
#include "runtime/cpu/kernels_avx512.h"

// GCC 12's AVX-512 intrinsics start from _mm*_undefined_*() values, which -W(maybe-)uninitialized
// reports as uninitialized at inlined uses (GCC bug 105593, fixed in GCC 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "formats/blocks.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_tiles.h"

namespace bonsai::cpu::avx512 {
namespace {

using tiles::for_rows;
using tiles::kTokens;
using tiles::min64;

// ---- Slabs (Q8_0, PQ2_0) ----
constexpr int kSlab = 16;  // blocks per slab

// ---- PTQ1_0 by table lookups ----
//
// The copy holds each block's 128 trits (0..2 for -1, 0, +1) as 43 codes of three, t0 + 3 t1 + 9 t2
// for elements 3k, 3k+1, 3k+2 (the last code's third trit is a zero weight, so it is 0..8). Codes
// 0..41 go three to a 16-bit word (bits 0..4, 5..9, 10..14), 14 words a block, and the last code's
// four bits in the words' spare bit 15: bit n in word n. Rows go in groups of 128, four registers
// of 32 rows, one row per 16-bit lane: for each block, its 14 words of the group's rows (register
// i of word j: rows 32i..32i+31), then the 128 rows' fp16 scales, 3840 bytes in all (30 a block
// and row against the file's 28); the copy's rows are padded to whole groups with zero weights.
// Per call, each three activations of a block get a table of the 27 sums t0 x0 + t1 x1 + t2 x2 of
// their int8 values (|sum| <= 381), and vpermw looks the codes of 32 rows up at once: per word
// and register two shifts, three lookups and three adds (vpermw reads an index's low five bits,
// so bit 15 is no matter), and for the last code one shift and three vpshldw that gather it from
// words 0..3. A block's 43 lookups sum within +-16383 in int16, then turn float with the scales
// dw * da.
constexpr int kGroupRows = 128;                    // rows per pass: four registers of 32
constexpr int kCodes = (QK_PTQ1_0 + 2) / 3;        // codes per block (43)
constexpr int kCodeWords = kCodes / 3;             // 16-bit words per block and row (14)
constexpr int kLastCodeBits = 4;                   // the last code's bits, in words 0..3
constexpr int64_t kGroupBlockBytes = int64_t(kCodeWords) * 64 * 4 + 2 * kGroupRows;  // 3840
constexpr int64_t kTableBytes = 64;                // 27 int16 sums, five zeros
// How far ahead a lone token's group asks for its weights (each line for the one this far on), into
// L2 only (prefetch_to_l2): tiles::kL2PrefetchBytes, twice the slab kernels' kPrefetchBytes. One
// core eats this copy at 51-66 GB/s from cache, so 4 KB was ~75 ns ahead, less than a trip to
// memory; at 8 KB generation ran 7% faster (docs/benchmarks.md, "PTQ1_0's lookups prefetch 8 KB
// ahead").
using tiles::kL2PrefetchBytes;
// Weight bytes of a tile for several tokens: each tile reads every token's tables (44 KB a token at
// 2048 columns) again, so tiles are as large as L2 allows beside four tokens' tables.
constexpr int64_t kLookupTileBytes = int64_t(512) << 10;
static_assert(sizeof(block_ptq1_0) == 28 && QK_PTQ1_0 == 128, "the copy follows the block's 128 trits");
static_assert(kCodes == 3 * kCodeWords + 1 && 8 < (1 << kLastCodeBits) && kLastCodeBits <= kCodeWords,
              "the last code, two trits, fits the words' spare bits");

// The element of a block that byte j of the block's codes carries as digit n, or -1 (qh's fifth
// digit): formats' placement (for_each_trit).
struct Placement {
  int8_t elem[sizeof(block_ptq1_0)][5];
};
constexpr Placement make_placement() {
  Placement p{};
  for (auto& byte : p.elem)
    for (int8_t& e : byte) e = -1;
  constexpr int qs = int(sizeof(block_ptq1_0::qs)), qh = int(sizeof(block_ptq1_0::qh));
  for_each_trit<qs, qh>([&](int e, int byte, int n) { p.elem[byte][n] = int8_t(e); });
  return p;
}
constexpr Placement kPlacement = make_placement();

// Rows of the copy: `rows` padded to whole groups.
constexpr int64_t group_rows(int64_t rows) { return (rows + kGroupRows - 1) / kGroupRows * kGroupRows; }

// Trit k (0..2) of code c, minus one, for c < 27; 0 past them (the tables' five unused entries).
struct Patterns {
  alignas(64) int16_t p[3][32];
};
constexpr Patterns make_patterns() {
  Patterns t{};
  for (int c = 0; c < 27; ++c)
    for (int k = 0, v = c; k < 3; ++k, v /= 3) t.p[k][c] = int16_t(v % 3 - 1);
  return t;
}
constexpr Patterns kPatterns = make_patterns();

// Rows per call of run_slabs' for_rows lambda: up to four single-token rows that share their
// activation loads (dot_slabs<4, 1>, where a type's kRows is 4) and one reduction of their lanes.
constexpr int kRowsSlab = 4;

// Slabs per row of nb blocks (the last one holds nb % 16 blocks when that is not 0).
int64_t slab_count(int64_t nb) { return (nb + kSlab - 1) / kSlab; }

// Token rows of nb blocks of quantized activations into slab order: per token and slab, the Regs
// registers of 64 bytes, lane i from block i; block_words(b) gives block b's 4 * Regs bytes in
// register order (register r: bytes 4r..4r+3). Zero where a partial slab has no block.
template <int Regs, class BlockWords>
void act_slabs(int64_t nb, int64_t n_tokens, int8_t* dst, const BlockWords& block_words) {
  constexpr int64_t slab_act = 64 * Regs;
  const int64_t ns = slab_count(nb);
  if (nb % kSlab != 0)
    for (int64_t t = 0; t < n_tokens; ++t) std::memset(dst + (t * ns + ns - 1) * slab_act, 0, slab_act);
  for (int64_t b = 0; b < n_tokens * nb; ++b) {
    const int8_t* words = block_words(b);
    // block b is token b / nb, slab (b % nb) / 16, lane (b % nb) % 16
    int8_t* slab = dst + (b / nb * ns + b % nb / kSlab) * slab_act + 4 * (b % nb % kSlab);
    for (int r = 0; r < Regs; ++r) std::memcpy(slab + 64 * r, words + 4 * r, 4);
  }
}

// Rows of nb blocks of weights into slabs (register k of a slab: word k of each of its blocks, one
// per 32-bit lane), row by row at `out`: word(b, k) is the 32-bit word k of block b as the kernel
// reads it.
template <int Words, class Word>
void weight_slabs(int64_t nb, uint8_t* out, const Word& word) {
  for (int64_t b0 = 0; b0 < nb; b0 += kSlab) {
    const int64_t m = min64(kSlab, nb - b0);
    for (int64_t i = 0; i < m; ++i)
      for (int k = 0; k < Words; ++k) {
        const uint32_t v = word(b0 + i, k);
        std::memcpy(out + 4 * (Words * b0 + m * k + i), &v, 4);
      }
  }
}

// ---- Q8_0 and PQ2_0 slabs ----
//
// Their copies (pack_scales_first_row) hold each row's nb fp16 scales, then its 32 code bytes a
// block in slabs of 16 blocks: register k of a slab holds bytes 4k..4k+3 of each
// block's codes, one block per 32-bit lane. So all the registers of a slab sum into the same lanes,
// which turn float once per slab. Q8_0's codes are stored plus 128 (vpdpbusd multiplies unsigned by
// signed bytes; value = code - 128 makes the -128 the activations' correction, act_quant.h), and a
// register costs one load and one vpdpbusd per token; PQ2_0's register holds four planes of two-bit
// codes (value = code - 1), whose activation registers go plane by plane: register 8n + k meets
// plane n of word k, which is where PQ2_0's plane order (act_quant.cpp's kPQ2_0: position 32n + m is
// element 4m + n) puts its bytes, so both types' activations go to the slabs as quantized. The
// blocks as stored, two per register, took two loads and an insert, a conversion, a permute and an
// FMA per register, and four scalar scale loads per two registers.
constexpr int kWordsQ8 = QK8_0 / 4;              // registers per slab (8)
constexpr int64_t kSlabActQ8 = 64 * kWordsQ8;    // activation bytes per slab and token
constexpr int kWordsPq2 = QK_PQ2_0 / 16;         // registers per slab (8), four planes each
constexpr int64_t kSlabActPq2 = 64 * 4 * kWordsPq2;

// The sums of four registers' lanes, as the four lanes of one. Each lane adds its register's
// lanes in one fixed order, whatever the other three are, so reduce1 gives a row the same sum
// whether it goes alone or with three others (the rows a call takes depend on where it starts).
__m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half(a), half(b)), _mm256_hadd_ps(half(c), half(d)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
float reduce1(__m512 v) { return _mm_cvtss_f32(reduce4(v, v, v, v)); }

// How far ahead a lone token's rows ask for their weights: at least this many bytes, in whole
// groups of R rows. It must cover the memory's latency at the rate one core eats
// weights (~100 ns at ~30 GB/s): the next group alone is 1.75 KB ahead for the 2048-wide
// products, which then streamed 26 GB/s against 31 from 5.25 KB (docs/benchmarks.md, "Bandwidth
// probed around each repetition; prefetch distance, range stealing"). The hardware prefetcher
// alone leaves this compute-heavy loop waiting on memory; past a run's last row the prefetches
// read a few KB in vain, and cannot fault.
using tiles::kPrefetchBytes;
// The slabs also ask for each line this many times further on into L2 only (prefetch_to_l2): on
// the 2-core Intel Xeon the decode step's Q8_0 products streamed ~6% faster from memory with
// these second prefetches at 2, 4 or 8 times the distance (docs/benchmarks.md, "Q8_0's slabs
// prefetch twice"); T1 alone in place of T0 was no faster.
constexpr int64_t kL2AheadTimes = 4;
// A T0 prefetch of p's line that stays where the code puts it, one beside each weight load: GCC
// schedules _mm_prefetch freely and once moved a slab's 28 to its start, where they held up the
// loads (the ternary products streamed visibly slower in bench_matmul).
inline void prefetch_in_place(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }
// The same into L2 only, for the PTQ1_0 lookups: their tables (44 KB a token at 2048 columns) fill
// most of L1, and weights prefetched into L1 pushed them out; on a 2-core Intel Xeon the products
// streamed 12-19% faster from memory with T1 or T2 than with T0 (docs/benchmarks.md, "PTQ1_0's
// lookups prefetch into L2").
inline void prefetch_to_l2(const uint8_t* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }
// Whether R rows against T tokens prefetch, decided at compile time: only a lone token's rows in
// the type's groups (Slabs::kRows); a smaller group comes only at the end of a tile, several
// tokens' rows meet each weight line four times, and a run-time test on the distance made a lone
// row take 40% longer (scratch harness, from L1).
template <int R, int T, class Slabs>
constexpr bool kAhead = T == 1 && R == Slabs::kRows;

// What slab_dot needs of a type whose rows are slabs (pack_scales_first_row): its words per slab
// and where they are, the code registers each word gives and the activation register each of
// those meets, and the slab's 16 scales.
//
// Rows of nb fp16 scales, then the codes in slabs (pack_scales_first_row): where a slab's codes
// and scales are, and the scales as floats.
struct ScalesFirst {
  int64_t nb;  // blocks per row
  static constexpr int64_t kBlockBytes = 32;  // code bytes a block; its scale lies before the codes
  const uint8_t* codes(const uint8_t* row, int64_t b0) const { return row + 2 * nb + b0 * kBlockBytes; }
  const uint8_t* scales(const uint8_t* row, int64_t b0) const { return row + 2 * b0; }
  template <bool Full>
  __m512 scale(const uint8_t* s, __mmask16 lanes) const {
    const __m256i h = Full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)) : _mm256_maskz_loadu_epi16(lanes, s);
    return _mm512_cvtph_ps(h);
  }
};

// Q8_0: each word one register of codes plus 128.
struct Q8Slabs : ScalesFirst {
  static constexpr int kWords = kWordsQ8;
  static constexpr int64_t kSlabAct = kSlabActQ8;
  static constexpr int kMaxRegs = 1;
  static constexpr int kRows = 1;
  static constexpr int regs(int) { return 1; }
  static constexpr int act_reg(int k, int) { return k; }
  void decode(int, __m512i b, __m512i* c) const { c[0] = b; }
};

// PQ2_0: each word's bytes hold four two-bit codes, element 4m + n at bits 2n of byte m: plane n
// of the word is one register of codes 0..3, a shift and a mask.
struct Pq2Slabs : ScalesFirst {
  static constexpr int kWords = kWordsPq2;
  static constexpr int64_t kSlabAct = kSlabActPq2;
  static constexpr int kMaxRegs = 4;
  static constexpr int kRows = kRowsSlab;
  static constexpr int regs(int) { return 4; }
  static constexpr int act_reg(int k, int n) { return kWords * n + k; }
  void decode(int, __m512i b, __m512i* c) const {
    const __m512i m3 = _mm512_set1_epi8(3);
    c[0] = _mm512_and_si512(b, m3);
    for (int n = 1; n < 4; ++n) c[n] = _mm512_and_si512(_mm512_srli_epi16(b, 2 * n), m3);
  }
};

// One slab of m blocks (m = 16 when Full; from block b0 on) of R rows (from `row` on, rb bytes
// apart) against T tokens (slab-ordered activations act + t * stride; that slab's per-block scales
// d[t] and corrections corr[t], as act_quant.h): adds to acc[r][t] the 16 lanes of their dot
// products times their scales and to cacc[r][t] their corrections. Word by word: each weight
// register is decoded once for the T tokens and each activation register is loaded once for the R
// rows. The code registers sum in C int32 chains per row and token (the sums are integers, so
// neither C nor R changes a bit of the result), which turn float once with the 16 scales dw_i *
// d_i. Where kAhead, each weight line asks for the line `ahead` bytes further on into L1 and the one
// kL2AheadTimes * ahead further on into L2.
// A masked load only for a last, partial slab: on Zen 5 a stream of masked loads from memory ran
// at a third of the speed of plain ones.
template <int R, int T, int C, bool Full, class Slabs>
void slab_dot(const Slabs& slabs, const uint8_t* row, int64_t rb, int64_t b0, int m, const int8_t* act, int64_t stride,
              const float* const* d, const float* const* corr, int64_t ahead, __m512 (&acc)[R][T], __m512 (&cacc)[R][T]) {
  constexpr int kWords = Slabs::kWords, kLast = kWords - 1;
  const __mmask16 lanes = __mmask16((1u << m) - 1);
  __m512i s[R][T][C];
#pragma GCC unroll 8
  for (int k = 0; k < kWords; ++k) {
    // Activation register (t, n): loaded once here for several rows; for one row, at its use (a
    // load folded into vpdpbusd: several tokens' 20 registers would not fit beside the chains).
    auto load_act = [&](int t, int n) { return _mm512_load_si512(act + t * stride + 64 * Slabs::act_reg(k, n)); };
    __m512i a[T][Slabs::kMaxRegs];
    if constexpr (R > 1)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t)
        for (int n = 0; n < Slabs::kMaxRegs; ++n)
          if (n < Slabs::regs(k)) a[t][n] = load_act(t, n);
    auto act_at = [&](int t, int n) {
      if constexpr (R > 1) return a[t][n];
      else return load_act(t, n);
    };
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* wr = slabs.codes(row + r * rb, b0);
      const __m512i b = Full ? _mm512_loadu_si512(wr + 64 * k) : _mm512_maskz_loadu_epi32(lanes, wr + 4 * m * k);
      if constexpr (Full && kAhead<R, T, Slabs>) {
        prefetch_in_place(wr + ahead + 64 * k);
        prefetch_to_l2(wr + kL2AheadTimes * ahead + 64 * k);
        if (const uint8_t* sr = slabs.scales(row + r * rb, b0); sr && k == 0) prefetch_in_place(sr + ahead);
      }
      __m512i c[Slabs::kMaxRegs];
      slabs.decode(k, b, c);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        __m512i& chain = s[r][t][k % C];
        chain = _mm512_dpbusd_epi32(k < C ? _mm512_setzero_si512() : chain, c[0], act_at(t, 0));
        if constexpr (Slabs::kMaxRegs > 1)
#pragma GCC unroll 4
          for (int n = 1; n < Slabs::kMaxRegs; ++n)
            if (n < Slabs::regs(k)) chain = _mm512_dpbusd_epi32(chain, c[n], act_at(t, n));
      }
      if (k < kLast) continue;
      // the row's last word: its chains turn float with the scales
      const __m512 dw = slabs.template scale<Full>(slabs.scales(row + r * rb, b0), lanes);
      for (int t = 0; t < T; ++t) {
        __m512i sum = s[r][t][0];
        for (int j = 1; j < C; ++j) sum = _mm512_add_epi32(sum, s[r][t][j]);
        const __m512 da = Full ? _mm512_loadu_ps(d[t] + b0) : _mm512_maskz_loadu_ps(lanes, d[t] + b0);
        const __m512 cr = Full ? _mm512_loadu_ps(corr[t] + b0) : _mm512_maskz_loadu_ps(lanes, corr[t] + b0);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, da), acc[r][t]);
        cacc[r][t] = _mm512_fmadd_ps(dw, cr, cacc[r][t]);
      }
    }
  }
}

// R rows (slabs, nb blocks, rb bytes apart) against T tokens, slab by slab (slab_dot): v[r][t]
// gets 16 lanes whose sum is the dot product. A lone token's rows go Slabs::kRows at a time and
// ask for their weights ahead: PQ2_0's four at a time with one chain each, so that each
// activation register serves four rows (docs/benchmarks.md, "PTQ1_0 rows four at a time", from
// when PTQ1_0 had slabs too); Q8_0's one at a time: its light loop streamed clearly slower four
// rows at a time (docs/benchmarks.md, "Q8_0 in slabs"). A row alone takes one chain per word
// (vpdpbusd's latency would make one chain of a slab's words the limit); several tokens take two
// per token (their chains already overlap, and one per word would not fit in the registers).
template <int R, int T, class Slabs>
void dot_slabs(const Slabs& slabs, const uint8_t* row, int64_t rb, int64_t nb, const int8_t* act, int64_t stride,
               const float* const* d, const float* const* corr, __m512 (&v)[R][T]) {
  constexpr int C = T > 1 ? 2 : R > 1 ? 1 : Slabs::kWords;
  const int64_t group = R * rb, ahead = kAhead<R, T, Slabs> ? group * ((kPrefetchBytes + group - 1) / group) : 0;
  __m512 acc[R][T], cacc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = cacc[r][t] = _mm512_setzero_ps();
  int64_t b0 = 0;
  for (; b0 + kSlab <= nb; b0 += kSlab, act += Slabs::kSlabAct)
    slab_dot<R, T, C, true>(slabs, row, rb, b0, kSlab, act, stride, d, corr, ahead, acc, cacc);
  if (b0 < nb) slab_dot<R, T, C, false>(slabs, row, rb, b0, int(nb - b0), act, stride, d, corr, 0, acc, cacc);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) v[r][t] = _mm512_sub_ps(acc[r][t], cacc[r][t]);
}

// nr rows (rb bytes apart) against T tokens, R rows at a time (nr a multiple of R): v[row][t] as
// dot_slabs.
template <int R, int T, class Slabs>
void dot_rows(const Slabs& slabs, const uint8_t* w, int64_t rb, int64_t nb, int nr, const int8_t* act, int64_t stride,
              const float* const* d, const float* const* corr, __m512 (*v)[kTokens]) {
  for (int k = 0; k < nr; k += R) {
    __m512 vk[R][T];
    dot_slabs<R, T>(slabs, w + k * rb, rb, nb, act, stride, d, corr, vk);
    for (int i = 0; i < R; ++i)
      for (int t = 0; t < T; ++t) v[k + i][t] = vk[i][t];
  }
}

// Rows of the parts laid end to end: fn(part, its first row, row count) for the ones among
// [r, r + nr), so that one pass of the threads covers every part (for_rows over their sum).
template <class Fn>
void in_parts(const Part* parts, int count, int64_t r, int nr, const Fn& fn) {
  for (int p = 0; p < count && nr > 0; ++p) {
    if (r >= parts[p].rows) {
      r -= parts[p].rows;
      continue;
    }
    const int k = int(min64(nr, parts[p].rows - r));
    fn(parts[p], r, k);
    nr -= k;
    r = 0;
  }
}

int64_t total_rows(const Part* parts, int count) {
  int64_t rows = 0;
  for (int p = 0; p < count; ++p) rows += parts[p].rows;
  return rows;
}

// The rows of the parts (slabs as `proto` reads them, rows of nb blocks, rb bytes) against the
// tokens of `a`, whose activations `act` holds in slab order (stride bytes per token). A lone
// token's rows go Slabs::kRows at a time.
template <class Slabs>
void run_slabs(const Part* parts, int count, int64_t cols, int64_t nb, int64_t rb, const avx2::ActView& a,
               const int8_t* scratch, int64_t stride, const Slabs& proto) {
  constexpr bool kFour = Slabs::kRows == kRowsSlab;
  for_rows<kRowsSlab>(total_rows(parts, count), a.n_tokens, rb, cols, [&](int64_t r0, int n0, int64_t t0, int nt) {
    const Slabs slabs = proto;  // in this thread's registers
    const int8_t* act = scratch + t0 * stride;
    const float* d[kTokens];
    const float* corr[kTokens];
    for (int t = 0; t < nt; ++t) {
      d[t] = a.d + (t0 + t) * nb;
      corr[t] = a.corr + (t0 + t) * nb;
    }
    in_parts(parts, count, r0, n0, [&](const Part& part, int64_t r, int nr) {
      __m512 v[kRowsSlab][kTokens];
      const uint8_t* w = part.w + r * rb;
      if (kFour && nt == 1 && nr == kRowsSlab) dot_rows<kRowsSlab, 1>(slabs, w, rb, nb, nr, act, stride, d, corr, v);
      else
        switch (nt) {
          case 1: dot_rows<1, 1>(slabs, w, rb, nb, nr, act, stride, d, corr, v); break;
          case 2: dot_rows<1, 2>(slabs, w, rb, nb, nr, act, stride, d, corr, v); break;
          case 3: dot_rows<1, 3>(slabs, w, rb, nb, nr, act, stride, d, corr, v); break;
          default: dot_rows<1, 4>(slabs, w, rb, nb, nr, act, stride, d, corr, v); break;
        }
      float* y = part.y;
      if (kFour && nr == kRowsSlab && nt == 1) {
        alignas(16) float o[kRowsSlab];
        _mm_store_ps(o, reduce4(v[0][0], v[1][0], v[2][0], v[3][0]));
        for (int k = 0; k < nr; ++k) y[t0 * part.rows + r + k] = o[k];
      } else {
        for (int k = 0; k < nr; ++k)
          for (int t = 0; t < nt; ++t) y[(t0 + t) * part.rows + r + k] = reduce1(v[k][t]);
      }
    });
  });
}

void run_q8_0(const Part* parts, int count, int64_t cols, const avx2::ActView& a, int8_t* scratch) {
  const int64_t nb = cols / QK8_0;
  act_slabs<kWordsQ8>(nb, a.n_tokens, scratch, [&](int64_t b) { return a.q + b * QK8_0; });
  run_slabs(parts, count, cols, nb, nb * int64_t(sizeof(block_q8_0)), a, scratch, slab_count(nb) * kSlabActQ8,
            Q8Slabs{{nb}});
}

void run_pq2(const Part* parts, int count, int64_t cols, const avx2::ActView& a, int8_t* scratch) {
  const int64_t nb = cols / QK_PQ2_0;
  act_slabs<4 * kWordsPq2>(nb, a.n_tokens, scratch, [&](int64_t b) { return a.q + b * QK_PQ2_0; });
  run_slabs(parts, count, cols, nb, nb * int64_t(sizeof(block_pq2_0)), a, scratch, slab_count(nb) * kSlabActPq2,
            Pq2Slabs{{nb}});
}

// ---- PTQ1_0 by table lookups: tables, kernel, copy ----

// Digit n of every byte value (spec §1.5), as to_float decodes it: a table made at compile time,
// so that this file calls no inline formats code at run time (kernels_avx512.h).
struct Digits {
  uint8_t d[256][5];
};
constexpr Digits make_digits() {
  Digits t{};
  for (int b = 0; b < 256; ++b)
    for (int n = 0; n < 5; ++n) t.d[b][n] = uint8_t(trit_digits4(uint32_t(b), n));
  return t;
}
constexpr Digits kDigits = make_digits();

// The tables of token rows of quantized activations (in element order: act_layout_avx512): per
// token and block kCodes of them, table k from elements 3k..3k+2 (zero past the block). Each
// block's values are widened to int16 once, so that each table broadcasts its three from memory.
void build_tables(const int8_t* q, int64_t cols, int64_t n_tokens, int16_t* tabs) {
  const __m512i p0 = _mm512_load_si512(kPatterns.p[0]), p1 = _mm512_load_si512(kPatterns.p[1]),
                p2 = _mm512_load_si512(kPatterns.p[2]);
  alignas(64) int16_t x[QK_PTQ1_0 + 32] = {};  // the block's values, zeros past it
  for (int64_t b = 0; b < n_tokens * (cols / QK_PTQ1_0); ++b) {
    for (int i = 0; i < QK_PTQ1_0 / 32; ++i)
      _mm512_store_si512(x + 32 * i, _mm512_cvtepi8_epi16(_mm256_loadu_si256(
                                         reinterpret_cast<const __m256i*>(q + b * QK_PTQ1_0 + 32 * i))));
    int16_t* t = tabs + b * kCodes * 32;
    for (int k = 0; k < kCodes; ++k) {
      const __m512i v = _mm512_add_epi16(_mm512_mullo_epi16(p0, _mm512_set1_epi16(x[3 * k])),
                                         _mm512_mullo_epi16(p1, _mm512_set1_epi16(x[3 * k + 1])));
      _mm512_store_si512(t + 32 * k, _mm512_add_epi16(v, _mm512_mullo_epi16(p2, _mm512_set1_epi16(x[3 * k + 2]))));
    }
  }
}

// One group of 128 rows of the copy (w, nb blocks) against one token's tables and block scales
// da: out[i] for row i of the group. Each weight line asks for the one kL2PrefetchBytes further on,
// into L2.
void lookup_group(const uint8_t* w, int64_t nb, const int16_t* tabs, const float* da, float* out) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = w + b * kGroupBlockBytes;
    const int16_t* tb = tabs + b * kCodes * 32;
    __m512i s[4];
    for (__m512i& v : s) v = _mm512_setzero_si512();
    // Not unrolled: unrolled, GCC put all the block's lookups before their adds and spilled them.
#pragma GCC unroll 1
    for (int j = 0; j < kCodeWords; ++j) {
      const __m512i t0 = _mm512_load_si512(tb + 96 * j), t1 = _mm512_load_si512(tb + 96 * j + 32),
                    t2 = _mm512_load_si512(tb + 96 * j + 64);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const uint8_t* line = wb + 256 * j + 64 * i;
        prefetch_to_l2(line + kL2PrefetchBytes);
        const __m512i c = _mm512_load_si512(line);
        s[i] = _mm512_add_epi16(s[i], _mm512_permutexvar_epi16(c, t0));
        s[i] = _mm512_add_epi16(s[i], _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 5), t1));
        s[i] = _mm512_add_epi16(s[i], _mm512_permutexvar_epi16(_mm512_srli_epi16(c, 10), t2));
      }
    }
    // The last code: bit n from bit 15 of word n (vpshldw: (a << 1) | (b >> 15) per lane).
    const __m512i t_last = _mm512_load_si512(tb + 32 * (kCodes - 1));
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      __m512i c = _mm512_srli_epi16(_mm512_load_si512(wb + 256 * (kLastCodeBits - 1) + 64 * i), 15);
      for (int n = kLastCodeBits - 2; n >= 0; --n)
        c = _mm512_shldi_epi16(c, _mm512_load_si512(wb + 256 * n + 64 * i), 1);
      s[i] = _mm512_add_epi16(s[i], _mm512_permutexvar_epi16(c, t_last));
    }
    const uint8_t* sc = wb + 256 * kCodeWords;
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) prefetch_to_l2(sc + 64 * i + kL2PrefetchBytes);
    const __m512 d = _mm512_set1_ps(da[b]);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512i lo = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(s[i]));
      const __m512i hi = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(s[i], 1));
      const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + 64 * i)));
      const __m512 d1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + 64 * i + 32)));
      acc[2 * i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(d0, d), acc[2 * i]);
      acc[2 * i + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(d1, d), acc[2 * i + 1]);
    }
  }
  for (int k = 0; k < 8; ++k) _mm512_store_ps(out + 16 * k, acc[k]);
}

// A thread's tables (no std:: containers in this file: kernels_avx512.h), kept for its next calls.
struct Tables {
  int16_t* v = nullptr;
  int64_t capacity = 0;  // tables
  uint64_t call = 0;     // what they hold: the call's number and first token, and the token count
  int64_t t0 = -1, nt = 0;
  ~Tables() { std::free(v); }
  int16_t* reserve(int64_t tables) {
    if (tables > capacity) {
      std::free(v);
      v = static_cast<int16_t*>(std::aligned_alloc(64, size_t(tables * kTableBytes)));
      if (!v) throw std::bad_alloc();
      capacity = tables;
    }
    return v;
  }
};

// The rows of the parts (copies of nb blocks a row) against the tokens of `a`, the groups of 128
// rows of all parts in one pass of the threads. Each thread builds the tables of the tokens it
// works on itself (again when its tokens change): tables built by one thread and read by another
// crossed between the cores at every call and left two threads no faster than one.
void run_ptq1(const Part* parts, int count, int64_t cols, const avx2::ActView& a) {
  static uint64_t calls = 0;
  const uint64_t call = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  const int64_t nb = cols / QK_PTQ1_0, rb = nb * (kGroupBlockBytes / kGroupRows);
  int64_t total = 0;
  for (int p = 0; p < count; ++p) total += group_rows(parts[p].rows);
  for_rows<kGroupRows>(total, a.n_tokens, rb, cols, [&](int64_t r, int, int64_t t0, int nt) {
    thread_local Tables tabs;
    if (tabs.call != call || tabs.t0 != t0 || tabs.nt != nt) {
      build_tables(a.q + t0 * cols, cols, nt, tabs.reserve(nt * nb * kCodes));
      tabs.call = call, tabs.t0 = t0, tabs.nt = nt;
    }
    const Part* part = parts;  // every part's rows are whole groups: r starts one in some part
    for (; r >= group_rows(part->rows); ++part) r -= group_rows(part->rows);
    const int64_t valid = min64(kGroupRows, part->rows - r);
    alignas(64) float out[kGroupRows];
    for (int t = 0; t < nt; ++t) {
      lookup_group(part->w + r * rb, nb, tabs.v + t * nb * kCodes * 32, a.d + (t0 + t) * nb, out);
      std::memcpy(part->y + (t0 + t) * part->rows + r, out, size_t(valid) * sizeof(float));
    }
  }, kLookupTileBytes);
}

// The copy (layout above) of rows of nb PTQ1_0 blocks: group g's block b from rows 128g.. as
// stored, rows past the last as zero weights.
void pack_ptq1(const uint8_t* w, int64_t rows, int64_t nb, uint8_t* out) {
  const int64_t groups = group_rows(rows) / kGroupRows;
  parallel_for(groups * nb, groups * nb * QK_PTQ1_0 * kGroupRows >= kParallelWork, [&](int64_t gb) {
    const int64_t g = gb / nb, b = gb % nb;
    uint8_t* dst = out + (g * nb + b) * kGroupBlockBytes;
    for (int row = 0; row < kGroupRows; ++row) {
      const int64_t r = g * kGroupRows + row;
      uint8_t trit[3 * kCodes];  // 1: a zero weight
      std::memset(trit, 1, sizeof(trit));
      uint16_t d = 0;
      if (r < rows) {
        const uint8_t* blk = w + (r * nb + b) * int64_t(sizeof(block_ptq1_0));
        for (int byte = 0; byte < int(sizeof(block_ptq1_0)); ++byte)
          for (int n = 0; n < 5; ++n)
            if (const int e = kPlacement.elem[byte][n]; e >= 0) trit[e] = kDigits.d[blk[byte]][n];
        std::memcpy(&d, blk + offsetof(block_ptq1_0, d), 2);
      }
      trit[QK_PTQ1_0] = 0;  // the last code's third trit, past the block (its table's activation is 0): 0..8
      auto code = [&](int k) { return trit[3 * k] + 3 * trit[3 * k + 1] + 9 * trit[3 * k + 2]; };
      for (int j = 0; j < kCodeWords; ++j) {
        int word = code(3 * j) | code(3 * j + 1) << 5 | code(3 * j + 2) << 10;
        if (j < kLastCodeBits) word |= (code(kCodes - 1) >> j & 1) << 15;
        const uint16_t w16 = uint16_t(word);
        std::memcpy(dst + 2 * (kGroupRows * j + row), &w16, 2);  // word j, register row / 32, lane row % 32
      }
      std::memcpy(dst + 256 * kCodeWords + 2 * row, &d, 2);
    }
  });
}

// A row of Q8_0's or PQ2_0's copy (ScalesFirst): its scales, then its codes in slabs, each byte
// XORed with kFlip (Q8_0's 0x80: its codes plus 128).
template <class Block, uint8_t kFlip>
void pack_scales_first_row(const uint8_t* src, int64_t nb, uint8_t* out) {
  static_assert(sizeof(Block::qs) == ScalesFirst::kBlockBytes, "32 code bytes a block");
  const auto* blocks = reinterpret_cast<const Block*>(src);
  for (int64_t b = 0; b < nb; ++b) std::memcpy(out + 2 * b, &blocks[b].d, 2);
  weight_slabs<int(ScalesFirst::kBlockBytes) / 4>(nb, out + 2 * nb, [&](int64_t b, int k) {
    uint32_t w;
    std::memcpy(&w, blocks[b].qs + 4 * k, 4);
    return w ^ kFlip * 0x01010101u;
  });
}

// ---- Decode attention (ops.h attend's contract) ----
//
// ops.h's plain loops spent a decode step's attention on arithmetic more than on reading the
// cache: four horizontal sums per four rows, and the output rows loaded and stored again for every
// four cache rows. Here each group of four rows' scores is one reduce4, and a head's output stays
// in registers across all its rows: half the time of the loops with the cache warm
// (docs/benchmarks.md, "Decode attention on AVX-512").

// Asks for the NR lines of a cached row (NR registers of floats) at p.
template <int NR>
inline void prefetch_row(const float* p) {
#pragma GCC unroll 16
  for (int i = 0; i < NR; ++i) prefetch_in_place(reinterpret_cast<const uint8_t*>(p + 16 * i));
}

// score[h * seen + j] = scale * k_j . q_h for the g heads, four cached rows at a time (a last,
// partial group reads its last row again and stores only its own scores).
template <int NR>
void attend_scores(const float* q, int64_t g, const float* k, int64_t seen, float scale, float* score) {
  constexpr int64_t d = 16 * NR;
  for (int64_t j = 0; j < seen; j += 4) {
    const int m = seen - j < 4 ? int(seen - j) : 4;
    const float* row[4];
    for (int r = 0; r < 4; ++r) row[r] = k + (j + (r < m ? r : m - 1)) * d;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) prefetch_row<NR>(k + (j + kAttendAhead + r) * d);
    for (int64_t h = 0; h < g; ++h) {
      __m512 a[4];
      for (__m512& x : a) x = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) {
        const __m512 qv = _mm512_loadu_ps(q + h * d + 16 * i);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(row[r] + 16 * i), qv, a[r]);
      }
      const __m128 s = _mm_mul_ps(reduce4(a[0], a[1], a[2], a[3]), _mm_set1_ps(scale));
      _mm_mask_storeu_ps(score + h * seen + j, __mmask8((1u << m) - 1), s);
    }
  }
}

// out_h = sum_j p[h * seen + j] v_j for up to G heads from h0 (gh of them), their sums in
// registers: each cached row is loaded once for the gh heads.
template <int NR, int G>
void attend_values(const float* p, int64_t seen, const float* v, int gh, float* out) {
  constexpr int64_t d = 16 * NR;
  __m512 acc[G][NR];
  for (auto& head : acc)
    for (__m512& x : head) x = _mm512_setzero_ps();
  for (int64_t j = 0; j < seen; ++j) {
    const float* vj = v + j * d;
    prefetch_row<NR>(vj + kAttendAhead * d);
    __m512 w[G];
#pragma GCC unroll 4
    for (int h = 0; h < G; ++h) w[h] = _mm512_set1_ps(h < gh ? p[h * seen + j] : 0.0f);
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) {
      const __m512 x = _mm512_loadu_ps(vj + 16 * i);
#pragma GCC unroll 4
      for (int h = 0; h < G; ++h) acc[h][i] = _mm512_fmadd_ps(w[h], x, acc[h][i]);
    }
  }
  for (int h = 0; h < gh; ++h)
    for (int i = 0; i < NR; ++i) _mm512_storeu_ps(out + h * d + 16 * i, acc[h][i]);
}

template <int NR>
void attend_regs(const float* q, int64_t g, const float* k, const float* v, int64_t seen, float scale, float* score,
                 float* out) {
  constexpr int64_t d = 16 * NR;
  constexpr int G = NR <= 4 ? 4 : NR <= 8 ? 2 : 1;  // heads whose sums fit in 16 registers
  // The first rows of K and V at once: the loops ask only for rows kAttendAhead on, and in a decode
  // step both come from memory.
  for (int64_t j = 0; j < seen && j < kAttendAhead; ++j) {
    prefetch_row<NR>(k + j * d);
    prefetch_row<NR>(v + j * d);
  }
  attend_scores<NR>(q, g, k, seen, scale, score);
  for (int64_t h = 0; h < g; ++h) softmax(score + h * seen, seen);
  for (int64_t h0 = 0; h0 < g; h0 += G)
    attend_values<NR, G>(score + h0 * seen, seen, v, int(g - h0 < G ? g - h0 : G), out + h0 * d);
}

}  // namespace

int64_t pack_bytes(TypeId type, int64_t rows, int64_t cols) {
  switch (type) {
    case TypeId::PTQ1_0:  // kGroupBlockBytes per block and group of rows
      return cols % QK_PTQ1_0 == 0 ? group_rows(rows) / kGroupRows * (cols / QK_PTQ1_0) * kGroupBlockBytes : 0;
    case TypeId::Q8_0: return cols % QK8_0 == 0 ? rows * (cols / QK8_0) * int64_t(sizeof(block_q8_0)) : 0;
    case TypeId::PQ2_0: return cols % QK_PQ2_0 == 0 ? rows * (cols / QK_PQ2_0) * int64_t(sizeof(block_pq2_0)) : 0;
    default: return 0;
  }
}

void pack(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out) {
  if (type == TypeId::PTQ1_0) return pack_ptq1(w, rows, cols / QK_PTQ1_0, out);
  const bool q8 = type == TypeId::Q8_0;
  const int64_t nb = cols / (q8 ? QK8_0 : QK_PQ2_0);
  const int64_t rb = nb * int64_t(q8 ? sizeof(block_q8_0) : sizeof(block_pq2_0));
  parallel_for(rows, rows * cols >= kParallelWork, [&](int64_t r) {
    if (q8) pack_scales_first_row<block_q8_0, 0x80>(w + r * rb, nb, out + r * rb);
    else pack_scales_first_row<block_pq2_0, 0>(w + r * rb, nb, out + r * rb);
  });
}

int64_t scratch_bytes(TypeId type, int64_t cols, int64_t n_tokens) {
  switch (type) {
    case TypeId::PTQ1_0: return 0;  // each thread builds its own tables (run_ptq1)
    case TypeId::Q8_0: return n_tokens * slab_count(cols / QK8_0) * kSlabActQ8;
    default: return n_tokens * slab_count(cols / QK_PQ2_0) * kSlabActPq2;  // PQ2_0
  }
}

void matmul_q8(TypeId type, const Part* parts, int count, int64_t cols, const avx2::ActView& a, int8_t* scratch) {
  if (type == TypeId::PTQ1_0) run_ptq1(parts, count, cols, a);
  if (type == TypeId::Q8_0) run_q8_0(parts, count, cols, a, scratch);
  if (type == TypeId::PQ2_0) run_pq2(parts, count, cols, a, scratch);
}

namespace {
using AttendFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, float, float*, float*);
// attend's kernel for a head of head_dim floats, or null: the usual head sizes, whole registers.
AttendFn attend_for(int64_t head_dim) {
  if (head_dim % 16 != 0) return nullptr;
  switch (head_dim / 16) {
    case 1: return attend_regs<1>;
    case 2: return attend_regs<2>;
    case 3: return attend_regs<3>;
    case 4: return attend_regs<4>;
    case 5: return attend_regs<5>;
    case 6: return attend_regs<6>;
    case 7: return attend_regs<7>;
    case 8: return attend_regs<8>;
    case 12: return attend_regs<12>;
    case 16: return attend_regs<16>;
    default: return nullptr;
  }
}
}  // namespace

bool attend_takes(int64_t head_dim) { return attend_for(head_dim) != nullptr; }

void attend(const float* q, int64_t g, const float* k, const float* v, int64_t seen, int64_t head_dim, float scale,
            float* score, float* out) {
  attend_for(head_dim)(q, g, k, v, seen, scale, score, out);
}

uint64_t read_sum(const uint64_t* p, int64_t n, int64_t ahead) {
  __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (ahead > 0) {  // prefetches do not fault past the end
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + ahead, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + ahead + 64, _MM_HINT_T0);
    }
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
  }
  // The lanes add as unsigned words: _mm512_reduce_add_epi64 adds signed ones, whose wrap-around
  // is undefined (UBSan stopped on it).
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(a0, a1));
  uint64_t total = 0;
  for (const uint64_t lane : lanes) total += lane;
  for (; i < n; ++i) total += p[i];
  return total;
}

}  // namespace bonsai::cpu::avx512
