#include "formats/residual.h"

#include <cmath>
#include <cstring>

#include "formats/error.h"
#include "formats/fp16.h"

namespace bonsai {
namespace {

constexpr int64_t kMaxCodebookSize = 65536;
constexpr int64_t kPatternSize = 4;

// fp16 values that are not finite would poison every output they touch: refuse them at load.
void check_finite(const std::string& path, const Tensor& t, const uint16_t* v, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if ((v[i] & 0x7c00) == 0x7c00) fail(path, "residual tensor '", t.name, "': value ", i, " is not finite");
}

void check_type(const std::string& path, const Tensor& t, TypeId want) {
  if (t.type != want)
    fail(path, "residual tensor '", t.name, "' has type ", traits(t.type).name, ", expected ", traits(want).name);
}

[[noreturn]] void shape_mismatch(const std::string& path, const Tensor& t, const Tensor& base, const std::string& want) {
  fail(path, "residual tensor '", t.name, "' has shape ", t.shape_str(), ", which does not match its base '", base.name,
       "' ", base.shape_str(), " (expected ", want, ")");
}

Tensor make_tensor(const std::string& name, TypeId type, std::vector<int64_t> ne, const void* src, uint64_t nbytes,
                   TensorSet& owner) {
  Tensor t;
  t.name = name;
  t.type = type;
  t.ne = std::move(ne);
  t.nbytes = nbytes;
  uint8_t* d = owner.alloc(nbytes);
  std::memcpy(d, src, nbytes);
  t.data = d;
  return t;
}

}  // namespace

const char* residual_scheme_name(ResidualScheme s) { return s == ResidualScheme::pattern ? "pattern" : "kmeans"; }

int index_bits(int64_t size) {
  int b = 1;
  while ((int64_t{1} << b) < size) ++b;
  return b;
}

uint64_t index_row_bytes(int64_t n, int bits) { return (uint64_t(n) * uint64_t(bits) + 7) / 8; }

void pack_indices(const uint32_t* idx, int64_t n, int bits, uint8_t* row) {
  std::memset(row, 0, index_row_bytes(n, bits));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bit = uint64_t(i) * uint64_t(bits);
    for (int k = 0; k < bits; ++k)
      if ((idx[i] >> k) & 1u) row[(bit + uint64_t(k)) >> 3] |= uint8_t(1u << ((bit + uint64_t(k)) & 7));
  }
}

std::string kmeans_options_problem(int64_t dim, int64_t size, int64_t rows_per_codebook) {
  if (dim < 1 || kRcGroup % dim != 0) return cat("--rc-dim ", dim, " does not divide the group of ", kRcGroup);
  if (size < 2 || size > kMaxCodebookSize) return cat("--rc-size ", size, " is outside 2..", kMaxCodebookSize);
  if (rows_per_codebook < 0) return cat("--rc-rows ", rows_per_codebook, " is negative (0 = all rows of each tensor)");
  return {};
}

std::vector<Tensor> ResidualData::view(const Tensor& base) const {
  const int64_t rows = base.ne[1], per_row = base.ne[0] / dim;
  auto part = [&](std::string name, TypeId type, std::vector<int64_t> ne, const void* data, uint64_t have) {
    Tensor t;
    t.name = std::move(name);
    t.type = type;
    t.ne = std::move(ne);
    t.nbytes = *tensor_bytes(type, t.ne);
    if (have != 0 && have != t.nbytes)
      throw Error(cat("residual of '", base.name, "': '", t.name, "' holds ", have, " bytes, its shape ",
                      t.shape_str(), " needs ", t.nbytes));
    t.data = have != 0 ? static_cast<const uint8_t*>(data) : nullptr;
    return t;
  };
  std::vector<Tensor> out;
  out.push_back(part(base.name + kRcCodebookSuffix, TypeId::F16, {dim, size, books}, codebook.data(), codebook.size() * 2));
  const int64_t rb = int64_t(index_row_bytes(per_row, index_bits(size)));
  out.push_back(part(base.name + kRcIndexSuffix, TypeId::I8, {rb, rows}, index.data(), index.size()));
  if (scheme == ResidualScheme::pattern)
    out.push_back(part(base.name + kRcParamsSuffix, TypeId::F16, {2, per_row, rows}, params.data(), params.size() * 2));
  return out;
}

std::vector<Tensor> ResidualData::tensors(const Tensor& base, TensorSet& owner) const {
  std::vector<Tensor> out;
  for (const Tensor& v : view(base)) out.push_back(make_tensor(v.name, v.type, v.ne, v.data, v.nbytes, owner));
  return out;
}

uint64_t ResidualData::bytes() const { return codebook.size() * 2 + index.size() + params.size() * 2; }

void write_residual_keys(ResidualScheme s, int64_t dim, int64_t size, int64_t rows_per_codebook, Metadata& meta) {
  const bool pattern = s == ResidualScheme::pattern;
  meta.set_str("bonsai.residual.scheme", residual_scheme_name(s));
  meta.set_u32("bonsai.residual.vector_dim", uint32_t(pattern ? kRcGroup : dim));
  meta.set_u32("bonsai.residual.codebook_size", uint32_t(pattern ? kPatternSize : size));
  meta.set_u32("bonsai.residual.rows_per_codebook", uint32_t(pattern ? 0 : rows_per_codebook));
}

std::vector<float> ResidualView::dequantize() const {
  std::vector<float> r(size_t(rows * cols));
  const int64_t per_row = cols / dim;
  for (int64_t row = 0; row < rows; ++row) {
    const uint16_t* book = codebook + (row / rows_per_book()) * size * dim;
    for (int64_t p = 0; p < per_row; ++p) {
      const uint16_t* c = book + int64_t(index(row, p)) * dim;
      float mu = 0.0f, sigma = 1.0f;
      if (scheme == ResidualScheme::pattern) {
        mu = fp16_to_f32(params[(row * per_row + p) * 2]);
        sigma = fp16_to_f32(params[(row * per_row + p) * 2 + 1]);
      }
      for (int64_t k = 0; k < dim; ++k) r[size_t(row * cols + p * dim + k)] = mu + sigma * fp16_to_f32(c[k]);
    }
  }
  return r;
}

uint64_t ResidualView::stored_bytes() const {
  uint64_t b = uint64_t(books * size * dim) * 2 + uint64_t(rows) * row_bytes;
  if (scheme == ResidualScheme::pattern) b += uint64_t(rows * (cols / kRcGroup)) * 4;
  return b;
}

bool find_residual(const TensorSet& ts, const Tensor& base, ResidualView* out) {
  const std::string& path = ts.path;
  const Tensor* cb = ts.find(base.name + kRcCodebookSuffix);
  const Tensor* ix = ts.find(base.name + kRcIndexSuffix);
  const Tensor* pr = ts.find(base.name + kRcParamsSuffix);
  if (!cb) {
    if (ix) fail(path, "residual index '", ix->name, "' has no codebook '", base.name, kRcCodebookSuffix, "'");
    if (pr) fail(path, "residual parameters '", pr->name, "' have no codebook '", base.name, kRcCodebookSuffix, "'");
    return false;
  }
  if (!ix) fail(path, "residual codebook '", cb->name, "' has no index tensor '", base.name, kRcIndexSuffix, "'");
  if (base.ne.size() != 2) fail(path, "residual codebook '", cb->name, "' refines '", base.name, "', which is not a matrix");
  ResidualView v;
  v.base = base.name;
  v.cols = base.ne[0];
  v.rows = base.ne[1];
  v.scheme = pr ? ResidualScheme::pattern : ResidualScheme::kmeans;
  check_type(path, *cb, TypeId::F16);
  check_type(path, *ix, TypeId::I8);
  if (cb->ne.size() != 3) shape_mismatch(path, *cb, base, "[dim, size, books]");
  v.dim = cb->ne[0];
  v.size = cb->ne[1];
  v.books = cb->ne[2];
  if (v.dim < 1 || kRcGroup % v.dim != 0)
    fail(path, "residual codebook '", cb->name, "': sub-vector dimension ", v.dim, " does not divide the group of ", kRcGroup);
  if (v.cols % kRcGroup != 0) shape_mismatch(path, *cb, base, cat("a base whose rows are a multiple of ", kRcGroup));
  if (v.size < 2 || v.size > kMaxCodebookSize)
    fail(path, "residual codebook '", cb->name, "': codebook size ", v.size, " is outside 2..", kMaxCodebookSize);
  if (v.books < 1 || v.rows % v.books != 0)
    fail(path, "residual codebook '", cb->name, "': its ", v.books, " codebook groups do not divide the ", v.rows,
         " rows of '", base.name, "'");
  if (v.scheme == ResidualScheme::pattern && (v.dim != kRcGroup || v.size != kPatternSize || v.books != 1))
    shape_mismatch(path, *cb, base, cat("[", kRcGroup, ", ", kPatternSize, ", 1] for the pattern scheme"));
  v.bits = index_bits(v.size);
  const int64_t per_row = v.cols / v.dim;
  v.row_bytes = index_row_bytes(per_row, v.bits);
  if (ix->ne.size() != 2 || ix->ne[0] != int64_t(v.row_bytes) || ix->ne[1] != v.rows)
    shape_mismatch(path, *ix, base, cat("[", v.row_bytes, ", ", v.rows, "]: ", per_row, " indices of ", v.bits, " bits per row"));
  if (pr && (pr->ne.size() != 3 || pr->ne[0] != 2 || pr->ne[1] != per_row || pr->ne[2] != v.rows))
    shape_mismatch(path, *pr, base, cat("[2, ", per_row, ", ", v.rows, "]"));
  if (pr) check_type(path, *pr, TypeId::F16);
  v.codebook = reinterpret_cast<const uint16_t*>(cb->data);
  v.indices = ix->data;
  v.index_uid = ix->uid;
  v.params = pr ? reinterpret_cast<const uint16_t*>(pr->data) : nullptr;
  check_finite(path, *cb, v.codebook, uint64_t(v.books * v.size * v.dim));
  if (pr) check_finite(path, *pr, v.params, uint64_t(v.rows * per_row * 2));
  // Every index must name a centroid: a stray one would read past the codebook.
  if (v.size != (int64_t{1} << v.bits))
    for (int64_t r = 0; r < v.rows; ++r)
      for (int64_t i = 0; i < per_row; ++i)
        if (v.index(r, i) >= uint64_t(v.size))
          fail(path, "residual index '", ix->name, "': index ", v.index(r, i), " at row ", r, ", position ", i,
               " is >= the codebook size ", v.size);
  *out = v;
  return true;
}

}  // namespace bonsai
