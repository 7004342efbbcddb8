// The AVX-512 kernels (kernels_avx512.cpp, the only file compiled with AVX-512 F/BW/VL, VNNI and
// VBMI, and GFNI). Call them only after avx512_usable(). As in kernels_avx2.h, the interface is plain
// pointers and integers: no std:: template may be instantiated in that file.
#pragma once
#include <cstdint>

#include "formats/types.h"
#include "runtime/cpu/kernels_avx2.h"

namespace bonsai::cpu {
// Whether this CPU has AVX-512 F, BW, VL, VNNI and VBMI and GFNI besides AVX2/FMA/F16C (defined in
// matmul.cpp, compiled for the baseline CPU): the check before any call into avx512::.
bool avx512_usable();
}  // namespace bonsai::cpu

namespace bonsai::cpu::avx512 {

// Whether matmul_q8 takes this type and width (PTQ1_0, Q8_0, PQ2_0: any width of whole blocks),
// with its weights regrouped: the caller then hands it pack's copy, made once per weight.
bool packs(TypeId type, int64_t cols);
// Rows of cols (packs(type, cols)) regrouped by slabs of 16 blocks: PTQ1_0's digit bytes recoded,
// Q8_0's and PQ2_0's scales first (Q8_0's codes made unsigned). `out` gets as many bytes as w, row
// r at the same offset. The layout is kernels_avx512.cpp's; nothing else reads it.
void pack(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, uint8_t* out);

// Bytes of scratch matmul_q8 needs for these activations, or 0 when it has no kernel for the
// type and shape (the caller then takes the AVX2 kernel). The kernels serve any number of tokens,
// up to four per pass over the weights, read regrouped (pack).
int64_t scratch_bytes(TypeId type, int64_t cols, int64_t n_tokens);

// One weight of a product: its rows (pack's copy) and its output y[t*rows + r].
struct Part {
  const uint8_t* w;
  int64_t rows;
  float* y;
};

// The products of `count` weights of one type and width with the same activations `a`, quantized
// in act_layout_avx512(type)'s order (elem: that layout's position -> element table), in one
// pass of the threads over all their rows. The kernel first lays out what it needs from the
// activations in the scratch (scratch_bytes, 64-byte aligned), then reads the weights once for up
// to four tokens at a time. The integer block sums are exactly those of the AVX2 kernel; only
// float rounding differs.
void matmul_q8(TypeId type, const Part* parts, int count, int64_t cols, const avx2::ActView& a, const int32_t* elem,
               int8_t* scratch);

}  // namespace bonsai::cpu::avx512
