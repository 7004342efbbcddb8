// bonsai sensitivity -m MODEL --stats STATS: per-tensor KLD when one block matrix takes each
// candidate type (mixed/sensitivity.h), cached in a JSON file, printed and drawn as a heatmap.
#include <cstdio>
#include <filesystem>

#include "cli/command.h"
#include "cli/json_out.h"
#include "cli/progress.h"
#include "formats/error.h"
#include "formats/text_file.h"
#include "mixed/sensitivity.h"
#include "quantize/pipeline.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  mixed::SensitivityOptions so;
  opts.add_options()("stats", po::value<std::string>(&so.stats)->required(),
                     "calibration statistics (bonsai quantize --stats): every candidate is quantized from them")(
      "types", po::value<std::string>()->default_value("ptq1_0,pq2_0,q4_0,q8_0"), "candidate types, comma-separated")(
      "method", po::value<std::string>(), "method for the ternary types (default: quantize's)")(
      "calib", po::value<std::vector<std::string>>()->multitoken(),
      "calibration text files (default: calib-*.txt of the shared zh corpus)")(
      "chunks", po::value<int64_t>(&so.chunks)->default_value(so.chunks), "calibration chunks measured (>= 2)")(
      "ctx,c", po::value<int64_t>(&so.ctx)->default_value(so.ctx), "tokens per chunk (the second half is scored)")(
      "seed", po::value<uint64_t>(&so.seed)->default_value(so.seed), "seed of the chunk sampler")(
      "kl-top-k", po::value<int64_t>(&so.top_k)->default_value(so.top_k),
      "base layout: 0 keeps every token in 16 bits (exact KLD); K > 0 the top K, the rest merged (a lower bound)")(
      "output,o", po::value<std::string>(&so.cache)->default_value("sensitivity.json"),
      "the cache/result JSON (reused when its key matches)")(
      "svg", po::value<std::string>(), "heatmap SVG (default: the output with .svg)")(
      "agreement", po::value<std::string>(),
      "another table (e.g. --seed 1: other positions): print how alike the two rank the tensors, per type");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai sensitivity -m MODEL --stats STATS [--types ptq1_0,pq2_0,q4_0,q8_0] [-o FILE] [--json]",
             "For every block matrix and candidate type: the mean KL divergence of the model's next-token\n"
             "distributions against the unquantized model's when that tensor ALONE takes the type,\n"
             "measured on --chunks chunks of calibration text (datasets' seeded window sampler; never\n"
             "the evaluation text). Each type's tensors are quantized once by the quantize pipeline\n"
             "from the statistics file (no model forward), exactly as bonsai quantize --stats would.\n"
             "The result is cached in -o FILE keyed by the model, statistics, calibration text, chunks,\n"
             "context, seed, top-k and method: a second run with the same key reuses it and measures\n"
             "only types not in it. Writes a heatmap (layers x tensor kinds, one panel per type).\n\n"
             "example:\n  bonsai sensitivity -m zh-tiny-qwen3 --stats zh.stats.gguf -o zh.sensitivity.json",
             opts, {}, vm))
    return 0;
  const bool json = vm["json"].as<bool>();
  so.model = vm["model"].as<std::string>();
  so.types = mixed::parse_type_list(vm["types"].as<std::string>(), "--types");
  if (vm.count("method")) so.method = quant::parse_method(vm["method"].as<std::string>());
  if (vm.count("calib")) so.calib_files = vm["calib"].as<std::vector<std::string>>();
  so.device = vm["device"].as<std::string>();
  so.threads = vm["threads"].as<int>();
  so.work_dir = std::filesystem::path(so.cache).parent_path().string();
  if (so.work_dir.empty()) so.work_dir = ".";
  std::unique_ptr<Progress> bar;
  mixed::SensitivityEvents ev;
  ev.info = [&](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  ev.progress = [&](int64_t done, int64_t total) {
    if (!bar) bar = std::make_unique<Progress>("tensor x type measurements", total);
    bar->update(done);
  };
  const mixed::SensitivityTable t = mixed::measure_sensitivity(so, ev);
  const std::string svg = vm.count("svg") ? vm["svg"].as<std::string>()
                                          : std::filesystem::path(so.cache).replace_extension(".svg").string();
  write_text_file(svg, plot::render(mixed::sensitivity_heatmap(t, so.types)));
  if (json) {
    print_json(mixed::to_json(t));
    return 0;
  }
  std::printf("mean KLD against the unquantized model, one tensor quantized at a time (%lld positions of calibration "
              "text; method %s; %s)\n",
              static_cast<long long>(t.positions), t.method.c_str(),
              so.top_k ? cat("base mass outside its top-", so.top_k, ": ", t.base_rest_mass).c_str() : "every token");
  std::printf("%-28s", "tensor");
  for (TypeId ty : so.types) std::printf(" %12s", traits(ty).name);
  std::printf("\n");
  for (const auto& e : t.tensors) {
    std::printf("%-28s", e.name.c_str());
    for (TypeId ty : so.types) std::printf(" %12.4g", e.kld.at(ty));
    std::printf("\n");
  }
  std::printf("cache: %s; heatmap: %s\n", so.cache.c_str(), svg.c_str());
  if (vm.count("agreement")) {
    const std::string other = vm["agreement"].as<std::string>();
    const mixed::SensitivityTable o = mixed::read_sensitivity(other);
    std::printf("rank agreement with %s (%lld positions; Spearman over the tensors):", other.c_str(),
                static_cast<long long>(o.positions));
    for (TypeId ty : so.types) std::printf(" %s %.3f", traits(ty).name, mixed::rank_agreement(t, o, ty, other));
    std::printf("\n");
  }
  return 0;
}

const Registrar reg({"sensitivity", "per-tensor KLD for each candidate type (cached; table, JSON, heatmap)", run});

}  // namespace
}  // namespace bonsai::cli
