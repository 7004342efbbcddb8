// Activation statistics for calibration: for every matrix product's input, the per-column mean of
// x² (as llama.cpp's imatrix) and, when asked, the Gram matrix E[x xᵀ]. Several weights reading the
// same input (q/k/v, gate/up) share one entry, keyed by the first weight's name.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bonsai::calib {

struct InputStats {
  int64_t cols = 0;
  int64_t rows_seen = 0;           // tokens accumulated
  std::vector<double> sum_sq;      // cols
  std::vector<double> gram;        // cols × cols (sum of x xᵀ), empty unless collected

  void add(const float* x, int64_t n);  // n rows of cols
  std::vector<float> mean_sq() const;   // E[x²]
  std::vector<double> mean_gram() const;  // E[x xᵀ]
};

struct Stats {
  std::map<std::string, InputStats> by_weight;  // weight name -> statistics of its input
  std::string manifest_json;                    // what was measured: model, corpus, windows, seed
};

void save_stats(const std::string& path, const Stats& s);  // a GGUF file of F32/F64-as-F32 tensors
Stats load_stats(const std::string& path);                 // Error naming the file when malformed

}  // namespace bonsai::calib
