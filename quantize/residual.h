// Stage 2's residual codebooks: R = W − Ŵ(PQ2_0) approximated by small k-means codebooks
// (formats/residual.h has the stored layout; the runtime adds R̂·x without expanding R̂).
//   kmeans   sub-vectors of `dim` consecutive inputs of a row (never crossing a 128-group), one
//            codebook of `size` fp16 centroids per `rows` consecutive rows, one index per
//            sub-vector; importance-weighted Lloyd (distance Σ_k a_k (x_k − c_k)²), k-means++ start
//   pattern  per tensor 4 centroids of a whole 128-group fitted to the z-scored residual of each
//            group; per group a 2-bit index and fp16 (μ, σ) fitted by weighted least squares
// Centroids and parameters are rounded to fp16 before the indices are chosen against them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/residual.h"
#include "formats/tensor_set.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

enum class ResidualKind { none, kmeans, pattern };
ResidualKind parse_residual(const std::string& s);  // Error listing none, kmeans, pattern
const char* residual_kind_name(ResidualKind k);

struct ResidualOptions {
  ResidualKind kind = ResidualKind::none;
  int64_t dim = 8;    // --rc-dim v: divides 128
  int64_t size = 16;  // --rc-size K: 2..65536
  int64_t rows = 0;   // --rc-rows G: rows per codebook, 0 = all rows of the tensor; must divide them
  int iterations = 20;
  uint64_t seed = 0;  // k-means++ start
};

// Checks the options on their own (dim, size); Error naming the option.
void validate_residual(const ResidualOptions& o);

// The stored residual of one matrix (formats/residual.h makes its tensors).
using ResidualFit = ResidualData;

// Fits R = W − w_hat (in.w: W, rows × cols; in.importance per input). Error naming the problem
// when G does not divide the rows.
ResidualFit fit_residual(const MatrixIn& in, const std::vector<float>& w_hat, const ResidualOptions& o);

// The bonsai.residual.* keys of these options (formats/residual.h's write_residual_keys).
void write_residual_keys(const ResidualOptions& o, Metadata& meta);

// R̂ of a fit, rows × cols (through formats' view, the one decoder).
std::vector<float> residual_values(const ResidualFit& f, int64_t rows, int64_t cols);

}  // namespace bonsai::quant
