// bonsai synth: a random-weight model at real shapes, for speed measurements at scale.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "cli/progress.h"
#include "formats/error.h"
#include "runtime/bench.h"
#include "runtime/synth.h"

namespace bonsai::cli {
namespace {

TypeId type_option(const po::variables_map& vm, const char* name) {
  const std::string v = vm[name].as<std::string>();
  const TypeTraits* t = find_type(v);
  if (!t) throw po::error(std::string("--") + name + ": unknown type '" + v + "'");
  return t->id;
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  SynthOptions so;
  opts.add_options()("arch", po::value<std::string>(&so.arch)->default_value(so.arch), "architecture (qwen3)")(
      "size", po::value<std::string>(&so.size)->default_value(so.size), "tiny, 0.6b, 1.7b, 4b, 8b, 14b or 32b")(
      "config", po::value<std::string>(&so.config),
      "a Hugging Face config.json (or its model folder): its architecture and shapes instead of --arch and --size")(
      "type", po::value<std::string>()->default_value("ptq1_0"), "type of the blocks' linear weights")(
      "embd-type", po::value<std::string>()->default_value("q8_0"), "type of token_embd.weight")(
      "output-type", po::value<std::string>()->default_value("q8_0"), "type of output.weight (untied sizes)")(
      "tokenizer", po::value<std::string>(&so.tokenizer), "tokenizer.json to embed (llama.cpp needs one)")(
      "seed", po::value<uint64_t>(&so.seed)->default_value(so.seed), "random seed")(
      "residual", po::value<std::string>()->default_value("none"),
      "random residual codebooks on the blocks' weights (--type pq2_0 only): none or kmeans")(
      "rc-dim", po::value<int64_t>(&so.rc_dim)->default_value(so.rc_dim), "kmeans: inputs per sub-vector v (divides 128)")(
      "rc-size", po::value<int64_t>(&so.rc_size)->default_value(so.rc_size), "kmeans: centroids per codebook K (2..65536)")(
      "rc-rows", po::value<int64_t>(&so.rc_rows)->default_value(so.rc_rows),
      "kmeans: rows per codebook G (divides each tensor's rows; 0 = all)")(
      "out,o", po::value<std::string>()->required(), "output: FILE.gguf or FILE.bonsai");
  add_threads(opts);
  po::variables_map vm;
  if (!parse(args,
             "bonsai synth {--arch qwen3 --size 1.7b | --config config.json} --type ptq1_0 "
             "[--residual kmeans --rc-dim V --rc-size K --rc-rows G] --tokenizer tokenizer.json -o FILE",
             "Writes a model with random weights at the real shapes of a published model, in any\n"
             "weight type, marked synthetic in its metadata. For speed measurements at real scale\n"
             "(bonsai bench, llama-bench); its perplexity means nothing.\n\n"
             "Any shape: a preset (--size; the published Qwen3 models) or a Hugging Face config.json\n"
             "(--config). The file is written tensor by tensor, so memory stays near one chunk of rows\n"
             "whatever the model's size; it is refused before anything is written when its filesystem\n"
             "has less free space than it needs.\n\n"
             "With --residual kmeans (PQ2_0 only) every block weight also gets random residual codebooks\n"
             "in the layout and keys bonsai quantize --residual kmeans writes (the file then loads only\n"
             "in bonsai), to measure what the residual costs.\n\n"
             "examples:\n  bonsai synth --size 1.7b --type ptq1_0 --tokenizer tokenizer.json -o q3-1.7b-ptq1.gguf\n"
             "  bonsai synth --config Qwen3-14B/config.json --type bf16 --embd-type bf16 --output-type bf16 -o q3-14b-bf16.gguf",
             opts, {}, vm))
    return 0;
  so.type = type_option(vm, "type");
  so.embd_type = type_option(vm, "embd-type");
  so.output_type = type_option(vm, "output-type");
  const std::string rc = vm["residual"].as<std::string>();
  if (rc != "none" && rc != "kmeans") throw po::error("--residual: unknown '" + rc + "' (synth knows none, kmeans)");
  so.residual = rc == "kmeans";
  // Options that mean something only with a residual are refused without one, not ignored.
  for (const char* k : {"rc-dim", "rc-size", "rc-rows"})
    if (!so.residual && !vm[k].defaulted()) throw po::error(std::string("--") + k + " needs --residual kmeans");
  // --config gives the architecture and the shapes: a --size or --arch beside it would be ignored.
  if (!so.config.empty())
    for (const char* k : {"size", "arch"})
      if (!vm[k].defaulted()) throw po::error(std::string("--") + k + " cannot be given with --config");
  const std::string out = vm["out"].as<std::string>();
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Progress> bar;
  SynthPlan plan;
  SynthHooks hooks;
  hooks.plan = [&](const SynthPlan& p) {
    plan = p;
    std::fprintf(stderr, "synth: %s, %zu tensors: %s (%s free there), needs about %s of memory for its buffers"
                 " beyond the program's own (peak RSS %s so far)\n", p.model.c_str(), p.tensors,
                 human_bytes(double(p.file_bytes)).c_str(), human_bytes(double(p.available_bytes)).c_str(),
                 human_bytes(double(p.memory_bytes)).c_str(), human_bytes(double(peak_rss_bytes())).c_str());
  };
  hooks.progress = [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<Progress>("synth", int64_t(total), Progress::Unit::bytes);
    bar->update(int64_t(done), "peak RSS " + human_bytes(double(peak_rss_bytes())));
  };
  synth_model(so, out, hooks);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (synthetic %s, %s%s): %s in %.1f s, peak RSS %s\n", out.c_str(), plan.model.c_str(),
              traits(so.type).name, so.residual ? " + residual kmeans" : "", human_bytes(double(plan.file_bytes)).c_str(),
              s, human_bytes(double(peak_rss_bytes())).c_str());
  return 0;
}

const Registrar reg({"synth", "write a random-weight model at real shapes (for speed tests)", run});

}  // namespace
}  // namespace bonsai::cli
