#include "runtime/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include "formats/error.h"
#include "runtime/transformer.h"

namespace bonsai {

uint64_t weight_bytes_per_token(const Model& m, Backend* be) {
  auto bytes = [&](const Tensor& t) { return be ? be->read_bytes(t) : t.nbytes; };
  uint64_t b = 0;
  for (const LayerWeights& l : m.layers)
    for (const Tensor* t : l.matrices()) {
      b += bytes(*t);
      // A residual's codebooks and indices are read with its weight at every token.
      if (const auto it = m.residuals.find(t); it != m.residuals.end()) b += it->second.stored_bytes();
    }
  b += bytes(*m.output);
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
  if (o.profile && be.name().rfind("cpu", 0) != 0)
    throw Error(cat("bench: --profile times each backend call as it runs, which only the cpu device does (",
                    be.name(), " queues its calls)"));
  BenchResult r;
  const int64_t n_vocab = m.cfg.n_vocab;
  ProfilingBackend profiler(be);
  Session s(m, o.profile ? profiler : be, o.n_prompt + o.n_gen, o.n_prompt);
  std::vector<int32_t> prompt(size_t(o.n_prompt));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % size_t(n_vocab));
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  using clock = std::chrono::steady_clock;
  r.bytes_per_token = weight_bytes_per_token(m);
  // One warm-up rep (page faults of the memory map and of the probe's buffer, thread start-up),
  // then the timed reps. Every rep, the warm-up too, probes the bandwidth around its generation.
  // The peak RSS before the first probe: the probe's buffer (several times the last-level cache,
  // cpu/bandwidth.h) is no part of running the model, so the result leaves it out.
  int64_t rss_before_probe = 0;
  for (int rep = -1; rep < o.reps; ++rep) {
    BenchRep one;
    s.reset();
    auto t0 = clock::now();
    s.eval(prompt.data(), o.n_prompt, o.n_prompt - 1, logits.data());
    one.pp_tps = double(o.n_prompt) / std::chrono::duration<double>(clock::now() - t0).count();
    s.reset();
    if (rep < 0) rss_before_probe = peak_rss_bytes();
    one.bandwidth_before_gbs = be.measure_bandwidth_gbs();
    int32_t tok = prompt[0];
    profiler.record(o.profile && rep >= 0);  // the timed generations only
    t0 = clock::now();
    for (int64_t i = 0; i < o.n_gen; ++i) {
      s.eval(&tok, 1, 0, logits.data());
      tok = int32_t((tok + 1) % n_vocab);
    }
    const double tg_s = std::chrono::duration<double>(clock::now() - t0).count();
    profiler.record(false);
    one.tg_tps = double(o.n_gen) / tg_s;
    if (o.profile && rep >= 0) {
      r.profiled_tokens += o.n_gen;
      r.profiled_seconds += tg_s;
    }
    one.bandwidth_after_gbs = be.measure_bandwidth_gbs();
    if (rep < 0) {
      r.read_bytes_per_token = weight_bytes_per_token(m, &be);  // the warm-up made the backend's copies
      continue;
    }
    const double bw = (one.bandwidth_before_gbs + one.bandwidth_after_gbs) / 2;
    one.roofline_pct = 100.0 * one.tg_tps * double(r.bytes_per_token) / (bw * 1e9);
    r.reps.push_back(one);
    if (log)
      log(cat("rep ", rep + 1, "/", o.reps, ": pp ", one.pp_tps, " t/s, tg ", one.tg_tps, " t/s, bandwidth ",
              one.bandwidth_before_gbs, " / ", one.bandwidth_after_gbs, " GB/s before / after tg: ", one.roofline_pct,
              "% of the roofline"));
  }
  auto stats = [&](double BenchRep::*field, double* mean, double* sd) {
    std::vector<double> v;
    for (const BenchRep& one : r.reps) v.push_back(one.*field);
    mean_sd(v, mean, sd);
  };
  stats(&BenchRep::pp_tps, &r.pp_tps, &r.pp_sd);
  stats(&BenchRep::tg_tps, &r.tg_tps, &r.tg_sd);
  stats(&BenchRep::roofline_pct, &r.roofline_pct, &r.roofline_sd);
  std::vector<double> probes;
  for (const BenchRep& one : r.reps) probes.insert(probes.end(), {one.bandwidth_before_gbs, one.bandwidth_after_gbs});
  r.bandwidth_gbs = std::accumulate(probes.begin(), probes.end(), 0.0) / double(probes.size());
  r.bandwidth_min_gbs = *std::min_element(probes.begin(), probes.end());
  r.bandwidth_max_gbs = *std::max_element(probes.begin(), probes.end());
  r.roofline_tps = r.bandwidth_gbs * 1e9 / double(r.bytes_per_token);
  // The buffer stays resident from its probe on, so past it the peak less the buffer is the run's.
  r.probe_buffer_bytes = int64_t(be.probe_resident_bytes());
  r.peak_rss_bytes = std::max(rss_before_probe, peak_rss_bytes() - r.probe_buffer_bytes);
  if (o.profile) r.profile = profiler.times();
  return r;
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace bonsai
