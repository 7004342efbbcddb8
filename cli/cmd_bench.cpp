// bonsai bench -m MODEL: prompt and generation speed against the measured memory roofline.
#include <cstdio>

#include "cli/command.h"
#include "cli/json_out.h"
#include "runtime/bench.h"
#include "runtime/cpu/blas_kernels.h"

namespace bonsai::cli {
namespace {

// One row of the profile: an operation's share of a generated token.
struct ProfileRow {
  std::string op;
  double ms, share_pct, calls, gbs;  // per token; gbs 0 where the operation reads no weights
};

// The profile's rows per token, the longest first, then what the backend calls leave of the
// token's time (sampling and the session's own work, outside any call).
std::vector<ProfileRow> profile_rows(const BenchResult& r) {
  const double n = double(r.profiled_tokens), total_ms = r.profiled_seconds * 1e3 / n;
  std::vector<ProfileRow> rows;
  double inside = 0;
  for (const OpTime& t : r.profile) {
    const double ms = t.seconds * 1e3 / n;
    inside += ms;
    rows.push_back({t.op, ms, 100 * ms / total_ms, double(t.calls) / n,
                    t.bytes ? double(t.bytes) / t.seconds / 1e9 : 0.0});
  }
  rows.push_back({"outside the backend calls", total_ms - inside, 100 * (total_ms - inside) / total_ms, 0, 0});
  return rows;
}

nlohmann::json profile_json(const BenchResult& r) {
  nlohmann::json ops = nlohmann::json::array();
  for (const ProfileRow& p : profile_rows(r))
    ops.push_back({{"op", p.op}, {"ms_per_token", p.ms}, {"share_pct", p.share_pct}, {"calls_per_token", p.calls},
                   {"gbs", p.gbs}});
  return {{"tokens", r.profiled_tokens}, {"ms_per_token", r.profiled_seconds * 1e3 / double(r.profiled_tokens)},
          {"ops", ops}};
}

void print_profile(const BenchResult& r) {
  std::printf("\nwhere a generated token's time goes (%lld tokens, %.3f ms each):\n",
              static_cast<long long>(r.profiled_tokens), r.profiled_seconds * 1e3 / double(r.profiled_tokens));
  std::printf("%9s %7s %8s %7s  %s\n", "ms/token", "share", "calls", "GB/s", "operation");
  for (const ProfileRow& p : profile_rows(r)) {
    std::printf("%9.3f %6.1f%% ", p.ms, p.share_pct);
    if (p.calls > 0) std::printf("%8.1f ", p.calls);
    else std::printf("%8s ", "");
    if (p.gbs > 0) std::printf("%7.1f  ", p.gbs);
    else std::printf("%7s  ", "");
    std::printf("%s\n", p.op.c_str());
  }
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  BenchOptions bo;
  opts.add_options()("n-prompt,p", po::value<int64_t>(&bo.n_prompt)->default_value(bo.n_prompt),
                     "prompt tokens processed in one batch (pp)")(
      "n-gen,n", po::value<int64_t>(&bo.n_gen)->default_value(bo.n_gen), "tokens generated one at a time (tg)")(
      "reps,r", po::value<int>(&bo.reps)->default_value(bo.reps), "repetitions (after one warm-up)")(
      "profile", po::bool_switch(&bo.profile),
      "also time every backend call of the timed generations: where a token's time goes, by operation "
      "(products by weight, type and shape, with their GB/s); cpu only");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai bench -m MODEL [-p 512] [-n 128] [-r 5] [--json]",
             "Measures prompt processing (pp) and generation (tg) speed in tokens/s (mean +/- sd over\n"
             "the repetitions), the weight bytes a generated token reads, and tg as a percentage of\n"
             "the memory roofline (bandwidth / stored bytes per token), plus peak RSS. Where the\n"
             "kernels read a copy in another layout (on AVX2 the CPU reads PTQ1_0 as 2-bit PQ2_0\n"
             "codes, 34 bytes per 28) the bytes read are printed too; the roofline stays the stored\n"
             "format's, the stricter yardstick. The device's read bandwidth is measured just before\n"
             "and just after each repetition's generation, and each repetition is judged against\n"
             "the mean of its two probes (a shared machine moves both). On the CPU a probe reads a\n"
             "buffer four times the last-level cache (STREAM's rule; at least 256 MB), which peak\n"
             "RSS leaves out. --json lists every repetition. --profile adds a table of where a\n"
             "generated token's time goes: each operation's milliseconds per token, share, calls\n"
             "per token and, for products, the GB/s their weights streamed at (it reads the clock\n"
             "twice per call; the pp and tg figures are taken with it on).\n\n"
             "examples:\n  bonsai bench -m qwen3-1.7b-ptq1_0.gguf -t 2 --json\n"
             "  bonsai bench -m qwen3-1.7b-ptq1_0.gguf -p 1 -n 128 -r 3 --profile",
             opts, {}, vm))
    return 0;
  const bool json = vm["json"].as<bool>();
  auto backend = make_backend(vm["device"].as<std::string>(), vm["threads"].as<int>());
  const auto model = load_model(vm["model"].as<std::string>());
  const BenchResult r = bench(*model, *backend, bo, [&](const std::string& line) {
    if (!json) std::fprintf(stderr, "%s\n", line.c_str());
  });
  if (json) {
    nlohmann::json reps = nlohmann::json::array();
    for (const BenchRep& one : r.reps)
      reps.push_back({{"pp_tps", one.pp_tps}, {"tg_tps", one.tg_tps}, {"bandwidth_before_gbs", one.bandwidth_before_gbs},
                      {"bandwidth_after_gbs", one.bandwidth_after_gbs}, {"roofline_pct", one.roofline_pct}});
    nlohmann::json out = {{"model", vm["model"].as<std::string>()}, {"device", backend->name()}, {"n_prompt", bo.n_prompt},
                {"n_gen", bo.n_gen}, {"reps", bo.reps}, {"pp_tps", r.pp_tps}, {"pp_sd", r.pp_sd},
                {"tg_tps", r.tg_tps}, {"tg_sd", r.tg_sd}, {"bandwidth_gbs", r.bandwidth_gbs},
                {"bandwidth_min_gbs", r.bandwidth_min_gbs}, {"bandwidth_max_gbs", r.bandwidth_max_gbs},
                {"bytes_per_token", r.bytes_per_token}, {"read_bytes_per_token", r.read_bytes_per_token},
                {"roofline_tps", r.roofline_tps},
                {"roofline_pct", r.roofline_pct}, {"roofline_sd", r.roofline_sd}, {"per_rep", reps},
                {"peak_rss_bytes", r.peak_rss_bytes}, {"probe_buffer_bytes", r.probe_buffer_bytes}};
    if (backend->name() == "cpu") out["blas_kernels"] = cpu::blas_kernels();
    if (bo.profile) out["profile"] = profile_json(r);
    print_json(out);
    return 0;
  }
  std::printf("model: %s (%s", vm["model"].as<std::string>().c_str(), backend->name().c_str());
  if (backend->name() == "cpu") std::printf("; prompts' SGEMMs on OpenBLAS's %s kernels", cpu::blas_kernels());
  std::printf(")\n");
  std::printf("pp%lld: %.2f +/- %.2f tokens/s\n", static_cast<long long>(bo.n_prompt), r.pp_tps, r.pp_sd);
  std::printf("tg%lld: %.2f +/- %.2f tokens/s\n", static_cast<long long>(bo.n_gen), r.tg_tps, r.tg_sd);
  std::printf("weights per token: %.1f MB stored", double(r.bytes_per_token) / 1e6);
  if (r.read_bytes_per_token != r.bytes_per_token)
    std::printf(", %.1f MB read (the kernels' copies)", double(r.read_bytes_per_token) / 1e6);
  std::printf("; measured bandwidth: %.1f GB/s (%.1f-%.1f over %zu probes); roofline: %.2f tokens/s\n", r.bandwidth_gbs, r.bandwidth_min_gbs, r.bandwidth_max_gbs,
              2 * r.reps.size(), r.roofline_tps);
  std::printf("tg at %.1f +/- %.1f%% of the bandwidth roofline (each repetition against the bandwidth measured "
              "around it); peak RSS %.1f MB (without the probe's %.1f MB buffer)\n",
              r.roofline_pct, r.roofline_sd, double(r.peak_rss_bytes) / 1e6, double(r.probe_buffer_bytes) / 1e6);
  if (bo.profile) print_profile(r);
  return 0;
}

const Registrar reg({"bench", "measure prompt and generation speed against the bandwidth roofline", run});

}  // namespace
}  // namespace bonsai::cli
