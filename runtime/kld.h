// KL divergence of a model's next-token distributions against a base model's, on the same
// perplexity chunks (as llama-perplexity --kl-divergence-base does), and the paired difference of
// the two perplexities over the same tokens.
//
// The base run records, for every scored position, the log-probability of the token that follows
// and its distribution in one of two layouts:
// - every token (k = 0, the default): log p_v = lmax - code_v * step in 16 bits, step = (lmax -
//   lmin) / 65535 with lmin clamped to lmax - 64 (tokens below it are stored at lmax - 64: their
//   mass, under n_vocab * e^-64 (1e-23 for 152k tokens), is left out of the bound below). Each
//   stored log-probability is within delta = step / 2 of the exact one, so after renormalising within
//   2 delta, and the KLD computed, sum_v p^_v (log p^_v - log q_v), is within
//     eps * e^(2 delta) * (S + 2 delta) + eps^2,   eps = e^(2 delta) - 1,   S = sum_v p^_v |log p^_v - log q_v|
//   of the exact one at that position (the first term bounds sum (p^ - p)(log p - log q), the
//   second KL(P^ || P) through its chi-square bound). Every run reports the mean of that bound.
// - the top k tokens, the rest merged into one class: the KLD computed is that of the two
//   coarsened distributions, and the full KLD exceeds it by exactly p_rest * KL(P_tail || Q_tail)
//   >= 0 (the chain rule): a lower bound, reported with the mean merged mass. For vocabularies
//   too big for two bytes a token at every position.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/perplexity.h"

namespace bonsai {

class MappedFile;

struct KldHeader {
  int64_t n_vocab = 0, n_ctx = 0;
  int64_t chunks = 0;     // the chunks the base run measured (a comparison measures as many)
  int64_t kl_chunks = 0;  // the first chunks whose positions are stored (<= chunks)
  int64_t k = 0;          // 0: every token's log-probability in 16 bits; else the top k, the rest merged
  uint64_t tokens_hash = 0;  // XXH3 of the token ids: the same text, tokenized the same way
};

// One stored position (pointers into its KldBase).
struct BaseView {
  int32_t next = 0;      // the token that follows
  float logp_next = 0;   // its log-probability, exact to float
  // k > 0: the top k, most probable first, and log(1 - their mass) (-inf when k covers all)
  int64_t k = 0;
  const int32_t* ids = nullptr;
  const float* logp = nullptr;
  float logp_rest = 0;
  // k == 0: log p_v ~= lmax - code[v] * step for every token v
  const uint16_t* code = nullptr;
  float lmax = 0, step = 0;
};

// A base's positions in the .kld layout, mapped from a file or built in memory by a KldRecorder:
// the distributions of the first kl_chunks chunks' positions, then the right token's
// log-probability at every position of all its chunks (for the paired perplexity difference).
class KldBase {
 public:
  KldBase() = default;
  // Reads and checks a .kld file (errors name it): header, size, token ids.
  static KldBase open(const std::string& path);
  const KldHeader& header() const { return h_; }
  const std::string& name() const { return name_; }
  int64_t positions() const { return n_; }           // with a distribution
  int64_t all_positions() const { return n_all_; }   // with the right token's log-probability
  BaseView at(int64_t i) const;                      // i < positions()
  float logp_next(int64_t i) const;                  // i < all_positions()
  double mean_rest_mass() const;  // the mean merged mass (0 in the every-token layout)
  // Error naming this base when its header does not fit this run's (`run`: n_vocab, n_ctx,
  // tokens_hash): another vocabulary, context size or text.
  void check_fits(const KldHeader& run) const;

 private:
  friend class KldRecorder;
  KldHeader h_;
  std::string name_;
  std::shared_ptr<const MappedFile> map_;
  std::vector<uint8_t> own_;
  const uint8_t* records_ = nullptr;
  const uint8_t* nll_ = nullptr;
  uint64_t per_ = 0;
  int64_t n_ = 0, n_all_ = 0;
};

// Bytes of one stored position in the layout of k (0: every token) for a vocabulary of n_vocab.
uint64_t kld_record_bytes(int64_t n_vocab, int64_t k);
// The bytes of a .kld file holding `positions` distributions of `all` scored positions.
uint64_t kld_file_bytes(int64_t n_vocab, int64_t k, int64_t positions, int64_t all);

// The bytes of the base file a run of `chunks` chunks at h.n_ctx records, keeping the
// distributions of the first kl_chunks (-1: all): for a refusal before the run, not after it.
uint64_t kld_base_bytes(const KldHeader& h, int64_t chunks, int64_t kl_chunks);
// The chunks whose distributions a base keeps: kl_chunks (-1: all) of `chunks`.
inline int64_t kld_kept_chunks(int64_t chunks, int64_t kl_chunks) { return kl_chunks < 0 ? chunks : std::min(chunks, kl_chunks); }

// Records a base run position by position: into a file (streamed, committed atomically by
// finish()) or, with an empty path, into memory.
class KldRecorder {
 public:
  KldRecorder(const KldHeader& h, const std::string& path);
  ~KldRecorder();
  // Every scored position in order (logits: n_vocab floats); with_dist: store its distribution.
  void add(const float* logits, double log_z, int32_t next, bool with_dist);
  // n consecutive positions (n rows of logits, their log_z and next tokens), the first with_dist
  // with their distributions; encoded on every thread, written in order.
  void add_rows(const float* logits, const double* log_z, const int32_t* next, int64_t n, int64_t with_dist);
  // Sets the chunk counts, commits the file, and returns the base (mapped from the file).
  KldBase finish(int64_t chunks, int64_t kl_chunks);

 private:
  KldHeader h_;
  std::string path_;
  struct Sink;
  std::unique_ptr<Sink> sink_;
  std::vector<uint8_t> rec_;
  std::vector<float> logp_next_;
  int64_t n_ = 0;
};

uint64_t hash_tokens(const std::vector<int32_t>& tokens);

struct KldResult {
  int64_t n = 0;
  double mean = 0, mean_err = 0, median = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
  double top1_agree = 0;                   // share of positions where both argmaxes agree
  double dp_mean = 0, dp_rms = 0;          // Δp = q(next) - p(next)
  double mean_rest = 0;                    // mean base mass outside the top-k (top-k layout)
  double rounding_bound = 0;               // mean bound of the 16-bit rounding's effect (every-token layout)
  // The two perplexities over these positions and their paired difference: d_i = nll_Q,i -
  // nll_base,i on the same tokens, so Var(mean d) = (Var nll_Q + Var nll_base - 2 Cov) / n.
  int64_t paired_n = 0;
  double ppl_base = 0, ppl = 0;
  double dlnppl = 0, dlnppl_err = 0;       // mean ln(PPL(Q)/PPL(base)) = mean d
  double dppl = 0, dppl_err = 0;           // PPL(Q) - PPL(base), its error by the delta method
  double dppl_err_unpaired = 0;            // what the error would be were the two runs independent
  double nll_correlation = 0;              // Cor(nll_Q, nll_base) over positions
};

// Accumulates positions; result() summarises.
class KldAccumulator {
 public:
  // base: the stored position; logits: this model's, n_vocab floats, log q_v = logits[v] - log_z.
  void add(const BaseView& base, const float* logits, double log_z, int64_t n_vocab);
  // One position of the paired difference: the base's and this model's log-probability of the
  // right token (this model's rounded to float as the base's was: 0 for the same model).
  void add_pair(double logp_base, double logp);
  // n consecutive positions from the base's position `at`: the KLD of those the base holds a
  // distribution for, the paired difference of those it holds a log-probability for. Measured on
  // every thread, summed in order (the same result as add() a position at a time).
  void add_rows(const KldBase& base, int64_t at, const float* logits, const double* log_z, const int32_t* next,
                int64_t n, int64_t n_vocab);
  KldResult result() const;

 private:
  struct Row {
    double kld = 0, dp = 0, rest = 0, bound = 0;
    bool agree = false;
  };
  static Row measure(const BaseView& base, const float* logits, double log_z, int64_t n_vocab);
  void push(const Row& r);
  std::vector<double> kld_, dp_, p_;
  int64_t agree_ = 0, paired_ = 0;
  double rest_ = 0, bound_ = 0;
  double sp_ = 0, sq_ = 0, spp_ = 0, sqq_ = 0, spq_ = 0;  // nll sums: base (p), this model (q)
};

// Perplexity with the KL side wired in: `save` non-null records every position, with its
// distribution in the first save_chunks chunks (-1: all), for a later comparison; `base` non-null
// compares the run with it: the paired difference over base->all_positions(), the KLD over
// base->positions().
struct KldRun {
  PerplexityResult ppl;
  KldResult kld;  // empty unless `base` was given
};
KldRun perplexity_kld(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                      const PerplexityOptions& po, const std::string& source, KldRecorder* save,
                      int64_t save_chunks, const KldBase* base,
                      const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace bonsai
