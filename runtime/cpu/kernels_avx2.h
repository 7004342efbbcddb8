// The AVX2+FMA+F16C kernels (kernels_avx2.cpp, the only file compiled with those instructions).
// Call them only after the run-time CPU check in matmul.cpp. The interface is plain pointers and
// integers on purpose: that file must not instantiate inline library code (std:: templates) that
// other files could end up linked against, compiled for a CPU they may not run on.
#pragma once
#include <cstdint>

#include "formats/types.h"

namespace bonsai::cpu {
// Whether this CPU has AVX2, FMA and F16C (defined in matmul.cpp, compiled for the baseline CPU):
// the check before any call into avx2::.
bool avx2_usable();
}  // namespace bonsai::cpu

namespace bonsai::cpu::avx2 {

// A QuantAct (act_quant.h) seen as pointers.
struct ActView {
  const int8_t* q;
  const float* d;
  const float* corr;
  int64_t cols, n_tokens;
};

// act_quant.h's quantize_act (the same bytes, tests hold them equal), vectorized: fills q, d, corr
// (sized by QuantAct::reset) from n_tokens rows of cols floats, for the layout given as its
// position -> element table elem[qk] and offset.
void quantize_act(const int32_t* elem, int qk, int offset, const float* x, int64_t cols, int64_t n_tokens,
                  int8_t* q, float* d, float* corr);

// y[t*rows + r] for a weight matrix of `rows` rows of `cols` elements stored contiguously in its
// type. Each returns false, computing nothing, when it has no kernel for the type.
// Int8 kernels: activations already quantized with act_layout(type). `split`: w is split_rows'
// copy (of type Q8_0 or PQ2_0), not the weights as stored.
bool matmul_q8(TypeId type, bool split, const uint8_t* w, int64_t rows, int64_t cols, const ActView& a, float* y);
// Float kernels (F32, F16, BF16).
bool matmul_float(TypeId type, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                  int64_t n_tokens, float* y);
// n values of a float type (F32, F16, BF16) to float32, 8 at a time; false for other types.
bool float_to_f32(TypeId type, const uint8_t* src, int64_t n, float* dst);

// The AVX2 copy of Q8_0 and PTQ1_0 weights (matmul.h, pack_weights): each row's nb fp16 scales,
// then its blocks' codes, 32 bytes each, so that the kernel takes eight blocks' scales with one
// load. Q8_0 keeps its bytes; PTQ1_0 becomes PQ2_0 (each base-3 code, value code - 1, a 2-bit
// code: 34 bytes out per 28 in), whose codes cost a shift and a mask to unpack where base-3
// digits cost two multiplies each. rows * cols / 32 * 34 or rows * cols / 128 * 34 bytes out;
// false (nothing written) for other types.
bool split_rows(TypeId type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst);

// The 64-bit sum of n words read with 32-byte loads into four independent accumulators, each
// 128 bytes asking for the two lines `ahead` bytes further on when ahead > 0: a read loop of the
// bandwidth probe (bandwidth.cpp), fast enough that one core is bound by memory, not by its adds.
uint64_t read_sum(const uint64_t* p, int64_t n, int64_t ahead);

}  // namespace bonsai::cpu::avx2
