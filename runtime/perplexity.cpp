#include "runtime/perplexity.h"

#include <chrono>
#include <cmath>

#include "formats/error.h"
#include "runtime/cpu/ops.h"
#include "runtime/cpu/parallel.h"
#include "runtime/transformer.h"

namespace bonsai {

int64_t perplexity_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  const int64_t all = n_tokens / n_ctx;
  return max_chunks < 0 ? all : std::min(all, max_chunks);
}

PerplexityResult perplexity(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opts, const std::string& source,
                            const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t n_ctx = opts.n_ctx;
  if (n_ctx < 4 || n_ctx % 2) fail(source, "context size ", n_ctx, " must be an even number >= 4");
  const int64_t n_tok = int64_t(tokens.size());
  if (n_tok < 2 * n_ctx)
    fail(source, "the text has ", n_tok, " tokens; perplexity with --ctx ", n_ctx, " needs at least ", 2 * n_ctx,
         " (two contexts)");
  const int64_t chunks = perplexity_chunks(n_tok, n_ctx, opts.max_chunks);
  const int64_t first = n_ctx / 2, n_vocab = model.cfg.n_vocab;

  PerplexityResult r;
  r.tokens = n_tok;
  r.n_ctx = n_ctx;
  Session s(model, backend, n_ctx, n_ctx);
  std::vector<float> logits(size_t((n_ctx - first) * n_vocab));
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  std::vector<double> log_z(static_cast<size_t>(n_ctx)), row_lse(static_cast<size_t>(n_ctx));
  std::vector<float> row_max(static_cast<size_t>(n_ctx));
  double s1 = 0, s2 = 0;
  int64_t count = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx, chunk.begin());
    if (opts.add_bos) chunk[0] = opts.bos;
    s.reset();
    s.eval(chunk.data(), n_ctx, first, logits.data());
    // The log-softmax normaliser of every scored row on every thread (a 152k vocabulary makes it
    // a tenth of a small model's chunk), then the sums in order.
    const int64_t rows = n_ctx - first - 1;
    cpu::parallel_for(rows, rows > 1, [&](int64_t i) {
      float mx = 0;
      double lse = 0;
      cpu::logsumexp(logits.data() + i * n_vocab, n_vocab, &mx, &lse);
      row_max[size_t(i)] = mx, row_lse[size_t(i)] = lse, log_z[size_t(i)] = double(mx) + lse;
    });
    double chunk_sum = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float l_next = logits[size_t(i * n_vocab + chunk[size_t(first + i + 1)])];
      const double nll = row_lse[size_t(i)] - double(l_next - row_max[size_t(i)]);
      s1 += nll;
      s2 += nll * nll;
      chunk_sum += nll;
      ++count;
    }
    if (opts.on_rows) opts.on_rows(logits.data(), log_z.data(), chunk.data() + first + 1, rows);
    r.chunk_nll.push_back(chunk_sum / double(n_ctx - first - 1));
    if (on_chunk) on_chunk(c, std::exp(s1 / double(count)));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.chunks = chunks;
  r.tokens_scored = count;
  r.mean_nll = s1 / double(count);
  r.ppl = std::exp(r.mean_nll);
  const double var = s2 / double(count) - r.mean_nll * r.mean_nll;
  r.ppl_err = count > 1 ? r.ppl * std::sqrt(std::max(var, 0.0) / double(count - 1)) : 0.0;
  return r;
}

}  // namespace bonsai
