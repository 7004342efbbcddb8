// One matrix to its plan type: the step the job repeats for every block weight. Ternary types go
// through the calibrated methods (stage 2's grid and residual codebooks included), the others
// through the type table's reference encoder; the error is measured against what the runtime will
// compute with (the decoded result).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "calibrate/stats.h"
#include "formats/tensor_set.h"
#include "quantize/plan.h"
#include "quantize/residual.h"
#include "quantize/ternary.h"
#include "quantize/weight_error.h"
#include "runtime/hadamard.h"

namespace bonsai::quant {

// A weight's input statistics as the methods read them: E[x²] and, when measured, E[x xᵀ].
struct InputMoments {
  int64_t cols = 0;
  std::vector<float> importance;
  std::vector<double> gram;  // empty: none
};
// `take_gram`: the mean Gram matrix is made in the statistics' own storage, which it takes over
// (st.gram is left empty), instead of in a copy: the same values without a second cols² doubles,
// for statistics that are not needed afterwards.
InputMoments input_moments(calib::InputStats& st, bool take_gram);

// The F32 working copy of a weight as the methods see it: decoded, and W·S·H when `rotation`
// rotates it (quantize/rotate.h). Error naming the tensor when its type has no decoder.
std::vector<float> working_copy(const Tensor& t, const HadamardSpec* rotation);

// Quantizes one matrix to `tp`'s type. `w` is its working copy, `mom` its input statistics or
// null; the result's bytes are owned by `owner`. With a residual (`rc`, ternary types only) its
// tensors go to `extra`, kept only where they lower the output error, and the error is that of
// Ŵ + R̂. `start`: a saved stage-1 result (--from) instead of rerunning stage 1. `err` (or null)
// receives what it cost.
Tensor quantize_matrix(const Tensor& like, const float* w, const TensorPlan& tp, const InputMoments* mom,
                       const MethodOptions& mo, TensorSet& owner, WeightError* err,
                       const std::function<void(const std::string&)>& info, const ResidualOptions& rc = {},
                       std::vector<Tensor>* extra = nullptr, const TernaryMatrix* start = nullptr);

// A saved stage-1 result (--from): the codes and scales of a ternary tensor, read back through
// formats' decoder and the canonical re-encoder (a stage-1 block is canonical, so this is exact).
// Errors name `path`.
TernaryMatrix stage1_from(const Tensor& t, const Tensor& like, const std::string& path);

}  // namespace bonsai::quant
