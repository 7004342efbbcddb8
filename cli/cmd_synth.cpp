// bonsai synth: a random-weight model at real shapes, for speed measurements at scale.
#include <cstdio>
#include <memory>

#include "cli/command.h"
#include "cli/progress.h"
#include "formats/error.h"
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
      "size", po::value<std::string>(&so.size)->default_value(so.size), "tiny, 0.6b, 1.7b, 4b or 8b")(
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
             "bonsai synth --arch qwen3 --size 1.7b --type ptq1_0 [--residual kmeans --rc-dim V --rc-size K --rc-rows G] "
             "--tokenizer tokenizer.json -o FILE",
             "Writes a model with random weights at the real shapes of a published model, in any\n"
             "weight type, marked synthetic in its metadata. For speed measurements at real scale\n"
             "(bonsai bench, llama-bench); its perplexity means nothing.\n\n"
             "With --residual kmeans (PQ2_0 only) every block weight also gets random residual codebooks\n"
             "in the layout and keys bonsai quantize --residual kmeans writes (the file then loads only\n"
             "in bonsai), to measure what the residual costs.\n\n"
             "example:\n  bonsai synth --size 1.7b --type ptq1_0 --tokenizer tokenizer.json -o q3-1.7b-ptq1.gguf",
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
  const std::string out = vm["out"].as<std::string>();
  std::unique_ptr<Progress> bar;
  synth_model(so, out, [&](size_t done, size_t total) {
    if (!bar) bar = std::make_unique<Progress>("synth tensors", int64_t(total));
    bar->update(int64_t(done));
  });
  std::printf("wrote %s (synthetic %s-%s, %s%s)\n", out.c_str(), so.arch.c_str(), so.size.c_str(), traits(so.type).name,
              so.residual ? " + residual kmeans" : "");
  return 0;
}

const Registrar reg({"synth", "write a random-weight model at real shapes (for speed tests)", run});

}  // namespace
}  // namespace bonsai::cli
