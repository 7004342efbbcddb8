#include "quantize/matrix_quant.h"

#include <algorithm>
#include <optional>

#include "formats/error.h"
#include "quantize/grid4.h"
#include "quantize/residual_joint.h"
#include "quantize/rotate.h"

namespace bonsai::quant {

namespace {

// Stage 2 on PQ2_0's four-level grid from the stage-1 result `q`: per-group methods refine it
// (never worse per group); gptq reruns with the grid inside its error feedback, and the stage-1
// result is kept for a matrix where that comes out worse, so stage 2 never loses to stage 1.
TernaryMatrix stage2_grid(const MatrixIn& in, Method m, const MethodOptions& mo, TernaryMatrix q, WeightError* err) {
  MethodOptions four = mo;
  four.four_levels = true;
  TernaryMatrix q2 = m == Method::gptq ? quantize_ternary(in, m, four) : refine_grid4(in, q);
  const double e1 = relative_output_error(in, q.dequantize()), e2 = relative_output_error(in, q2.dequantize());
  if (err) err->stage1_error = e1;
  if (e2 <= e1) q = std::move(q2);
  if (err) err->plus2_share = share_of_plus2(q);
  return q;
}

// The ternary branch of quantize_matrix: codes into `data`, the decoded Ŵ (+ R̂) returned.
std::vector<float> quantize_ternary_matrix(const Tensor& like, const MatrixIn& in, const TensorPlan& tp, Method m,
                                           const MethodOptions& mo, uint8_t* data, uint64_t nbytes, TensorSet& owner,
                                           WeightError* err, const std::function<void(const std::string&)>& info,
                                           const ResidualOptions& rc, std::vector<Tensor>* extra,
                                           const TernaryMatrix* start) {
  TernaryMatrix q = start ? *start : quantize_ternary(in, m, mo);
  if (tp.type == TypeId::PQ2_0) q = stage2_grid(in, m, mo, std::move(q), err);
  auto store = [&](const TernaryMatrix& t) {
    const std::vector<uint8_t> packed = t.pack(tp.type);
    if (packed.size() != nbytes)
      throw Error(cat("packing '", like.name, "' as ", traits(tp.type).name, " gave ", packed.size(),
                      " bytes, expected ", nbytes));
    std::copy(packed.begin(), packed.end(), data);
  };
  auto keep = [&](const ResidualFit& fit) {
    Tensor base = like;
    base.type = tp.type;
    base.data = data;
    base.nbytes = nbytes;
    for (Tensor& t : fit.tensors(base, owner)) extra->push_back(std::move(t));
    if (err) err->residual_bytes = fit.bytes();
  };
  std::vector<float> w_hat = q.dequantize();
  if (rc.kind == ResidualKind::none || !extra) {
    store(q);
    return w_hat;
  }
  // Kept only where it lowers the output error (a tensor without one is valid: the runtime looks
  // residuals up per weight). With a Gram matrix the kmeans residual is fitted with the base, in
  // the output metric (quantize/residual_joint.h), so the base may change with it.
  const double e0 = relative_output_error(in, w_hat);
  if (err) err->grid_error = e0;
  TernaryMatrix base = q;
  ResidualFit fit;
  if (rc.kind == ResidualKind::kmeans && tp.type == TypeId::PQ2_0 && in.gram) {
    JointFit jf = fit_joint_residual(in, mo, rc, q);
    base = std::move(jf.base);
    fit = std::move(jf.residual);
  } else {
    fit = fit_residual(in, w_hat, rc);
  }
  std::vector<float> with = base.dequantize();
  const std::vector<float> r = residual_values(fit, in.rows, in.cols);
  for (size_t i = 0; i < with.size(); ++i) with[i] += r[i];
  if (relative_output_error(in, with) < e0) {
    store(base);
    keep(fit);
    return with;
  }
  store(q);
  if (info) info(cat("note: the residual of '", like.name, "' does not lower its output error: not stored"));
  return w_hat;
}

}  // namespace

InputMoments input_moments(calib::InputStats& st, bool take_gram) {
  InputMoments m;
  m.cols = st.cols;
  m.importance = st.mean_sq();
  if (st.gram.empty()) return m;
  if (!take_gram) {
    m.gram = st.mean_gram();
    return m;
  }
  // mean_gram's arithmetic exactly, in place.
  const double inv = st.rows_seen > 0 ? 1.0 / double(st.rows_seen) : 0.0;
  m.gram.swap(st.gram);
  for (double& v : m.gram) v *= inv;
  return m;
}

std::vector<float> working_copy(const Tensor& t, const HadamardSpec* rotation) {
  std::vector<float> v(size_t(t.nelements()));
  traits(t.type).to_float(t.data, v.data(), t.nelements());
  if (rotation && rotation->rotates(t.name)) fold_rotation(*rotation, v.data(), t.rows(), t.ne[0]);
  return v;
}

Tensor quantize_matrix(const Tensor& like, const float* w, const TensorPlan& tp, const InputMoments* mom,
                       const MethodOptions& mo, TensorSet& owner, WeightError* err,
                       const std::function<void(const std::string&)>& info, const ResidualOptions& rc,
                       std::vector<Tensor>* extra, const TernaryMatrix* start) {
  const int64_t cols = like.ne[0], rows = like.nelements() / cols;
  MatrixIn in;
  in.w = w;
  in.rows = rows;
  in.cols = cols;
  if (mom) {
    if (mom->cols != cols)
      throw Error(cat("statistics for '", like.name, "' have ", mom->cols, " columns, the weight has ", cols));
    in.importance = mom->importance.data();
    if (!mom->gram.empty()) in.gram = mom->gram.data();
  }
  Tensor out = like;
  out.type = tp.type;
  out.nbytes = *tensor_bytes(tp.type, like.ne);
  uint8_t* data = owner.alloc(out.nbytes);
  out.data = data;
  std::vector<float> w_hat;
  std::optional<Method> used = tp.method;
  if (is_ternary(tp.type)) {
    Method m = *tp.method;
    if (method_needs_gram(m) && !in.gram) {
      // Only matrices outside the blocks (the embedding lookup) have no statistics.
      if (info)
        info(cat("note: '", like.name, "' has no input statistics: optimal (plain squared error) instead of ",
                 method_name(m)));
      m = Method::optimal;
    }
    used = m;
    w_hat = quantize_ternary_matrix(like, in, tp, m, mo, data, out.nbytes, owner, err, info, rc, extra, start);
  } else {
    const TypeTraits& tt = traits(tp.type);
    w_hat.resize(size_t(rows * cols));
    const uint64_t rb = *row_bytes(tp.type, uint64_t(cols));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      tt.from_float(w + r * cols, data + uint64_t(r) * rb, cols);
      tt.to_float(data + uint64_t(r) * rb, w_hat.data() + r * cols, cols);
    }
  }
  if (err) {
    err->name = like.name;
    err->type = tp.type;
    err->method = used;
    err->gram = in.gram != nullptr;
    err->rel_error = relative_output_error(in, w_hat);
    err->elements = rows * cols;
  }
  return out;
}

TernaryMatrix stage1_from(const Tensor& t, const Tensor& like, const std::string& path) {
  if (!is_ternary(t.type))
    fail(path, "'", t.name, "' is ", traits(t.type).name, ", not a ternary stage-1 result (PTQ1_0 or PQ2_0)");
  if (t.ne != like.ne) fail(path, "'", t.name, "' has shape ", t.shape_str(), ", the model's is ", like.shape_str());
  std::vector<float> y(size_t(t.nelements()));
  traits(t.type).to_float(t.data, y.data(), t.nelements());
  TernaryMatrix q;
  q.cols = t.ne[0];
  q.rows = t.nelements() / q.cols;
  q.codes.resize(y.size());
  q.scales.resize(y.size() / size_t(kGroup));
  for (size_t b = 0; b < q.scales.size(); ++b)
    q.scales[b] = reencode_grid4(y.data() + b * size_t(kGroup), kGroup, q.codes.data() + b * size_t(kGroup));
  if (std::any_of(q.codes.begin(), q.codes.end(), [](int8_t c) { return c == 2; }))
    fail(path, "'", t.name, "' uses PQ2_0's fourth level: it is a stage-2 result, not a stage-1 one");
  return q;
}

}  // namespace bonsai::quant
