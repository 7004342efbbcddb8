// The AVX-512 kernels (kernels_avx512.cpp, the only file compiled with AVX-512 F/BW/VL, VNNI and
// VBMI2). Call them only after avx512_usable(). As in kernels_avx2.h, the interface is plain
// pointers and integers: no std:: template may be instantiated in that file.
#pragma once
#include <cstdint>

#include "formats/types.h"
#include "runtime/cpu/kernels_avx2.h"

namespace bonsai::cpu {
// Whether this CPU has AVX-512 F, BW, VL, VNNI and VBMI2 besides AVX2/FMA/F16C (defined in
// matmul.cpp, compiled for the baseline CPU): the check before any call into avx512::.
bool avx512_usable();
}  // namespace bonsai::cpu

namespace bonsai::cpu::avx512 {

// Bytes of the copy of rows x cols weights that matmul_q8 reads (pack), or 0 when it takes no
// such weights (PTQ1_0, Q8_0, PQ2_0: any width of whole blocks; TQ2_0 comes as PQ2_0 blocks, matmul.cpp's
// wide_type).
int64_t pack_bytes(TypeId type, int64_t rows, int64_t cols);
// The weights regrouped for the kernels, pack_bytes(type, rows, cols) bytes at `out`: PTQ1_0's as
// five-bit codes of three trits for table lookups, in groups of 128 rows (the last padded), 30 bytes
// a block; Q8_0's and PQ2_0's by slabs of 16 blocks, scales first (Q8_0's codes made unsigned), as
// many bytes as w, row r at w's offset of row r. The layouts are kernels_avx512.cpp's; nothing else
// reads them.
void pack(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out);

// Bytes of scratch matmul_q8 needs for these activations (PTQ1_0: none). The kernels serve any
// number of tokens, up to four per pass over the weights, read regrouped (pack): matmul_q8 takes
// exactly the weights that pack_bytes has a copy for.
int64_t scratch_bytes(TypeId type, int64_t cols, int64_t n_tokens);

// One weight of a product: its rows (pack's copy) and its output y[t*rows + r].
struct Part {
  const uint8_t* w;
  int64_t rows;
  float* y;
};

// The products of `count` weights of one type and width with the same activations `a`, quantized
// in act_layout_avx512(type)'s order, in one pass of the threads over all their rows. The kernel
// first lays out what it needs from the activations in the scratch (scratch_bytes, 64-byte
// aligned; PTQ1_0 reads none, and it may be null there), then reads the weights once for up to
// four tokens at a time. The integer block sums are exactly those of the AVX2 kernel; only float
// rounding differs.
void matmul_q8(TypeId type, const Part* parts, int count, int64_t cols, const avx2::ActView& a, int8_t* scratch);

// ops.h attend (decode attention of g query heads over one cache head) with the scores four rows
// at a time and each head's output in registers, for the head sizes attend_takes: multiples of 16
// floats (1 to 8, 12 or 16 registers). Sums in another order than ops.h's loops: the same to
// float rounding.
bool attend_takes(int64_t head_dim);
void attend(const float* q, int64_t g, const float* k, const float* v, int64_t seen, int64_t head_dim, float scale,
            float* score, float* out);

// avx2::read_sum with 64-byte loads, two accumulators: on a 2-core Intel Xeon (AVX-512) the
// 32-byte loop read memory well below what this one does, and a probe that the kernels can match
// or beat is no roofline (docs/benchmarks.md, "The probe's read loop on Intel").
uint64_t read_sum(const uint64_t* p, int64_t n, int64_t ahead);

}  // namespace bonsai::cpu::avx512
