// Speed of a model on a backend, llama-bench style: prompt processing (one batch of n_prompt
// tokens) and generation (n_gen tokens one at a time), each repeated, with the bytes of weights a
// generated token reads and the backend's measured bandwidth, so speed is judged against the
// memory roofline.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/backend_profile.h"
#include "runtime/model.h"

namespace bonsai {

struct BenchOptions {
  int64_t n_prompt = 512, n_gen = 128;
  int reps = 5;
  // Time every backend call of the timed generations (ProfilingBackend; CPU backends only: a
  // GPU's calls return before they have run).
  bool profile = false;
};

// One timed repetition. The bandwidth is probed just before and just after its generation, so
// that the roofline it is judged against is the memory's speed in the same seconds: on a shared
// host both move together (one afternoon's probes on the 2-core machine read 31 to 71 GB/s).
struct BenchRep {
  double pp_tps = 0, tg_tps = 0;
  double bandwidth_before_gbs = 0, bandwidth_after_gbs = 0;
  double roofline_pct = 0;  // tg_tps * bytes_per_token / mean of the two probes * 100
};

struct BenchResult {
  double pp_tps = 0, pp_sd = 0, tg_tps = 0, tg_sd = 0;
  uint64_t bytes_per_token = 0;  // weight bytes of one generated token as stored: the roofline's
  uint64_t read_bytes_per_token = 0;  // what the backend's kernels read for them (Backend::read_bytes)
  double bandwidth_gbs = 0;      // mean of every rep's two probes
  double bandwidth_min_gbs = 0, bandwidth_max_gbs = 0;
  double roofline_tps = 0;       // bandwidth_gbs / bytes_per_token
  double roofline_pct = 0, roofline_sd = 0;  // mean and sd of the reps' roofline_pct
  std::vector<BenchRep> reps;
  int64_t peak_rss_bytes = 0;      // the process's, less the bandwidth probe's buffer
  int64_t probe_buffer_bytes = 0;  // Backend::probe_resident_bytes
  // With BenchOptions::profile: the backend calls of the timed generations by operation, the
  // longest first, over profiled_tokens tokens that took profiled_seconds in all.
  std::vector<OpTime> profile;
  int64_t profiled_tokens = 0;
  double profiled_seconds = 0;
};

// The weight bytes one generated token reads: as stored, or as `be` reads them (its copies).
uint64_t weight_bytes_per_token(const Model& m, Backend* be = nullptr);
// The process's peak resident set so far (getrusage), in bytes.
int64_t peak_rss_bytes();
BenchResult bench(const Model& m, Backend& be, const BenchOptions& o,
                  const std::function<void(const std::string&)>& log = {});

}  // namespace bonsai
