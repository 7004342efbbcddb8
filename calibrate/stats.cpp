#include "calibrate/stats.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>

#include "formats/error.h"
#include "formats/gguf.h"

namespace bonsai::calib {

namespace {

constexpr const char* kVersion = "bonsai.calib.version";
constexpr const char* kManifest = "bonsai.calib.manifest";
constexpr const char* kWeights = "bonsai.calib.weights";
constexpr const char* kRows = "bonsai.calib.rows";
constexpr const char* kSumSq = ".in_sum_sq";
constexpr const char* kGram = ".in_gram";

// Element i of F32 tensor data. GGUF allows general.alignment 1, so the data of a file from
// elsewhere need not be 4-byte aligned: copied, never read through a float pointer.
float f32_at(const uint8_t* data, int64_t i) {
  float v;
  std::memcpy(&v, data + 4 * i, sizeof v);
  return v;
}

}  // namespace

void InputStats::add(const float* x, int64_t n) {
  if (cols <= 0) throw Error(cat("InputStats::add: cols is ", cols, " (set it before adding rows)"));
  if (sum_sq.empty()) sum_sq.assign(size_t(cols), 0.0);
  if (int64_t(sum_sq.size()) != cols) throw Error(cat("InputStats::add: sum_sq has ", sum_sq.size(), " entries, not ", cols));
  const bool want_gram = !gram.empty();
  if (want_gram && int64_t(gram.size()) != cols * cols)
    throw Error(cat("InputStats::add: gram has ", gram.size(), " entries, not ", cols, "²"));
  // Left uninitialized: the products (beta 0) write every element read below.
  const std::unique_ptr<float[]> g(want_gram ? new float[size_t(cols * cols)] : nullptr);
  for (int64_t r0 = 0; r0 < n; r0 += kGramRows) {
    const int64_t m = std::min(kGramRows, n - r0);
    const float* xs = x + r0 * cols;
    // By strips of columns, each summed down the rows in order: rows are read contiguously.
    constexpr int64_t kStrip = 64;
#pragma omp parallel for schedule(static) if (m * cols > 65536)
    for (int64_t c0 = 0; c0 < cols; c0 += kStrip) {
      const int64_t nc = std::min(kStrip, cols - c0);
      double s[kStrip] = {};
      for (int64_t r = 0; r < m; ++r) {
        const float* row = xs + r * cols + c0;
        for (int64_t c = 0; c < nc; ++c) s[c] += double(row[c]) * double(row[c]);
      }
      for (int64_t c = 0; c < nc; ++c) sum_sq[size_t(c0 + c)] += s[c];
    }
    if (want_gram) {
      // The lower triangle of XᵀX (row i, columns ≤ i) by panels of rows, one SGEMM on one thread
      // each (the thread count cannot change a bit; a panel's diagonal block is computed whole),
      // then mirrored into the symmetric double sum by tiles, so that transposed writes stay in
      // cache. Panel i0 costs ~(i0 + ni) columns: handed out largest first, the threads finish
      // together (smallest first, the last and largest panel ran alone: ~17% idle at 1024 columns).
      constexpr int64_t kPanel = 256;
      const int64_t panels = (cols + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t p = panels - 1; p >= 0; --p) {
        const int64_t i0 = p * kPanel, ni = std::min(kPanel, cols - i0);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(ni), int(i0 + ni), int(m), 1.0f, xs + i0, int(cols),
                    xs, int(cols), 0.0f, g.get() + i0 * cols, int(cols));
      }
      constexpr int64_t kTile = 64;
#pragma omp parallel for schedule(dynamic, 1) if (cols * cols > 65536)
      for (int64_t i0 = 0; i0 < cols; i0 += kTile)
        for (int64_t j0 = 0; j0 <= i0; j0 += kTile)
          for (int64_t i = i0; i < std::min(cols, i0 + kTile); ++i)
            for (int64_t j = j0; j < std::min(i + 1, j0 + kTile); ++j) {
              const double v = g[size_t(i * cols + j)];
              gram[size_t(i * cols + j)] += v;
              if (j != i) gram[size_t(j * cols + i)] += v;
            }
    }
  }
  rows_seen += n;
}

std::vector<float> InputStats::mean_sq() const {
  std::vector<float> out(sum_sq.size());
  const double inv = rows_seen > 0 ? 1.0 / double(rows_seen) : 0.0;
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(sum_sq[i] * inv);
  return out;
}

std::vector<double> InputStats::mean_gram() const {
  std::vector<double> out(gram.size());
  const double inv = rows_seen > 0 ? 1.0 / double(rows_seen) : 0.0;
  for (size_t i = 0; i < out.size(); ++i) out[i] = gram[i] * inv;
  return out;
}

void InputStats::round_to_f32() {
  for (double& v : sum_sq) v = double(float(v));
  for (double& v : gram) v = double(float(v));
}

void save_stats(const std::string& path, const Stats& s) {
  TensorSet ts;
  ts.path = path;
  ts.meta.set_u32(kVersion, 1);
  ts.meta.set_str(kManifest, s.manifest_json);
  std::vector<std::string> names;
  std::vector<KvScalar> rows;
  for (const auto& [name, st] : s.by_weight) {
    if (st.cols <= 0 || int64_t(st.sum_sq.size()) != st.cols)
      fail(path, "statistics of '", name, "' have ", st.sum_sq.size(), " column sums for ", st.cols, " columns");
    names.push_back(name);
    rows.emplace_back(uint64_t(st.rows_seen));
    auto put = [&](const std::string& tname, const std::vector<double>& v, std::vector<int64_t> ne) {
      Tensor t;
      t.name = tname;
      t.type = TypeId::F32;
      t.ne = std::move(ne);
      t.nbytes = v.size() * sizeof(float);
      float* d = reinterpret_cast<float*>(ts.alloc(t.nbytes));
      for (size_t i = 0; i < v.size(); ++i) d[i] = float(v[i]);
      t.data = reinterpret_cast<const uint8_t*>(d);
      ts.add(std::move(t));
    };
    put(name + kSumSq, st.sum_sq, {st.cols});
    if (!st.gram.empty()) {
      if (int64_t(st.gram.size()) != st.cols * st.cols)
        fail(path, "statistics of '", name, "' have a Gram matrix of ", st.gram.size(), " entries for ", st.cols, " columns");
      put(name + kGram, st.gram, {st.cols, st.cols});
    }
  }
  ts.meta.set_strings(kWeights, names);
  ts.meta.set(kRows, KvValue::of_array(KvType::U64, std::move(rows)));
  write_gguf(path, ts.meta, ts.tensors);
}

Stats load_stats(const std::string& path) {
  const TensorSet ts = read_gguf(path);
  Stats s;
  std::vector<std::string> names;
  std::vector<int64_t> rows;
  try {
    const auto version = ts.meta.get_int(kVersion);
    if (!version) fail(path, "not a bonsai statistics file (no ", kVersion, ")");
    if (*version != 1) fail(path, kVersion, " is ", *version, " (this bonsai reads 1)");
    s.manifest_json = ts.meta.get_str(kManifest).value_or("");
    names = ts.meta.get_strings(kWeights).value_or(std::vector<std::string>{});
    rows = ts.meta.get_ints(kRows).value_or(std::vector<int64_t>{});
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.starts_with(path + ":")) throw;
    fail(path, what);
  }
  if (names.size() != rows.size())
    fail(path, kWeights, " lists ", names.size(), " weights but ", kRows, " has ", rows.size(), " counts");
  std::set<std::string> expected;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (name.empty()) fail(path, "an empty weight name in ", kWeights);
    if (s.by_weight.count(name)) fail(path, "weight '", name, "' is listed twice");
    if (rows[i] <= 0) fail(path, "weight '", name, "' has ", rows[i], " rows (must be positive)");
    const Tensor* sq = ts.find(name + kSumSq);
    if (!sq) fail(path, "tensor '", name, kSumSq, "' is missing");
    if (sq->type != TypeId::F32 || sq->ne.size() != 1)
      fail(path, "tensor '", sq->name, "' must be a 1-D F32 tensor, is ", traits(sq->type).name, " ", sq->shape_str());
    InputStats st;
    st.cols = sq->ne[0];
    st.rows_seen = rows[i];
    st.sum_sq.resize(size_t(st.cols));
    for (int64_t c = 0; c < st.cols; ++c) {
      const float v = f32_at(sq->data, c);
      if (!std::isfinite(v) || v < 0) fail(path, "tensor '", sq->name, "' holds ", v, " at column ", c);
      st.sum_sq[size_t(c)] = v;
    }
    expected.insert(sq->name);
    if (const Tensor* g = ts.find(name + kGram)) {
      if (g->type != TypeId::F32 || g->ne != std::vector<int64_t>{st.cols, st.cols})
        fail(path, "tensor '", g->name, "' must be F32 [", st.cols, ", ", st.cols, "], is ", traits(g->type).name, " ",
             g->shape_str());
      st.gram.resize(size_t(st.cols * st.cols));
      for (int64_t k = 0; k < st.cols * st.cols; ++k) {
        const float v = f32_at(g->data, k);
        if (!std::isfinite(v)) fail(path, "tensor '", g->name, "' holds a non-finite value");
        st.gram[size_t(k)] = v;
      }
      expected.insert(g->name);
    }
    s.by_weight.emplace(name, std::move(st));
  }
  for (const Tensor& t : ts.tensors)
    if (!expected.count(t.name)) fail(path, "tensor '", t.name, "' belongs to no weight listed in ", kWeights);
  return s;
}

}  // namespace bonsai::calib
