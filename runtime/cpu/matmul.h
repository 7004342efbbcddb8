// Matrix products of stored weights with float activations, on the CPU: the kernels the runtime's
// forward pass calls. Weights stay in their stored type (any type of formats/types.h); nothing is
// converted ahead of time but the kernels' copies (pack_weights): for the AVX-512 kernels PTQ1_0's
// trits recoded for table lookups, Q8_0's and PQ2_0's blocks regrouped, TQ2_0's as PQ2_0's; for
// the AVX2 one, Q8_0's and PTQ1_0's rows split into scales and codes, PTQ1_0's rewritten as PQ2_0's
// 2-bit codes.
#pragma once
#include <cstdint>
#include <span>

#include "formats/tensor_set.h"
#include "runtime/cpu/huge_pages.h"

namespace bonsai::cpu {

// y[t*rows + r] = sum_k W[r, k] * x[t*cols + k] for t < n_tokens, where W is a 2-D tensor with
// ne[0] = cols (the input width) and ne[1] = rows (the outputs). x and y must not overlap.
// Threads: the runtime's team over output rows, omp_get_max_threads() of them (the caller sets
// it: team::run in parallel.h).
// Throws Error naming the tensor when it is not a well-formed 2-D tensor.
//
// Takes the fastest path this CPU has (matmul_path()). On the AVX2 path, quantized weights are
// multiplied by activations quantized to int8 with one float scale per weight block (d =
// amax/127 over the block's qk values, round to nearest: act_quant.h), so each output differs
// from matmul_ref by at most
//   sum over weight blocks b of amax_b/254 * sum_{k in b} |W[r,k]|   (plus float rounding);
// qk is 32 for Q8_0/Q4_0, 64 for Q2_0, 128 for PTQ1_0/PQ2_0/Q1_0 and 256 for TQ1_0/TQ2_0 (128 for
// TQ2_0 on the AVX-512 path, which multiplies it as PQ2_0: act_layout_taken says which).
// float weights (F32/F16/BF16) use float FMA dot products (from 16 tokens on, OpenBLAS SGEMM on
// the weights decoded to float), within ~1e-5 relative of matmul_ref.
//
// `packed`: pack_weights(w) (the CPU backend keeps one per weight). Where it is the copy that
// pack_weights makes for w, the kernel reads it instead of w.data; a kernel that reads a regrouped
// layout (PTQ1_0 on the AVX-512 path) without one (or with one of the wrong size) leaves the
// product to the AVX2 kernel.
void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y, std::span<const uint8_t> packed = {});

// matmul of `count` weights that read the same input x (the same cols; q/k/v, gate/up): y[i] for
// w[i], with packed[i] its pack_weights copy (packed may be null), exactly as count matmul calls
// give. Where the AVX-512 kernels take them all (one type they serve, every copy they read
// present), the activations are quantized once and one pass of the threads covers every row,
// instead of a quantization and a fork and join of the threads per weight.
void matmul_shared(const Tensor* const* w, float* const* y, int count, const float* x, int64_t n_tokens,
                   const std::span<const uint8_t>* packed);

// A copy of w in this process's memory for the kernel of the path matmul_path_taken() gives.
// AVX-512: Q8_0's and PQ2_0's regrouped in slabs for their kernel, as many bytes as w
// (docs/benchmarks.md, "Q8_0 in slabs"), TQ2_0's as PQ2_0 blocks of the same values so regrouped
// (68 bytes for every 66); PTQ1_0's as five-bit codes of three trits for its table
// lookups, 30 bytes per stored 28, rows padded to groups of 128 (docs/benchmarks.md, "PTQ1_0 by
// table lookups"). A copy is also faster to read than the file's mapping: the 1.8 GB of
// Qwen3-1.7B in Q8_0 generated about a third faster from anonymous memory on the 2-core machine
// (docs/benchmarks.md, "Q8_0 weights read from a copy"). AVX2: Q8_0's and PTQ1_0's rows split,
// each row's block scales first, then its blocks' codes (avx2::split_rows; 64 bytes more than the
// rows), so that the kernel takes eight scales with one load (docs/benchmarks.md, "Split rows on
// AVX2"); PTQ1_0's as PQ2_0 blocks of the same values (34 bytes per 28), which the 2-bit kernel
// multiplies in about half the time the base-3 digits take to unpack (docs/benchmarks.md, "PTQ1_0
// read as 2-bit codes on AVX2"): a token reads 21% more bytes of those weights, and is still
// faster where, as on the 2-core Zen 3 machine, the base-3 kernel is bound by its arithmetic, not
// by memory. Empty for other types and paths. The bytes are `pages`' (huge pages: huge_pages.h)
// and live as long as it.
std::span<const uint8_t> pack_weights(const Tensor& w, HugePageArena& pages);

struct ActLayout;
// The int8 activation layout (act_quant.h) that matmul quantizes x with for w given `packed`, on
// the path taken now; null where the product is in floats (float weights, or the scalar path).
// Tests rebuild the kernels' exact sums with it.
const ActLayout* act_layout_taken(const Tensor& w, std::span<const uint8_t> packed);

// The bytes of w a product reads with `packed` its pack_weights copy: the copy's (less the 64
// bytes that only size the AVX2 one) where there is one, w's own otherwise.
uint64_t bytes_read(const Tensor& w, std::span<const uint8_t> packed);

// The scalar reference: every row decoded with the type table's to_float, each dot product
// accumulated in double and rounded to float once. Exact up to that one rounding, so it is the
// yardstick for the fast paths. Same threads as matmul (rows are independent: the result does
// not depend on the thread count).
void matmul_ref(const Tensor& w, const float* x, int64_t n_tokens, float* y);

// Embedding lookup: out[i*cols .. i*cols+cols) = row ids[i] of w decoded to float with the type
// table's to_float, for i < n. Throws Error naming the tensor when an id is outside [0, rows).
void get_rows(const Tensor& w, const int32_t* ids, int64_t n, float* out);

// The kernels matmul takes, widest last: scalar (matmul_ref); avx2 (AVX2+FMA+F16C); avx512 (the
// AVX2 kernels, except the products of Q8_0, PQ2_0, TQ2_0 and PTQ1_0 given pack_weights' copy,
// which use AVX-512 VNNI and VBMI2: kernels_avx512.h). Decode attention (attention.h) follows it too: AVX-512's
// attend on the avx512 path, ops.h's loops below it.
enum class MatmulPath { scalar, avx2, avx512 };

// The widest path this CPU has, capped by cap_matmul_path.
MatmulPath matmul_path_taken();
// "avx512", "avx2" or "scalar": matmul_path_taken() by name.
const char* matmul_path();

// Caps the path matmul takes (default avx512, i.e. no cap) and returns the previous cap: tests
// hold every path to the reference, and bench_matmul compares them on one machine.
MatmulPath cap_matmul_path(MatmulPath cap);

}  // namespace bonsai::cpu
