#include "calibrate/stats.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include "formats/error.h"
#include "formats/gguf.h"
#include "formats/mapped_file.h"

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

namespace {

// One weight's statistics as the file stores them: F32 sums, in memory or in another file's map.
struct StoredEntry {
  std::string name;
  int64_t rows = 0;
  Tensor sum_sq;
  std::optional<Tensor> gram;
};

// The one writer of the layout: entries in name order, each its sum_sq then its Gram matrix.
void write_entries(const std::string& path, const std::string& manifest_json, const std::vector<StoredEntry>& entries) {
  Metadata meta;
  meta.set_u32(kVersion, 1);
  meta.set_str(kManifest, manifest_json);
  std::vector<std::string> names;
  std::vector<KvScalar> rows;
  std::vector<Tensor> tensors;
  for (const StoredEntry& e : entries) {
    names.push_back(e.name);
    rows.emplace_back(uint64_t(e.rows));
    tensors.push_back(e.sum_sq);
    if (e.gram) tensors.push_back(*e.gram);
  }
  meta.set_strings(kWeights, names);
  meta.set(kRows, KvValue::of_array(KvType::U64, std::move(rows)));
  write_gguf(path, meta, tensors);
}

}  // namespace

void save_stats(const std::string& path, const Stats& s) {
  TensorSet owner;
  owner.path = path;
  std::vector<StoredEntry> entries;
  for (const auto& [name, st] : s.by_weight) {
    if (st.cols <= 0 || int64_t(st.sum_sq.size()) != st.cols)
      fail(path, "statistics of '", name, "' have ", st.sum_sq.size(), " column sums for ", st.cols, " columns");
    auto put = [&](const std::string& tname, const std::vector<double>& v, std::vector<int64_t> ne) {
      Tensor t;
      t.name = tname;
      t.type = TypeId::F32;
      t.ne = std::move(ne);
      t.nbytes = v.size() * sizeof(float);
      float* d = reinterpret_cast<float*>(owner.alloc(t.nbytes));
      for (size_t i = 0; i < v.size(); ++i) d[i] = float(v[i]);
      t.data = reinterpret_cast<const uint8_t*>(d);
      return t;
    };
    StoredEntry e;
    e.name = name;
    e.rows = st.rows_seen;
    e.sum_sq = put(name + kSumSq, st.sum_sq, {st.cols});
    if (!st.gram.empty()) {
      if (int64_t(st.gram.size()) != st.cols * st.cols)
        fail(path, "statistics of '", name, "' have a Gram matrix of ", st.gram.size(), " entries for ", st.cols, " columns");
      e.gram = put(name + kGram, st.gram, {st.cols, st.cols});
    }
    entries.push_back(std::move(e));
  }
  write_entries(path, s.manifest_json, entries);
}

StatsFile::StatsFile(const std::string& path) : ts_(read_gguf(path)) {
  std::vector<int64_t> rows;
  try {
    const auto version = ts_.meta.get_int(kVersion);
    if (!version) fail(path, "not a bonsai statistics file (no ", kVersion, ")");
    if (*version != 1) fail(path, kVersion, " is ", *version, " (this bonsai reads 1)");
    manifest_ = ts_.meta.get_str(kManifest).value_or("");
    order_ = ts_.meta.get_strings(kWeights).value_or(std::vector<std::string>{});
    rows = ts_.meta.get_ints(kRows).value_or(std::vector<int64_t>{});
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.starts_with(path + ":")) throw;
    fail(path, what);
  }
  if (order_.size() != rows.size())
    fail(path, kWeights, " lists ", order_.size(), " weights but ", kRows, " has ", rows.size(), " counts");
  std::set<std::string> expected;
  for (size_t i = 0; i < order_.size(); ++i) {
    const std::string& name = order_[i];
    if (name.empty()) fail(path, "an empty weight name in ", kWeights);
    if (entries_.count(name)) fail(path, "weight '", name, "' is listed twice");
    if (rows[i] <= 0) fail(path, "weight '", name, "' has ", rows[i], " rows (must be positive)");
    Entry e;
    e.sum_sq = ts_.find(name + kSumSq);
    if (!e.sum_sq) fail(path, "tensor '", name, kSumSq, "' is missing");
    if (e.sum_sq->type != TypeId::F32 || e.sum_sq->ne.size() != 1)
      fail(path, "tensor '", e.sum_sq->name, "' must be a 1-D F32 tensor, is ", traits(e.sum_sq->type).name, " ",
           e.sum_sq->shape_str());
    e.shape.cols = e.sum_sq->ne[0];
    e.shape.rows_seen = rows[i];
    expected.insert(e.sum_sq->name);
    if ((e.gram = ts_.find(name + kGram))) {
      if (e.gram->type != TypeId::F32 || e.gram->ne != std::vector<int64_t>{e.shape.cols, e.shape.cols})
        fail(path, "tensor '", e.gram->name, "' must be F32 [", e.shape.cols, ", ", e.shape.cols, "], is ",
             traits(e.gram->type).name, " ", e.gram->shape_str());
      expected.insert(e.gram->name);
    }
    entries_.emplace(name, e);
  }
  for (const Tensor& t : ts_.tensors)
    if (!expected.count(t.name)) fail(path, "tensor '", t.name, "' belongs to no weight listed in ", kWeights);
}

std::vector<std::string> StatsFile::weights() const { return order_; }

const InputStats* StatsFile::find(const std::string& weight) const {
  const auto it = entries_.find(weight);
  return it == entries_.end() ? nullptr : &it->second.shape;
}

bool StatsFile::has_gram(const std::string& weight) const {
  const auto it = entries_.find(weight);
  return it != entries_.end() && it->second.gram;
}

InputStats StatsFile::load(const std::string& weight) const {
  const auto it = entries_.find(weight);
  if (it == entries_.end()) fail(path(), "no statistics for the input of '", weight, "'");
  const Entry& e = it->second;
  InputStats st = e.shape;
  st.sum_sq.resize(size_t(st.cols));
  for (int64_t c = 0; c < st.cols; ++c) {
    const float v = f32_at(e.sum_sq->data, c);
    if (!std::isfinite(v) || v < 0) fail(path(), "tensor '", e.sum_sq->name, "' holds ", v, " at column ", c);
    st.sum_sq[size_t(c)] = v;
  }
  if (e.gram) {
    st.gram.resize(size_t(st.cols * st.cols));
    for (int64_t k = 0; k < st.cols * st.cols; ++k) {
      const float v = f32_at(e.gram->data, k);
      if (!std::isfinite(v)) fail(path(), "tensor '", e.gram->name, "' holds a non-finite value");
      st.gram[size_t(k)] = v;
    }
    MappedFile::release(e.gram->data, e.gram->nbytes);  // copied: the file's pages may go
  }
  return st;
}

Stats load_stats(const std::string& path) {
  const StatsFile f(path);
  Stats s;
  s.manifest_json = f.manifest_json();
  for (const std::string& name : f.weights()) s.by_weight.emplace(name, f.load(name));
  return s;
}

void merge_stats(const std::string& path, const std::string& manifest_json, const std::vector<std::string>& parts) {
  std::vector<StatsFile> files;
  files.reserve(parts.size());
  std::map<std::string, StoredEntry> all;  // by name: save_stats's order
  for (const std::string& p : parts) {
    const StatsFile& f = files.emplace_back(p);
    for (const auto& [name, e] : f.entries_) {
      StoredEntry s;
      s.name = name;
      s.rows = e.shape.rows_seen;
      s.sum_sq = *e.sum_sq;
      if (e.gram) s.gram = *e.gram;
      if (!all.emplace(name, std::move(s)).second) fail(p, "weight '", name, "' is also in another part");
    }
  }
  std::vector<StoredEntry> entries;
  for (auto& [name, e] : all) entries.push_back(std::move(e));
  write_entries(path, manifest_json, entries);
}

}  // namespace bonsai::calib
