#include "runtime/sampler.h"

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <numeric>

namespace bonsai {

Sampler::Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) {}

void Sampler::accept(int32_t token) {
  recent_.push_back(token);
  while (int(recent_.size()) > o_.repeat_last_n) recent_.pop_front();
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  std::vector<float> l(logits, logits + n_vocab);
  if (o_.repeat_penalty != 1.0f)
    for (int32_t t : recent_)  // as llama.cpp: divide positive logits, multiply negative ones
      l[size_t(t)] = l[size_t(t)] > 0 ? l[size_t(t)] / o_.repeat_penalty : l[size_t(t)] * o_.repeat_penalty;
  int32_t tok;
  if (o_.temp <= 0.0f) {
    tok = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
  } else {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    size_t k = o_.top_k > 0 ? std::min<size_t>(size_t(o_.top_k), idx.size()) : idx.size();
    std::partial_sort(idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(),
                      [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    idx.resize(k);
    // Probabilities at temperature 1 for top-p / min-p, as llama.cpp applies them before temp.
    std::vector<double> p(k);
    const double mx = l[size_t(idx[0])];
    double sum = 0;
    for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp(double(l[size_t(idx[i])]) - mx);
    size_t keep = k;
    if (o_.top_p < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < k; ++i) {
        cum += p[i] / sum;
        if (cum >= o_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (o_.min_p > 0.0f)
      while (keep > 1 && p[keep - 1] < o_.min_p * p[0]) --keep;
    std::vector<double> w(keep);
    for (size_t i = 0; i < keep; ++i) w[i] = std::exp((double(l[size_t(idx[i])]) - mx) / o_.temp);
    std::discrete_distribution<size_t> dist(w.begin(), w.end());
    tok = idx[dist(rng_)];
  }
  accept(tok);
  return tok;
}

}  // namespace bonsai
