// bonsai perplexity -m MODEL -f TEXT: llama-perplexity's measurement, on any model bonsai reads.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "formats/error.h"
#include "runtime/load.h"
#include "runtime/perplexity.h"

namespace bonsai::cli {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot read the text file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  opts.add_options()("file,f", po::value<std::string>()->required(), "text to measure (UTF-8)")(
      "ctx,c", po::value<int64_t>()->default_value(512), "context size: tokens per chunk")(
      "chunks", po::value<int64_t>()->default_value(-1), "measure only the first N chunks (-1: all)");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai perplexity -m MODEL -f TEXT [--ctx 512] [--chunks N] [--json]",
             "Perplexity as llama.cpp's llama-perplexity computes it: the text is tokenized once (BOS\n"
             "first when the vocabulary adds one), cut into chunks of --ctx tokens evaluated\n"
             "independently, and the second half of each chunk is scored. Prints the running\n"
             "estimate per chunk and a final line 'PPL = x +/- err'. The text needs two contexts.\n\n"
             "example:\n  bonsai perplexity -m zh-tiny-qwen3/ -f eval-debian-handbook-zh-CN.txt --ctx 512",
             opts, {}, vm))
    return 0;
  const bool json = vm["json"].as<bool>();
  const std::string text_path = vm["file"].as<std::string>();
  const std::string text = read_text(text_path);
  auto backend = make_backend(vm["device"].as<std::string>(), vm["threads"].as<int>());
  const auto model = load_model(vm["model"].as<std::string>());
  const auto tok = model_tokenizer(*model);

  PerplexityOptions po;
  po.n_ctx = vm["ctx"].as<int64_t>();
  po.max_chunks = vm["chunks"].as<int64_t>();
  po.add_bos = tok->add_bos_default();
  po.bos = tok->bos();
  const std::vector<int32_t> tokens = tok->encode(text, po.add_bos, false);
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens, ctx %lld, scoring %lld tokens per chunk\n", tokens.size(),
                 static_cast<long long>(po.n_ctx), static_cast<long long>(po.n_ctx - po.n_ctx / 2 - 1));
  const PerplexityResult r = perplexity(*model, *backend, tokens, po, text_path, [&](int64_t i, double ppl) {
    if (!json) std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
  });
  const double tps = double(r.chunks * po.n_ctx) / r.seconds;
  if (json) {
    print_json({{"model", vm["model"].as<std::string>()}, {"text", text_path}, {"ppl", r.ppl}, {"ppl_err", r.ppl_err},
                {"mean_nll", r.mean_nll}, {"tokens", r.tokens}, {"tokens_scored", r.tokens_scored}, {"ctx", r.n_ctx},
                {"chunks", r.chunks}, {"seconds", r.seconds}, {"tokens_per_second", tps}});
    return 0;
  }
  std::fprintf(stderr, "\n");
  std::printf("chunks: %lld, tokens scored: %lld, %.1f s (%.1f tokens/s evaluated)\n", static_cast<long long>(r.chunks),
              static_cast<long long>(r.tokens_scored), r.seconds, tps);
  std::printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  return 0;
}

const Registrar reg({"perplexity", "measure perplexity of a model on a text (llama-perplexity method)", run});

}  // namespace
}  // namespace bonsai::cli
