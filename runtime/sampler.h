// Next-token sampling as llama.cpp's common sampler chain orders it: repetition penalty, top-k,
// top-p, min-p, temperature, then a seeded draw. Temperature 0 is greedy (argmax).
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace bonsai {

struct SamplerOptions {
  float temp = 0.8f;
  int top_k = 40;          // 0: off
  float top_p = 0.95f;     // 1: off
  float min_p = 0.05f;     // 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o);
  // Picks the next token from one row of logits; remembers it for the repetition penalty.
  int32_t sample(const float* logits, int64_t n_vocab);
  void accept(int32_t token);  // prompt tokens count for the repetition penalty too

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
};

}  // namespace bonsai
