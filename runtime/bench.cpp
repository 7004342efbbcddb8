#include "runtime/bench.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "formats/error.h"
#include "runtime/transformer.h"

namespace bonsai {

uint64_t weight_bytes_per_token(const Model& m) {
  uint64_t b = 0;
  for (const LayerWeights& l : m.layers)
    for (const Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.gate, l.up, l.down}) {
      b += t->nbytes;
      // A residual's codebooks and indices are read with its weight at every token.
      if (const auto it = m.residuals.find(t); it != m.residuals.end()) b += it->second.stored_bytes();
    }
  b += m.output->nbytes;
  b += m.token_embd->nbytes / uint64_t(m.cfg.n_vocab);  // one embedding row
  return b;
}

namespace {

void mean_sd(const std::vector<double>& v, double* mean, double* sd) {
  double s = 0, s2 = 0;
  for (double x : v) s += x;
  *mean = s / double(v.size());
  for (double x : v) s2 += (x - *mean) * (x - *mean);
  *sd = v.size() > 1 ? std::sqrt(s2 / double(v.size() - 1)) : 0.0;
}

}  // namespace

BenchResult bench(const Model& m, Backend& be, const BenchOptions& o, const std::function<void(const std::string&)>& log) {
  if (o.n_prompt < 1 || o.n_gen < 1 || o.reps < 1) throw Error("bench: -p, -n and -r must be positive");
  BenchResult r;
  const int64_t n_vocab = m.cfg.n_vocab;
  Session s(m, be, o.n_prompt + o.n_gen, o.n_prompt);
  std::vector<int32_t> prompt(size_t(o.n_prompt));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % size_t(n_vocab));
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  using clock = std::chrono::steady_clock;
  std::vector<double> pp, tg;
  // One warm-up of each (page faults of the memory map, thread start-up), then the timed reps.
  for (int rep = -1; rep < o.reps; ++rep) {
    s.reset();
    auto t0 = clock::now();
    s.eval(prompt.data(), o.n_prompt, o.n_prompt - 1, logits.data());
    const double pp_s = std::chrono::duration<double>(clock::now() - t0).count();
    s.reset();
    int32_t tok = prompt[0];
    t0 = clock::now();
    for (int64_t i = 0; i < o.n_gen; ++i) {
      s.eval(&tok, 1, 0, logits.data());
      tok = int32_t((tok + 1) % n_vocab);
    }
    const double tg_s = std::chrono::duration<double>(clock::now() - t0).count();
    if (rep < 0) continue;
    pp.push_back(double(o.n_prompt) / pp_s);
    tg.push_back(double(o.n_gen) / tg_s);
    if (log) log(cat("rep ", rep + 1, "/", o.reps, ": pp ", pp.back(), " t/s, tg ", tg.back(), " t/s"));
  }
  mean_sd(pp, &r.pp_tps, &r.pp_sd);
  mean_sd(tg, &r.tg_tps, &r.tg_sd);
  r.bytes_per_token = weight_bytes_per_token(m);
  r.bandwidth_gbs = be.measure_bandwidth_gbs();
  r.roofline_tps = r.bandwidth_gbs * 1e9 / double(r.bytes_per_token);
  r.roofline_pct = 100.0 * r.tg_tps / r.roofline_tps;
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace bonsai
