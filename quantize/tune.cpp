#include "quantize/tune.h"

#include "formats/error.h"

#ifdef BONSAI_HAVE_TORCH
// Only what the refinement uses: tensors with autograd (types.h), Adam, NoGradGuard. torch/torch.h
// would pull in every module and double this file's compile time.
#include <torch/optim/adam.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "formats/fp16.h"
#endif

namespace bonsai::quant {

#ifndef BONSAI_HAVE_TORCH

void require_torch() {
  throw Error("quantize: method tune: this bonsai was built without LibTorch; install libtorch-dev and rebuild");
}

void tune_ternary(const MatrixIn&, const MethodOptions&, TernaryMatrix&) { require_torch(); }

#else

void require_torch() {}

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows are refined in fixed chunks, one chunk per OpenMP iteration. The loss is a sum over rows and
// Adam updates each parameter on its own, so a row's path does not depend on which rows share its
// chunk; fixing the chunks (not the thread count) fixes every floating-point sum, so the result is
// the same for any --threads.
constexpr int64_t kChunkRows = 64;
// Width of the soft threshold the straight-through estimator differentiates, in units of the
// group's scale: narrow enough to follow the hard codes, wide enough that weights near the
// threshold all get a gradient.
constexpr float kSoftWidth = 0.1f;
constexpr float kMinFp16 = 5.9604645e-8f;  // smallest fp16 subnormal: a scale that stays nonzero
constexpr float kMaxFp16 = 65504.0f;

struct Start {
  std::vector<float> log_scale, ratio;  // per (row, group) of the chunk
};

// The starting point of a chunk from `optimal`'s result (already in out): the log of each stored
// scale and the threshold ratio 1/2, whose hard codes are exactly optimal's. A group whose codes
// are all zero starts at scale max|w| with ratio 1: still no code, but a gradient to grow one.
Start start_of(const MatrixIn& in, const TernaryMatrix& out, int64_t r0, int64_t nr) {
  const int64_t groups = in.cols / kGroup;
  Start s;
  s.log_scale.resize(size_t(nr * groups));
  s.ratio.resize(size_t(nr * groups));
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const size_t i = size_t(r * groups + g);
      const float d = fp16_to_f32(out.scales[size_t((r0 + r) * groups + g)]);
      float amax = 0.0f;
      for (int64_t j = 0; j < kGroup; ++j) amax = std::max(amax, std::fabs(in.w[(r0 + r) * in.cols + g * kGroup + j]));
      s.log_scale[i] = std::log(d > 0.0f ? d : std::max(amax, kMinFp16));
      s.ratio[i] = d > 0.0f ? 0.5f : 1.0f;
    }
  return s;
}

// Refines rows r0..r0+nr of out (holding optimal's result) against Σ_rows e G eᵀ: per step, the hard
// codes sign(w)·[|w| > t·ŝ] on the fp16-rounded scale ŝ give Ŵ and the exact per-row loss e G eᵀ;
// the gradient reaches the log-scale through ŝ (rounding passed straight through) and the ratio t
// through a sigmoid surrogate of the step (straight-through: forward hard, backward soft). Each
// row keeps its best iterate by the exact loss (the start included), so no row gets worse.
void tune_chunk(const MatrixIn& in, const MatF& gram, int64_t r0, int64_t nr, const MethodOptions& opts,
                TernaryMatrix& out) {
  const int64_t cols = in.cols, groups = cols / kGroup;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  // from_blob does not copy: clone so that torch owns memory it may treat as writable.
  const torch::Tensor w = torch::from_blob(const_cast<float*>(in.w + r0 * cols), {nr, groups, kGroup}, f32).clone();
  const torch::Tensor absw = w.abs(), sgn = w.sign();
  Start st = start_of(in, out, r0, nr);
  torch::Tensor log_scale = torch::from_blob(st.log_scale.data(), {nr, groups, 1}, f32).clone().requires_grad_(true);
  torch::Tensor ratio = torch::from_blob(st.ratio.data(), {nr, groups, 1}, f32).clone().requires_grad_(true);
  torch::optim::Adam adam({log_scale, ratio}, torch::optim::AdamOptions(opts.tune_lr));

  // tr(W_c G W_cᵀ) of the chunk: the loss is relative, so the learning rate means the same for
  // every layer.
  const Eigen::Map<const MatF> wm(in.w + r0 * cols, nr, cols);
  const double energy = double((wm * gram).cwiseProduct(wm).sum());
  const float inv_energy = energy > 0.0 ? float(1.0 / energy) : 1.0f;

  torch::Tensor best = torch::full({nr}, std::numeric_limits<float>::infinity(), f32);
  torch::Tensor best_scale = torch::zeros({nr, groups, 1}, f32), best_ratio = torch::zeros({nr, groups, 1}, f32);
  MatF eg(nr, cols);
  for (int step = 0; step <= opts.tune_steps; ++step) {
    const torch::Tensor s = log_scale.exp().clamp(kMinFp16, kMaxFp16);
    const torch::Tensor s16 = s + (s.to(torch::kHalf).to(torch::kFloat32) - s).detach();
    const torch::Tensor tau = ratio * s16;
    const torch::Tensor hard = (absw > tau).to(torch::kFloat32) * sgn;
    const torch::Tensor soft = sgn * torch::sigmoid((absw - tau) / (kSoftWidth * s16));
    const torch::Tensor e = w - s16 * (hard + (soft - soft.detach()));
    // E·G with Eigen: the Gram product is the one large product per step, and Eigen's GEMM is
    // several times faster than the reference BLAS LibTorch may be linked with (and runs serially
    // inside this OpenMP iteration, so its sums do not depend on the thread count either).
    const torch::Tensor ed = e.detach().reshape({nr, cols}).contiguous();
    eg.noalias() = Eigen::Map<const MatF>(ed.data_ptr<float>(), nr, cols) * gram;
    const torch::Tensor egt = torch::from_blob(eg.data(), {nr, cols}, f32);
    {
      const torch::NoGradGuard no_grad;
      const torch::Tensor row_loss = (ed * egt).sum(1);  // e G eᵀ of each row: the exact hard loss
      const torch::Tensor better = row_loss < best;
      best = torch::where(better, row_loss, best);
      best_scale = torch::where(better.view({nr, 1, 1}), s16.detach(), best_scale);
      best_ratio = torch::where(better.view({nr, 1, 1}), ratio.detach(), best_ratio);
    }
    if (step == opts.tune_steps) break;  // the last iterate is measured, not stepped from
    // d(e G eᵀ)/de = 2·e G for a symmetric G: a surrogate linear in e with that constant gradient.
    const torch::Tensor loss = (e.reshape({nr, cols}) * egt).sum() * (2.0f * inv_energy);
    adam.zero_grad();
    loss.backward();
    adam.step();
  }

  // The best iterate as stored: its scale is already an fp16 value, and its codes are the hard
  // codes of the same float comparison |w| > t·ŝ the loss measured.
  const float* bs = best_scale.contiguous().data_ptr<float>();
  const float* bt = best_ratio.contiguous().data_ptr<float>();
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const size_t p = size_t(r * groups + g), o = size_t((r0 + r) * cols + g * kGroup);
      const float d = bs[p], tau = bt[p] * d;
      bool any = false;
      for (int64_t j = 0; j < kGroup; ++j) {
        const float x = in.w[o + size_t(j)];
        const int8_t c = std::fabs(x) > tau ? (x > 0.0f ? 1 : (x < 0.0f ? -1 : 0)) : 0;
        out.codes[o + size_t(j)] = c;
        any = any || c != 0;
      }
      out.scales[size_t((r0 + r) * groups + g)] = any ? f32_to_fp16(d) : uint16_t{0};
    }
}

}  // namespace

void tune_ternary(const MatrixIn& in, const MethodOptions& opts, TernaryMatrix& out) {
  const int64_t rows = in.rows, cols = in.cols;
  if (opts.tune_steps <= 0) return;
  const TernaryMatrix start = out;

  MatF gram(cols, cols);
  for (int64_t i = 0; i < cols * cols; ++i) gram.data()[i] = float(in.gram[i]);
  const int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  // Autograd state is per thread; each chunk builds its own graph and optimizer.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t r0 = c * kChunkRows;
    tune_chunk(in, gram, r0, std::min(kChunkRows, rows - r0), opts, out);
  }
  // The per-row choice used float sums; the project's measure (double sums) has the last word, so
  // tune never reports an error above its start's.
  if (relative_output_error(in, out.dequantize()) > relative_output_error(in, start.dequantize())) out = start;
}

#endif

}  // namespace bonsai::quant
