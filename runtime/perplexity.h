// Perplexity exactly as llama-perplexity computes it (shared/specs/formats.md §4): independent
// chunks of n_ctx tokens, the first token of each replaced by BOS when the vocabulary adds one,
// only the second half of each chunk scored, PPL = exp(mean NLL) ± llama.cpp's error estimate.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/model.h"

namespace bonsai {

struct PerplexityOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = -1;  // -1: every whole chunk
  bool add_bos = false;     // replace each chunk's first token by bos
  int32_t bos = -1;
  // Called once a chunk with its n scored positions, in order: their logits (n rows of n_vocab
  // floats), log_z (log p_v = logits[v] - log_z) and the tokens that follow (KL divergence
  // against a base model reads them: runtime/kld.h).
  std::function<void(const float* logits, const double* log_z, const int32_t* next, int64_t n)> on_rows;
};

struct PerplexityResult {
  double ppl = 0, ppl_err = 0, mean_nll = 0;
  int64_t tokens = 0, tokens_scored = 0, n_ctx = 0, chunks = 0;
  double seconds = 0;
  std::vector<double> chunk_nll;  // mean NLL of each chunk
};

// The chunks perplexity() measures of a text of n_tokens: every whole chunk, at most max_chunks
// (-1: no limit); each scores scored_per_chunk(n_ctx) positions.
int64_t perplexity_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks);
inline int64_t scored_per_chunk(int64_t n_ctx) { return n_ctx - n_ctx / 2 - 1; }

// `tokens` is the whole text tokenized once (with BOS first when add_bos). `source` names the
// text in errors. on_chunk(i, running ppl) is called after every chunk.
PerplexityResult perplexity(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opts, const std::string& source,
                            const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace bonsai
