// Activations as the int8 kernels read them: quantized once per matmul call, one scale per weight
// block, in the order in which a weight type's kernel unpacks its codes. Internal to the CPU backend (and its
// tests, which rebuild the kernels' exact sums from it).
#pragma once
#include <cstdint>
#include <vector>

#include "formats/types.h"

namespace bonsai::cpu {

// How a weight type's int8 kernel sees its blocks. The kernel turns a block into unsigned codes
// (signed int8 for Q8_0) so that weight value = (code - offset) * d_block, 32 codes at a time, in
// "position" order: position p of a block multiplies element elem(p) of that block. Ordering the
// activations the same way once per call keeps each kernel's unpacking to a few shifts, masks and
// packs (see kernels_avx2.cpp, where each order is derived next to its unpacker).
struct ActLayout {
  int qk;            // elements per weight block
  int offset;        // value = code - offset; 0 for the signed codes of Q8_0
  int (*elem)(int);  // position p in [0, qk) -> element of the block
};

// nullptr for the types that have no int8 kernel (F32, F16, BF16).
const ActLayout* act_layout(TypeId type);
// The layout the AVX-512 kernels take (kernels_avx512.h): act_layout(type)'s blocks in element
// order (elem the identity) for PTQ1_0, whose kernel lays out the activations itself, so that they
// quantize with plain loads, not gathers; PQ2_0's own planes, which its kernel reads as they are;
// Q8_0's in element order with offset 128 (its copy holds each code plus 128); nullptr for the
// types that kernel does not take.
// A block's codes and scale depend on neither the order nor the offset.
const ActLayout* act_layout_avx512(TypeId type);

// n_tokens rows of cols activations. For each span b of qk positions (one weight block's worth,
// b counted over all tokens: b = t*(cols/qk) + block):
//   q[b*qk + p] = nearest (ties to even) of x[elem(p)] / d[b], in [-127, 127],
//   d[b] = amax_b / 127 (0 when the span is all zero, NaN when it holds an inf or NaN: then its q
//   are 0 and the NaN reaches every output, as float math would),
//   corr[b] = offset * (d[b] * sum_p q[b*qk + p]),
// so that dot(block) = d_block * (d[b] * sum_p code_p*q_p - corr[b]).
// One scale per block (not per 32) lets a kernel add a whole block's int16 products before a
// single int->float step; the price is a coarser activation step where a block holds an outlier
// (the bound in matmul.h follows amax over the block).
struct QuantAct {
  int64_t cols = 0, n_tokens = 0;
  int qk = 0, offset = 0;
  std::vector<int32_t> elem;  // the layout's elem(p), p < qk
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<float> corr;

  // Sizes every member for this layout and shape (keeps the capacity: no allocation once warm).
  void reset(const ActLayout& layout, int64_t cols, int64_t n_tokens);
};

// The definition, in scalar code (the AVX2 path runs kernels_avx2.cpp's copy, which the tests hold
// to the same bytes). cols must be a multiple of layout.qk.
void quantize_act(const ActLayout& layout, const float* x, int64_t cols, int64_t n_tokens, QuantAct& out);

}  // namespace bonsai::cpu
