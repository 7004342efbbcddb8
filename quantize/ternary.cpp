#include "quantize/ternary.h"

#include <cmath>
#include <iterator>
#include <string_view>

#include "formats/blocks.h"
#include "formats/error.h"
#include "formats/fp16.h"
#include "quantize/gptq.h"
#ifdef BONSAI_HAVE_QUANT_CUDA
#include "quantize/cuda/gptq_cuda.h"
#endif
#include "quantize/grid4.h"
#include "quantize/group_fit.h"
#include "quantize/tune.h"

namespace bonsai::quant {
namespace {

constexpr std::string_view kMethodNames[] = {"rtn", "absmean", "optimal", "gptq", "tune"};
constexpr float kMaxFp16 = 65504.0f;

template <typename... Args>
[[noreturn]] void bad(const Args&... what) {
  throw Error(cat("quantize: ", what...));
}

}  // namespace

void validate_method_options(const MethodOptions& opts) {
  if (!(opts.gptq_damp >= 0.0) || !std::isfinite(opts.gptq_damp)) bad("gptq damping ", opts.gptq_damp, " must be >= 0");
  if (opts.gptq_block < 1) bad("gptq block ", opts.gptq_block, " must be >= 1");
  if (opts.gptq_passes < 1) bad("gptq passes ", opts.gptq_passes, " must be >= 1");
  if (opts.descent_rounds < 0) bad("gptq descent rounds ", opts.descent_rounds, " must be >= 0");
  if (opts.tune_steps < 0) bad("tune steps ", opts.tune_steps, " must be >= 0");
  if (!(opts.tune_lr > 0.0) || !std::isfinite(opts.tune_lr)) bad("tune learning rate ", opts.tune_lr, " must be > 0");
}

namespace {

void validate(const MatrixIn& in, Method method, const MethodOptions& opts) {
  if (!in.w) bad("no weights given");
  if (in.rows <= 0 || in.cols <= 0) bad("matrix of ", in.rows, " x ", in.cols, " has no weights");
  if (in.cols % kGroup != 0)
    bad("cols ", in.cols, " is not a multiple of the group size ", kGroup,
        " (each scale covers 128 consecutive inputs of a row)");
  // Every scale is stored as fp16; a weight past its range has no representable scale.
  for (int64_t i = 0; i < in.rows * in.cols; ++i)
    if (!(std::fabs(in.w[i]) <= kMaxFp16))
      bad("weight ", i / in.cols, ",", i % in.cols, " = ", in.w[i],
          " is not finite or exceeds the fp16 range of the stored scales");
  if (in.importance)
    for (int64_t j = 0; j < in.cols; ++j)
      if (!(in.importance[j] >= 0.0f) || !std::isfinite(in.importance[j]))
        bad("importance of column ", j, " = ", in.importance[j], " (must be a finite E[x²] >= 0)");
  if (method == Method::tune) require_torch();  // before anything else: only a rebuild helps
  if (!method_needs_gram(method)) return;
  if (!in.gram)
    bad("method ", method_name(method), " needs the Gram matrix E[x xᵀ] of the layer's input (calibration with "
        "Gram collection); rtn, absmean and optimal do without");
  validate_method_options(opts);
  for (int64_t j = 0; j < in.cols; ++j) {
    if (!(in.gram[j * in.cols + j] >= 0.0)) bad("Gram matrix diagonal ", j, " = ", in.gram[j * in.cols + j], " (must be >= 0)");
    for (int64_t k = 0; k < in.cols; ++k)
      if (!std::isfinite(in.gram[j * in.cols + k])) bad("Gram matrix entry ", j, ",", k, " is not finite");
  }
}

// rtn, absmean, optimal: every (row, group) on its own; with four_levels, stage 2's grid Lloyd
// starts from each group's stage-1 result.
void per_group(const MatrixIn& in, Method method, bool four_levels, TernaryMatrix& out) {
  const int64_t groups = in.cols / kGroup;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float* w = in.w + r * in.cols + g * kGroup;
      const float* a = in.importance ? in.importance + g * kGroup : nullptr;
      int8_t* c = out.codes.data() + r * in.cols + g * kGroup;
      uint16_t& d = out.scales[size_t(r * groups + g)];
      switch (method) {
        case Method::rtn: d = fit_rtn(w, kGroup, c); break;
        case Method::absmean: d = fit_absmean(w, kGroup, c); break;
        default: d = fit_optimal(w, a, kGroup, c); break;
      }
      if (four_levels) d = refine_grid4(w, a, kGroup, c, d);
    }
}

void check_shape(const TernaryMatrix& m) {
  if (m.rows < 0 || m.cols < 0 || m.cols % kGroup != 0 || m.codes.size() != size_t(m.rows * m.cols) ||
      m.scales.size() != size_t(m.rows * (m.cols / kGroup)))
    bad("ternary matrix ", m.rows, " x ", m.cols, " has ", m.codes.size(), " codes and ", m.scales.size(),
        " scales (expected rows·cols and rows·cols/128, cols a multiple of 128)");
}

}  // namespace

void validate_matrix_in(const MatrixIn& in, Method method, const MethodOptions& opts) { validate(in, method, opts); }

const char* method_name(Method m) { return kMethodNames[int(m)].data(); }

Method parse_method(const std::string& s) {
  for (size_t i = 0; i < std::size(kMethodNames); ++i)
    if (s == kMethodNames[i]) return Method(i);
  bad("unknown method '", s, "' (known: rtn, absmean, optimal, gptq, tune)");
}

TernaryMatrix quantize_ternary(const MatrixIn& in, Method method, const MethodOptions& opts) {
  validate(in, method, opts);
  TernaryMatrix out;
  out.rows = in.rows;
  out.cols = in.cols;
  out.codes.assign(size_t(in.rows * in.cols), 0);
  out.scales.assign(size_t(in.rows * (in.cols / kGroup)), 0);
  if (method == Method::gptq && opts.gpu) {
#ifdef BONSAI_HAVE_QUANT_CUDA
    cuda::gptq_ternary(in, opts, out);
#else
    throw Error("quantize: gptq on a GPU needs a build with CUDA (BONSAI_CUDA=ON)");
#endif
  } else if (method == Method::gptq) {
    gptq_ternary(in, opts, out);
  } else if (method == Method::tune) {
    per_group(in, Method::optimal, false, out);
    tune_ternary(in, opts, out);
    if (opts.four_levels) out = refine_grid4(in, out);
  } else {
    per_group(in, method, opts.four_levels, out);
  }
  return out;
}

std::vector<float> TernaryMatrix::dequantize() const {
  check_shape(*this);
  std::vector<float> y(codes.size());
  const int64_t groups = cols / kGroup;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float d = fp16_to_f32(scales[size_t(r * groups + g)]);
      const size_t o = size_t(r * cols + g * kGroup);
      for (int64_t j = 0; j < kGroup; ++j) y[o + size_t(j)] = float(codes[o + size_t(j)]) * d;  // as the decoders
    }
  return y;
}

std::vector<uint8_t> TernaryMatrix::pack(TypeId type) const {
  check_shape(*this);
  void (*pack_block)(const int8_t*, uint16_t, void*) = nullptr;
  if (type == TypeId::PTQ1_0) pack_block = pack_ptq1_0;
  if (type == TypeId::PQ2_0) pack_block = pack_pq2_0;
  if (!pack_block) bad("cannot pack ternary codes as ", traits(type).name, " (PTQ1_0 or PQ2_0)");
  const TypeTraits& t = traits(type);
  static_assert(QK_PTQ1_0 == kGroup && QK_PQ2_0 == kGroup, "one block per group");
  // PQ2_0 has a fourth level (+2, stored code 3); PTQ1_0 has three.
  const int8_t top = type == TypeId::PQ2_0 ? 2 : 1;
  for (const int8_t c : codes)
    if (c < -1 || c > top) bad("code ", int(c), " does not fit ", t.name, " (codes -1..", int(top), ")");
  std::vector<uint8_t> bytes(size_t(rows * (cols / kGroup) * t.block_bytes));
  for (size_t b = 0; b < scales.size(); ++b)
    pack_block(codes.data() + b * size_t(kGroup), scales[b], bytes.data() + b * size_t(t.block_bytes));
  return bytes;
}

}  // namespace bonsai::quant
