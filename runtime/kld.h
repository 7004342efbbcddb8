// KL divergence of a model's next-token distributions against a base model's, on the same
// perplexity chunks (as llama-perplexity --kl-divergence-base does). The base run saves, for every
// scored position, its top-k log-probabilities, the log-probability of the token that follows,
// and the log of the rest of the mass; the other run compares its own distributions with them.
//
// What the reduction costs: with the base's top-k classes kept and the others merged into one
// "rest" class, the KLD computed is that of the two coarsened distributions,
//   KLD_k = sum_{v in top-k} p_v log(p_v/q_v) + p_rest log(p_rest/q_rest),
// and the full KLD exceeds it by exactly p_rest * KL(P_tail || Q_tail) >= 0 (the chain rule), so
// KLD_k is a lower bound, equal to the full KLD when k covers the vocabulary. The mean p_rest is
// reported with the result so the size of the unseen tail is always known.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/perplexity.h"

namespace bonsai {

// One scored position of the base run.
struct BaseDist {
  std::vector<int32_t> ids;   // top-k token ids, most probable first
  std::vector<float> logp;    // their log-probabilities
  float logp_rest = 0;        // log(1 - sum of their probabilities); -inf when k covers all
  int32_t next = 0;           // the token that follows
  float logp_next = 0;        // its log-probability
};

struct KldHeader {
  int64_t n_vocab = 0, n_ctx = 0, chunks = 0, k = 0;
  uint64_t tokens_hash = 0;  // XXH3 of the token ids: the same text, tokenized the same way
};

// The base's side: top-k of log-softmax(logits) (n_vocab floats) and the next token's entry.
BaseDist reduce_logits(const float* logits, int64_t n_vocab, int64_t k, int32_t next);

// Writes / reads a .kld file (atomically; every read checked, errors name the file).
void write_kld(const std::string& path, const KldHeader& h, const std::vector<BaseDist>& dists);
std::vector<BaseDist> read_kld(const std::string& path, KldHeader* h);

// Error naming `path` (the base's file) when its header does not fit this run's (`run`: n_vocab,
// n_ctx, tokens_hash): another vocabulary, context size or text.
void check_kld_base(const std::string& path, const KldHeader& base, const KldHeader& run);

uint64_t hash_tokens(const std::vector<int32_t>& tokens);

struct KldResult {
  int64_t n = 0;
  double mean = 0, mean_err = 0, median = 0, p99 = 0, max = 0;
  double top1_agree = 0;                   // share of positions where both argmaxes agree
  double dp_mean = 0, dp_rms = 0;          // Δp = q(next) - p(next)
  double mean_rest = 0;                    // mean base mass outside the top-k
};

// Accumulates positions; result() summarises.
class KldAccumulator {
 public:
  // base: the stored distribution of this position; logits: this model's, n_vocab floats.
  void add(const BaseDist& base, const float* logits, int64_t n_vocab);
  KldResult result() const;

 private:
  std::vector<double> kld_, dp_;
  int64_t agree_ = 0;
  double rest_ = 0;
};

// Perplexity with the KL side wired in: save_k > 0 keeps every scored position's top save_k
// distribution in `saved` (the base run); `base` non-null compares each position with the base's
// (Error naming `base_name` when the base holds fewer positions than this run scores).
struct KldRun {
  PerplexityResult ppl;
  std::vector<BaseDist> saved;
  KldResult kld;  // empty unless `base` was given
};
KldRun perplexity_kld(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                      const PerplexityOptions& po, const std::string& source, int64_t save_k,
                      const std::vector<BaseDist>* base, const std::string& base_name,
                      const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace bonsai
