// Stage 1: ternary codes and one fp16 scale per group of 128 inputs, chosen from how the layer is
// used (calibration statistics). Methods (see docs/results.md for what each is worth):
//   rtn      PrismML's reference rule: scale = max|w|, code = round(w / scale) (baseline)
//   absmean  TWN: threshold 0.7·mean|w|, scale = mean |w| over the kept weights
//   optimal  exact minimiser of the importance-weighted squared error over threshold and scale
//   gptq     GPTQ error feedback on the ternary grid (Cholesky of the damped inverse Gram matrix)
//   tune     optimal, then each group's scale and threshold refined by gradient descent (LibTorch,
//            straight-through estimator) on the layer's output error (quantize/tune.h)
// Codes are always chosen against the scale that will be stored (its fp16 rounding).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/types.h"

namespace bonsai::quant {

constexpr int64_t kGroup = 128;

enum class Method { rtn, absmean, optimal, gptq, tune };
const char* method_name(Method m);
Method parse_method(const std::string& s);  // Error listing the methods for an unknown name
// gptq and tune measure the output error through the Gram matrix E[x xᵀ]; the others need at most
// its diagonal.
inline bool method_needs_gram(Method m) { return m == Method::gptq || m == Method::tune; }

struct MatrixIn {
  const float* w = nullptr;           // rows × cols, row-major: row r = output r
  int64_t rows = 0, cols = 0;         // cols % 128 == 0
  const float* importance = nullptr;  // cols: E[x²] per input column; null = all ones
  const double* gram = nullptr;       // cols × cols: E[x xᵀ]; required by gptq and tune
};

struct MethodOptions {
  double gptq_damp = 0.01;      // λ = damp · mean(diag G) added to the diagonal
  int64_t gptq_block = 128;     // columns per lazy-update block
  // gptq: once every code is chosen, refit each row's group scales by least squares in the output
  // metric (quantize/scale_refit.h).
  bool refit_scales = true;
  // gptq with refit_scales: passes in all; each after the first re-runs GPTQ with the refitted
  // scales fixed, then refits again (stops early when a pass does not lower the output error).
  int gptq_passes = 4;
  // gptq with refit_scales, after the passes: rounds of coordinate descent on the codes for fixed
  // scales, each followed by a refit (ScaleRefit::descend_codes; stops early the same way).
  int descent_rounds = 4;
  // Stage 2 (quantize/grid4.h): PQ2_0's grid {-1, 0, +1, +2}·d, d of either sign. Per-group
  // methods refine their stage-1 result by Lloyd iterations; gptq uses the grid inside its error
  // feedback. The result packs only as PQ2_0.
  bool four_levels = false;
  // tune: Adam steps from optimal's result, and their learning rate (on the log of each scale and
  // on each threshold's ratio to its scale).
  int tune_steps = 150;
  double tune_lr = 2e-2;
  // gptq's numerics on the current CUDA device (quantize/cuda/gptq_cuda.h; the pipeline makes
  // --device's GPU current). The result equals the CPU's up to float rounding, not bit for bit.
  bool gpu = false;
};

// Codes (rows × cols, values in {-1, 0, +1}, or {-1, 0, +1, +2} with four_levels) and fp16
// scales (rows × cols/128; negative only with four_levels) of a matrix.
struct TernaryMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<int8_t> codes;
  std::vector<uint16_t> scales;

  std::vector<float> dequantize() const;  // rows × cols
  // Packed blocks of `type` (PTQ1_0 or PQ2_0): byte-exact what a file stores.
  std::vector<uint8_t> pack(TypeId type) const;
};

// Error naming the first option out of range (passes < 1, steps < 0, a learning rate that is not
// a positive number, ...); quantize_ternary checks them too, the pipeline before any work.
void validate_method_options(const MethodOptions& opts);

// The checks quantize_ternary makes before any work (Error naming the first problem: shape,
// non-finite or out-of-range weights, importance, a missing or bad Gram matrix, the options),
// for another backend of a method (quantize/cuda) to make the same.
void validate_matrix_in(const MatrixIn& in, Method method, const MethodOptions& opts);

TernaryMatrix quantize_ternary(const MatrixIn& in, Method method, const MethodOptions& opts = {});

// Relative output error ‖X(W−Ŵ)ᵀ‖² / ‖XWᵀ‖² from the Gram matrix (or, without one, the
// importance-weighted squared error relative to the weighted energy of W).
double relative_output_error(const MatrixIn& in, const std::vector<float>& w_hat);

}  // namespace bonsai::quant
