// AVX-512 kernels (F, BW, VL, VNNI, VBMI) with GFNI. This file alone is compiled with those
// instructions; matmul.cpp calls it only when avx512_usable(). Like kernels_avx2.cpp it takes the
// block layouts from blocks.h and calls no library code.
//
// PTQ1_0, any number of tokens. The AVX2 kernel turns each base-3 byte into digits with two
// 16-bit multiplies per 16 digits; on a machine whose memory streams 30+ GB/s per core that
// decode, not memory, sets the speed (21% of the bandwidth roofline on a 2-core Zen 5). Here the
// digits of 64 bytes at once come from table lookups (byte permutes of tables held in registers),
// and VNNI's vpdpbusd multiplies the 0..2 codes with the int8 activations and sums them in int32.
// The weights are read from a copy made once per weight (pack): each 16 blocks of a row are
// one "slab" of seven registers with one block per 32-bit lane, so every digit register of a slab
// adds into the same lanes and needs one int->float step per 16 blocks, and the digit bytes are
// recoded so that a byte's five digits take two permutes and no mask register (Recoding). The
// activations are quantized in element order (act_quant.h, one scale per block) and laid out in
// the slab's register order once per call. A lone token's rows go four at a time, so that each
// activation register serves four rows, and ask for their weights ahead of the hardware prefetcher.
//
// Q8_0 and PQ2_0, any number of tokens. Their copies take PTQ1_0's slabs too, each row's scales
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

#include <cstring>

#include "formats/blocks.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/row_tiles.h"

namespace bonsai::cpu::avx512 {
namespace {

using tiles::for_rows;
using tiles::kTokens;
using tiles::min64;

// ---- PTQ1_0 slabs ----
//
// A slab is 16 blocks of a row, one per 32-bit lane: register k of the slab holds 32-bit word k of
// each block's 28 bytes, for k = 0..6. Words 0..3 are qs[0..16) (spec §1.5's 16-byte stage: byte m
// carries elements m + 16n, digit n = 0..4), words 4..5 qs[16..24) (the 8-byte stage: byte 16 + m
// carries 80 + m + 8n), word 6 is qh[0..1] (four digits: byte h carries 120 + h + 2n) and the
// scale d. So every lane of every register belongs to one block: all 34 digit registers of a slab
// sum into the same int32 lanes, which turn float once per slab with 16 scales dw * da, and no
// byte of the 448 is padding (the d bytes decode to digits that meet zero activations).
constexpr int kSlab = 16;                                 // blocks per slab
constexpr int kWordsPtq1 = int(sizeof(block_ptq1_0)) / 4;  // registers per slab (7)
constexpr int kQsWords = kWordsPtq1 - 1;                  // words of five-digit bytes (the last: qh, d)
constexpr int kActRegs = 5 * kQsWords + 4;                // digit registers per slab (34)
constexpr int64_t kSlabActPtq1 = 64 * kActRegs;           // activation bytes per slab and token
static_assert(sizeof(block_ptq1_0) == 28 && QK_PTQ1_0 == 128, "the slab layout follows the block's 28 bytes");

// The digit register (word k, digit n) is activation register act_reg_ptq1(k, n).
constexpr int act_reg_ptq1(int k, int n) { return k < kQsWords ? 5 * k + n : 5 * kQsWords + n; }

// The element of a block that byte j of word k carries as digit n, or -1 (the scale's bytes, and
// qh's fifth digit): formats' placement (for_each_trit) over the block's 28 bytes.
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
constexpr int slab_elem(int k, int n, int j) { return kPlacement.elem[4 * k + j][n]; }

// Digit n of byte b (spec §1.5), for all 256 bytes (the encoder writes b < 243; the others decode
// by the same formula, as to_float does).
constexpr int digit(int b, int n) { return int(trit_digits4(uint32_t(b), n)); }

// The copy stores each five-digit byte recoded, so that its digits take two byte permutes of
// tables held in registers, a byte subtraction, a byte minimum and a shift, and no mask register.
// A byte's digits are a pattern (r, d4): r = d0 + 3 d1 + 9 d2 + 27 d3 in [0, 81), d4 in [0, 3).
// Its code c is r for d4 = 0, 84 + r for d4 = 1, and for d4 = 2 168 + (r - 37) where r >= 37
// (168..211), 212 + r below (212..248). Then the table index min(c, c - 84), in wrapping unsigned
// bytes, read on its low 7 bits as vpermt2b does, is r for d4 < 2, 84 + (r - 37) (entries 84..127)
// for d4 = 2 and r >= 37, and r again below: a 128-entry table of r's digits 0..3, two bits each,
// with those 44 entries added, finishes the decode of digits 0..3 (one gf2p8affine moves digit n to
// bits 0..1). And d4 is constant on each four codes c >> 2 (codes 81..83 and 165..167 are not
// used), so a 64-entry table takes it from c shifted right by two (vpermb reads 6 bits). (The first
// codes took a permute through a mask of each code's top bit and a compare into a mask for d4:
// tg 74.5 against 78.9 t/s, docs/benchmarks.md, "One permute and no mask per digit byte".) Bytes
// that are not recoded (the scale's, whose digits meet zero activations) read some entry and harm
// nothing.
constexpr int kCode1 = 84;            // first code of d4 = 1 (a multiple of 4, at least 81)
constexpr int kCode2 = 2 * kCode1;    // first code of d4 = 2
constexpr int kSplit = 128 - kCode1;  // table entries kCode1..127 hold r = kR2..80 for d4 = 2
constexpr int kR2 = 81 - kSplit;
constexpr int code_of(int b) {
  const int r = digit(b, 0) + 3 * digit(b, 1) + 9 * digit(b, 2) + 27 * digit(b, 3), d4 = digit(b, 4);
  if (d4 < 2) return d4 * kCode1 + r;
  return r >= kR2 ? kCode2 + (r - kR2) : kCode2 + kSplit + r;
}
// The table index of code c (any byte), as Lut::digits computes it.
constexpr int index_of_code(int c) {
  const int q = (c - kCode1) & 255;
  return (c < q ? c : q) & 127;
}

struct Recoding {
  alignas(64) uint8_t to_code[256];  // stored byte -> code
  alignas(64) uint8_t t[128];        // index -> digits 0..3 of its r, two bits each (digit n at bit 2n)
  alignas(64) uint8_t d4[64];        // c >> 2 -> digit 4
};
constexpr uint8_t packed_digits(int r) {
  uint8_t v = 0;
  for (int n = 0; n < 4; ++n, r /= 3) v |= uint8_t((r % 3) << (2 * n));
  return v;
}
constexpr Recoding make_recoding() {
  Recoding rc{};
  for (int b = 0; b < 256; ++b) rc.to_code[b] = uint8_t(code_of(b));
  for (int r = 0; r < 81; ++r) rc.t[r] = packed_digits(r);
  for (int r = kR2; r < 81; ++r) rc.t[kCode1 + r - kR2] = packed_digits(r);
  for (int g = 0; g < 64; ++g) rc.d4[g] = uint8_t(4 * g < kCode1 ? 0 : 4 * g < kCode2 ? 1 : 2);
  return rc;
}
constexpr Recoding kRecoding = make_recoding();
static_assert(kCode1 % 4 == 0 && kCode1 >= 81 && kCode2 + kSplit + kR2 <= 256, "d4 is constant on every four codes");
static_assert([] {
  for (int b = 0; b < 256; ++b) {
    const int c = kRecoding.to_code[b];
    if (kRecoding.d4[c >> 2] != digit(b, 4)) return false;
    for (int n = 0; n < 4; ++n)
      if (((kRecoding.t[index_of_code(c)] >> (2 * n)) & 3) != digit(b, n)) return false;
  }
  return true;
}(), "every stored byte's recoded digits are its own");

struct Lut {
  __m512i t[2];     // the table's entries 64q .. 64q + 63
  __m512i d4;       // digit 4 by c >> 2
  __m512i pick[3];  // gf2p8affine matrices: digit n + 1 of the table's byte -> bits 0..1
  Lut() {
    for (int q = 0; q < 2; ++q) t[q] = _mm512_load_si512(kRecoding.t + 64 * q);
    d4 = _mm512_load_si512(kRecoding.d4);
    // the matrix's byte 7 - i selects the input bits that make output bit i
    for (int n = 1; n < 4; ++n)
      pick[n - 1] = _mm512_set1_epi64(int64_t((uint64_t(1) << (2 * n)) << 56 | (uint64_t(1) << (2 * n + 1)) << 48));
  }
  // The first N (4 or 5) digits of the 64 codes c.
  template <int N>
  void digits(__m512i c, __m512i* d) const {
    const __m512i index = _mm512_min_epu8(c, _mm512_sub_epi8(c, _mm512_set1_epi8(kCode1)));  // index_of_code
    const __m512i d03 = _mm512_permutex2var_epi8(t[0], index, t[1]);
    d[0] = _mm512_and_si512(d03, _mm512_set1_epi8(3));
    for (int n = 1; n < 4; ++n) d[n] = _mm512_gf2p8affine_epi64_epi8(d03, pick[n - 1], 0);
    // c >> 2 within 16-bit lanes: the neighbour's bits land in bits 6..7, which vpermb ignores
    if constexpr (N == 5) d[4] = _mm512_permutexvar_epi8(_mm512_srli_epi16(c, 2), d4);
  }
};

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

// Reorders token rows of quantized activations (elem: position -> element within a block; the
// identity for act_layout_avx512) into slab order (act_slabs): the 34 digit registers, zero where a
// byte carries no element. Per block, three masked byte permutes of its 128 bytes give its 34
// words in register order.
void reorder_ptq1(const int32_t* elem, const int8_t* q, int64_t cols, int64_t n_tokens, int8_t* dst) {
  uint8_t pos[QK_PTQ1_0];  // element -> position
  for (int p = 0; p < QK_PTQ1_0; ++p) pos[elem[p]] = uint8_t(p);
  alignas(64) uint8_t idx[3 * 64] = {};
  uint64_t keep[3] = {};
  for (int k = 0; k < kWordsPtq1; ++k)
    for (int n = 0; n < (k < kQsWords ? 5 : 4); ++n)
      for (int j = 0; j < 4; ++j) {
        const int e = slab_elem(k, n, j), o = 4 * act_reg_ptq1(k, n) + j;
        if (e < 0) continue;
        idx[o] = pos[e];
        keep[o / 64] |= uint64_t(1) << (o % 64);
      }
  const __m512i i0 = _mm512_load_si512(idx), i1 = _mm512_load_si512(idx + 64), i2 = _mm512_load_si512(idx + 128);
  alignas(64) int8_t words[3 * 64];
  act_slabs<kActRegs>(cols / QK_PTQ1_0, n_tokens, dst, [&](int64_t b) {
    const int8_t* src = q + b * QK_PTQ1_0;
    const __m512i lo = _mm512_loadu_si512(src), hi = _mm512_loadu_si512(src + 64);
    _mm512_store_si512(words, _mm512_maskz_permutex2var_epi8(keep[0], lo, i0, hi));
    _mm512_store_si512(words + 64, _mm512_maskz_permutex2var_epi8(keep[1], lo, i1, hi));
    _mm512_store_si512(words + 128, _mm512_maskz_permutex2var_epi8(keep[2], lo, i2, hi));
    return words;
  });
}

// ---- Q8_0 and PQ2_0 slabs ----
//
// Their copies (pack_scales_first_row) hold each row's nb fp16 scales, then its 32 code bytes a
// block in slabs of 16 blocks as PTQ1_0's: register k of a slab holds bytes 4k..4k+3 of each
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
// A T0 prefetch of p's line that stays where the code puts it, one beside each weight load: GCC
// schedules _mm_prefetch freely and once moved a slab's 28 to its start, where they held up the
// loads (the ternary products streamed visibly slower in bench_matmul).
inline void prefetch_in_place(const uint8_t* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }
// Whether R rows against T tokens prefetch, decided at compile time: only a lone token's rows in
// the type's groups (Slabs::kRows); a smaller group comes only at the end of a tile, several
// tokens' rows meet each weight line four times, and a run-time test on the distance made a lone
// row take 40% longer (scratch harness, from L1).
template <int R, int T, class Slabs>
constexpr bool kAhead = T == 1 && R == Slabs::kRows;

// What slab_dot needs of a type whose rows are slabs (pack: pack_ptq1_row, pack_scales_first_row): its
// words per slab and where they are, the code registers each word gives and the activation
// register each of those meets, and the slab's 16 scales.
//
// PTQ1_0: the seven words of a slab are the block's 28 bytes; each word's bytes give five digit
// registers (four for the last, whose top half is the scale) through the Lut.
struct Ptq1Slabs {
  static constexpr int kWords = kWordsPtq1;
  static constexpr int64_t kSlabAct = kSlabActPtq1;
  static constexpr int64_t kBlockBytes = sizeof(block_ptq1_0);
  static constexpr int kMaxRegs = 5;
  static constexpr int kRows = kRowsSlab;
  static constexpr int regs(int k) { return k < kQsWords ? 5 : 4; }
  static constexpr int act_reg(int k, int n) { return act_reg_ptq1(k, n); }
  Lut lut;
  // Row `row`'s slab from block b0 on, and its scale bytes apart from the codes (none: in word 6).
  const uint8_t* codes(const uint8_t* row, int64_t b0) const { return row + b0 * kBlockBytes; }
  const uint8_t* scales(const uint8_t*, int64_t) const { return nullptr; }
  void decode(int k, __m512i b, __m512i* c) const {
    if (k < kQsWords) lut.digits<5>(b, c);
    else lut.digits<4>(b, c);
  }
  // The scales from the slab's last word (top half of each lane).
  template <bool Full>
  __m512 scale(const uint8_t*, __mmask16, __m512i last) const {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(last, 16)));
  }
};

// Rows of nb fp16 scales, then the codes in slabs (pack_scales_first_row): where a slab's codes
// and scales are, and the scales as floats.
struct ScalesFirst {
  int64_t nb;  // blocks per row
  static constexpr int64_t kBlockBytes = 32;  // code bytes a block; its scale lies before the codes
  const uint8_t* codes(const uint8_t* row, int64_t b0) const { return row + 2 * nb + b0 * kBlockBytes; }
  const uint8_t* scales(const uint8_t* row, int64_t b0) const { return row + 2 * b0; }
  template <bool Full>
  __m512 scale(const uint8_t* s, __mmask16 lanes, __m512i) const {
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
// d_i. Where kAhead, each weight line asks for the line `ahead` bytes further on.
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
      const __m512 dw = slabs.template scale<Full>(slabs.scales(row + r * rb, b0), lanes, b);
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
// ask for their weights ahead: PTQ1_0's four at a time with one chain each, so that each
// activation register serves four rows (docs/benchmarks.md, "PTQ1_0 rows four at a time"); Q8_0's
// one at a time: its light loop streamed clearly slower four rows at a time (docs/benchmarks.md,
// "Q8_0 in slabs"). A row alone takes one chain per word (vpdpbusd's latency would make a single
// chain of 34 the limit); several tokens take two per token (their chains already overlap, and
// seven per token would not fit in the registers).
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
    const Slabs slabs = proto;  // in this thread's registers (PTQ1_0's tables)
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

void run_ptq1(const Part* parts, int count, int64_t cols, const avx2::ActView& a, const int32_t* elem, int8_t* scratch) {
  reorder_ptq1(elem, a.q, cols, a.n_tokens, scratch);
  const int64_t nb = cols / QK_PTQ1_0;
  run_slabs(parts, count, cols, nb, nb * Ptq1Slabs::kBlockBytes, a, scratch, slab_count(nb) * kSlabActPtq1,
            Ptq1Slabs{});
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

// A row of PTQ1_0's copy: its slabs, the digit bytes recoded (Recoding), the scale's two bytes as
// they are.
void pack_ptq1_row(const uint8_t* src, int64_t nb, uint8_t* out) {
  weight_slabs<kWordsPtq1>(nb, out, [&](int64_t b, int k) {
    uint8_t v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = src[b * int64_t(sizeof(block_ptq1_0)) + 4 * k + j];
      if (slab_elem(k, 0, j) >= 0) v[j] = kRecoding.to_code[v[j]];
    }
    uint32_t w;
    std::memcpy(&w, v, 4);
    return w;
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

}  // namespace

bool packs(TypeId type, int64_t cols) {
  switch (type) {
    case TypeId::PTQ1_0: return cols % QK_PTQ1_0 == 0;
    case TypeId::Q8_0: return cols % QK8_0 == 0;
    case TypeId::PQ2_0: return cols % QK_PQ2_0 == 0;
    default: return false;
  }
}

void pack(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out) {
  const bool ptq1 = type == TypeId::PTQ1_0, q8 = type == TypeId::Q8_0;
  const int64_t nb = cols / (ptq1 ? QK_PTQ1_0 : q8 ? QK8_0 : QK_PQ2_0);
  const int64_t rb = nb * int64_t(ptq1 ? sizeof(block_ptq1_0) : q8 ? sizeof(block_q8_0) : sizeof(block_pq2_0));
  parallel_for(rows, rows * cols >= kParallelWork, [&](int64_t r) {
    if (ptq1) pack_ptq1_row(w + r * rb, nb, out + r * rb);
    else if (q8) pack_scales_first_row<block_q8_0, 0x80>(w + r * rb, nb, out + r * rb);
    else pack_scales_first_row<block_pq2_0, 0>(w + r * rb, nb, out + r * rb);
  });
}

int64_t scratch_bytes(TypeId type, int64_t cols, int64_t n_tokens) {
  if (!packs(type, cols)) return 0;
  switch (type) {
    case TypeId::PTQ1_0: return n_tokens * slab_count(cols / QK_PTQ1_0) * kSlabActPtq1;
    case TypeId::Q8_0: return n_tokens * slab_count(cols / QK8_0) * kSlabActQ8;
    default: return n_tokens * slab_count(cols / QK_PQ2_0) * kSlabActPq2;  // PQ2_0
  }
}

void matmul_q8(TypeId type, const Part* parts, int count, int64_t cols, const avx2::ActView& a, const int32_t* elem,
               int8_t* scratch) {
  if (type == TypeId::PTQ1_0) run_ptq1(parts, count, cols, a, elem, scratch);
  if (type == TypeId::Q8_0) run_q8_0(parts, count, cols, a, scratch);
  if (type == TypeId::PQ2_0) run_pq2(parts, count, cols, a, scratch);
}

}  // namespace bonsai::cpu::avx512
