#include "runtime/kld.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "formats/atomic_file.h"
#include "formats/error.h"
#include "formats/mapped_file.h"

namespace bonsai {

namespace {

constexpr char kMagic[8] = {'B', 'O', 'N', 'S', 'K', 'L', 'D', '1'};

// log-softmax in double: the max, and log of the sum of exp(l - max).
void log_softmax_terms(const float* l, int64_t n, double* mx, double* lse) {
  float m = l[0];
  for (int64_t v = 1; v < n; ++v) m = std::max(m, l[v]);
  double s = 0;
  for (int64_t v = 0; v < n; ++v) s += std::exp(double(l[v]) - m);
  *mx = m;
  *lse = std::log(s);
}

}  // namespace

BaseDist reduce_logits(const float* logits, int64_t n_vocab, int64_t k, int32_t next) {
  double mx = 0, lse = 0;
  log_softmax_terms(logits, n_vocab, &mx, &lse);
  k = std::min(k, n_vocab);
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  BaseDist d;
  double kept = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double lp = double(logits[idx[size_t(i)]]) - mx - lse;
    d.ids.push_back(idx[size_t(i)]);
    d.logp.push_back(float(lp));
    kept += std::exp(lp);
  }
  const double rest = 1.0 - kept;
  d.logp_rest = k == n_vocab || rest <= 0 ? -std::numeric_limits<float>::infinity() : float(std::log(rest));
  d.next = next;
  d.logp_next = float(double(logits[next]) - mx - lse);
  return d;
}

void check_kld_base(const std::string& path, const KldHeader& bh, const KldHeader& kh) {
  if (bh.n_vocab != kh.n_vocab) fail(path, "was saved with a vocabulary of ", bh.n_vocab, "; this model has ", kh.n_vocab);
  if (bh.n_ctx != kh.n_ctx) fail(path, "was saved with --ctx ", bh.n_ctx, "; this run uses ", kh.n_ctx);
  if (bh.tokens_hash != kh.tokens_hash) fail(path, "was saved on another text (or another tokenization of it)");
}

uint64_t hash_tokens(const std::vector<int32_t>& t) { return XXH3_64bits(t.data(), t.size() * sizeof(int32_t)); }

void write_kld(const std::string& path, const KldHeader& h, const std::vector<BaseDist>& dists) {
  AtomicFile f(path);
  f.write(kMagic, sizeof kMagic);
  const int64_t n = int64_t(dists.size());
  for (int64_t v : {h.n_vocab, h.n_ctx, h.chunks, h.k, n}) f.write(&v, sizeof v);
  f.write(&h.tokens_hash, sizeof h.tokens_hash);
  for (const BaseDist& d : dists) {
    if (int64_t(d.ids.size()) != h.k) throw Error(cat(path, ": every position must keep ", h.k, " tokens"));
    f.write(d.ids.data(), d.ids.size() * sizeof(int32_t));
    f.write(d.logp.data(), d.logp.size() * sizeof(float));
    f.write(&d.logp_rest, sizeof(float));
    f.write(&d.next, sizeof(int32_t));
    f.write(&d.logp_next, sizeof(float));
  }
  f.commit();
}

std::vector<BaseDist> read_kld(const std::string& path, KldHeader* h) {
  const auto m = MappedFile::open(path);
  const uint8_t* p = m->data();
  const uint64_t size = m->size();
  constexpr uint64_t head = sizeof kMagic + 5 * 8 + 8;
  if (size < head || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(path, "not a bonsai logits file (made by bonsai perplexity --save-logits)");
  int64_t v[5];
  std::memcpy(v, p + sizeof kMagic, sizeof v);
  h->n_vocab = v[0], h->n_ctx = v[1], h->chunks = v[2], h->k = v[3];
  const int64_t n = v[4];
  std::memcpy(&h->tokens_hash, p + sizeof kMagic + sizeof v, 8);
  if (h->n_vocab <= 0 || h->k <= 0 || h->k > h->n_vocab || n < 0 || h->n_ctx <= 0 || h->chunks < 0)
    fail(path, "header holds impossible sizes (vocabulary ", h->n_vocab, ", k ", h->k, ", positions ", n, ")");
  const uint64_t per = uint64_t(h->k) * 8 + 12;
  if (uint64_t(n) > (size - head) / per || head + uint64_t(n) * per != size)
    fail(path, "is ", size, " bytes; its header promises ", n, " positions of ", per, " bytes");
  std::vector<BaseDist> out(static_cast<size_t>(n));
  const uint8_t* q = p + head;
  for (BaseDist& d : out) {
    d.ids.resize(size_t(h->k));
    d.logp.resize(size_t(h->k));
    std::memcpy(d.ids.data(), q, size_t(h->k) * 4);
    std::memcpy(d.logp.data(), q + h->k * 4, size_t(h->k) * 4);
    std::memcpy(&d.logp_rest, q + h->k * 8, 4);
    std::memcpy(&d.next, q + h->k * 8 + 4, 4);
    std::memcpy(&d.logp_next, q + h->k * 8 + 8, 4);
    q += per;
    for (int32_t id : d.ids)
      if (id < 0 || id >= h->n_vocab) fail(path, "token id ", id, " is outside the vocabulary (", h->n_vocab, ")");
    if (d.next < 0 || d.next >= h->n_vocab) fail(path, "token id ", d.next, " is outside the vocabulary (", h->n_vocab, ")");
  }
  return out;
}

void KldAccumulator::add(const BaseDist& base, const float* logits, int64_t n_vocab) {
  double mx = 0, lse = 0;
  log_softmax_terms(logits, n_vocab, &mx, &lse);
  auto logq = [&](int32_t v) { return double(logits[v]) - mx - lse; };
  // This side is reduced exactly as reduce_logits reduced the base (log-probabilities rounded to
  // float, the rest's mass from the unrounded sum), so a model against its own saved logits gives
  // exactly 0, not the base's float rounding.
  double kld = 0, kept_q = 0;
  for (size_t i = 0; i < base.ids.size(); ++i) {
    const double lq_exact = logq(base.ids[i]), lp = base.logp[i], lq = double(float(lq_exact));
    kld += std::exp(lp) * (lp - lq);
    kept_q += std::exp(lq_exact);
  }
  const double p_rest = std::isfinite(base.logp_rest) ? std::exp(double(base.logp_rest)) : 0.0;
  if (p_rest > 0) {
    const double q_rest = std::max(1.0 - kept_q, 1e-300);
    kld += p_rest * (double(base.logp_rest) - double(float(std::log(q_rest))));
  }
  kld_.push_back(std::max(kld, 0.0));  // float rounding can leave -1e-12 for identical models
  int32_t arg = 0;
  for (int64_t v = 1; v < n_vocab; ++v)
    if (logits[v] > logits[arg]) arg = int32_t(v);
  agree_ += arg == base.ids[0];
  dp_.push_back(std::exp(double(float(logq(base.next)))) - std::exp(double(base.logp_next)));
  rest_ += p_rest;
}

KldResult KldAccumulator::result() const {
  KldResult r;
  r.n = int64_t(kld_.size());
  if (r.n == 0) return r;
  const double n = double(r.n);
  double s = 0, s2 = 0, d = 0, d2 = 0;
  for (double x : kld_) s += x, s2 += x * x;
  for (double x : dp_) d += x, d2 += x * x;
  r.mean = s / n;
  r.mean_err = r.n > 1 ? std::sqrt(std::max(s2 / n - r.mean * r.mean, 0.0) / (n - 1)) : 0.0;
  std::vector<double> sorted = kld_;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) { return sorted[size_t(std::min(n - 1, std::floor(q * (n - 1) + 0.5)))]; };
  r.median = quantile(0.5);
  r.p99 = quantile(0.99);
  r.max = sorted.back();
  r.top1_agree = double(agree_) / n;
  r.dp_mean = d / n;
  r.dp_rms = std::sqrt(d2 / n);
  r.mean_rest = rest_ / n;
  return r;
}

KldRun perplexity_kld(const Model& model, Backend& backend, const std::vector<int32_t>& tokens,
                      const PerplexityOptions& po_in, const std::string& source, int64_t save_k,
                      const std::vector<BaseDist>* base, const std::string& base_name,
                      const std::function<void(int64_t, double)>& on_chunk) {
  KldRun run;
  PerplexityOptions po = po_in;
  KldAccumulator acc;
  const int64_t n_vocab = model.cfg.n_vocab;
  size_t at = 0;  // the callback runs inside perplexity() below: it must outlive the if
  if (save_k > 0 || base) {
    po.on_position = [&](const float* logits, int32_t next) {
      if (save_k > 0) run.saved.push_back(reduce_logits(logits, n_vocab, save_k, next));
      if (base) {
        if (at >= base->size()) throw Error(cat(base_name, ": holds fewer positions than this run scores"));
        acc.add((*base)[at++], logits, n_vocab);
      }
    };
  }
  run.ppl = perplexity(model, backend, tokens, po, source, on_chunk);
  if (base) run.kld = acc.result();
  return run;
}

}  // namespace bonsai
