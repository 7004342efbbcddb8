// Activation statistics for calibration: for every matrix product's input, the per-column mean of
// x² (as llama.cpp's imatrix) and, when asked, the Gram matrix E[x xᵀ]. Several weights reading the
// same input (q/k/v, gate/up) share one entry, keyed by the first weight's name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/tensor_set.h"

namespace bonsai::calib {

// Rows per float Gram product before it is folded into the double sum (InputStats::add): float
// keeps the product fast, the periodic double accumulation keeps 10⁵+ rows exact enough. Callers
// that feed rows in small batches gather this many first (calibrate/runner.cpp). Each fold is a
// pass over cols² doubles, 16 per input of a 128 × 512 calibration at 4,096 rows.
constexpr int64_t kGramRows = 16384;

struct InputStats {
  int64_t cols = 0;
  int64_t rows_seen = 0;           // tokens accumulated
  std::vector<double> sum_sq;      // cols
  std::vector<double> gram;        // cols × cols (sum of x xᵀ), empty unless collected

  // n rows of cols. sum_sq is sized on first use; the Gram matrix is accumulated only when `gram`
  // was sized cols × cols beforehand (collecting it is the caller's choice: gptq needs it).
  void add(const float* x, int64_t n);  // n rows of cols
  // Rounds the sums to float precision — what save_stats stores — so quantizing from statistics
  // just measured and from the same statistics loaded back gives identical bytes.
  void round_to_f32();
  std::vector<float> mean_sq() const;   // E[x²]
  std::vector<double> mean_gram() const;  // E[x xᵀ]
};

struct Stats {
  std::map<std::string, InputStats> by_weight;  // weight name -> statistics of its input
  std::string manifest_json;                    // what was measured: model, corpus, windows, seed
};

// A GGUF file: tensors `<weight>.in_sum_sq` [cols] and `<weight>.in_gram` [cols, cols] (F32 sums),
// keys bonsai.calib.version (1), bonsai.calib.manifest (JSON), bonsai.calib.weights (names) and
// bonsai.calib.rows (rows accumulated per weight, same order).
void save_stats(const std::string& path, const Stats& s);
Stats load_stats(const std::string& path);                 // Error naming the file when malformed

// A statistics file read one weight at a time: a real model's Gram matrices are tens of GB
// (Qwen3-8B: 1.6 GB a block), more than memory holds at once. Opening checks the whole layout
// (keys, names, counts, tensor types and shapes, no stray tensors); load() checks the values it
// reads, and gives the file's pages back once they are copied. load_stats reads them all.
class StatsFile {
 public:
  explicit StatsFile(const std::string& path);  // Error naming the file when malformed
  const std::string& path() const { return ts_.path; }
  const std::string& manifest_json() const { return manifest_; }
  std::vector<std::string> weights() const;  // in the file's order
  const InputStats* find(const std::string& weight) const;  // cols and rows_seen only; null when absent
  bool has_gram(const std::string& weight) const;
  InputStats load(const std::string& weight) const;  // Error naming the file when absent or malformed

 private:
  friend void merge_stats(const std::string&, const std::string&, const std::vector<std::string>&);
  struct Entry {
    InputStats shape;  // cols, rows_seen
    const Tensor* sum_sq = nullptr;
    const Tensor* gram = nullptr;
  };
  TensorSet ts_;
  std::string manifest_;
  std::vector<std::string> order_;
  std::map<std::string, Entry> entries_;
};

// Writes the union of several statistics files of disjoint weights (a job's per-block files) as
// one, byte for byte what save_stats writes for the union, with `manifest_json`; the parts'
// values are copied from their maps, never all in memory at once.
void merge_stats(const std::string& path, const std::string& manifest_json, const std::vector<std::string>& parts);

}  // namespace bonsai::calib
