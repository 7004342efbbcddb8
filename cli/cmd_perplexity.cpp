// bonsai perplexity -m MODEL -f TEXT: llama-perplexity's measurement, on any model bonsai reads.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "formats/error.h"
#include "runtime/kld.h"
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
      "chunks", po::value<int64_t>()->default_value(-1), "measure only the first N chunks (-1: all)")(
      "save-logits", po::value<std::string>(), "save this model's next-token distributions to FILE (the base for --kl-base)")(
      "kl-base", po::value<std::string>(), "KL divergence against the distributions saved in FILE by --save-logits")(
      "kl-top-k", po::value<int64_t>()->default_value(128),
      "tokens kept per position by --save-logits (the rest is one merged class: see docs/results.md)");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai perplexity -m MODEL -f TEXT [--ctx 512] [--chunks N] [--json]",
             "Perplexity as llama.cpp's llama-perplexity computes it: the text is tokenized once (BOS\n"
             "first when the vocabulary adds one), cut into chunks of --ctx tokens evaluated\n"
             "independently, and the second half of each chunk is scored. Prints the running\n"
             "estimate per chunk and a final line 'PPL = x +/- err'. The text needs two contexts.\n\n"
             "KL divergence (as llama-perplexity --kl-divergence-base): run the reference model with\n"
             "--save-logits BASE.kld, then the quantized one with --kl-base BASE.kld on the same text,\n"
             "--ctx and --chunks: prints mean/median/p99 KLD, top-1 agreement and the change in the\n"
             "probability of the right token. The base keeps its top --kl-top-k tokens per position\n"
             "and merges the rest into one class, so the KLD is a lower bound of the full one (equal\n"
             "when k covers the vocabulary); the mean merged mass is printed with it.\n\n"
             "examples:\n  bonsai perplexity -m zh-tiny-qwen3/ -f eval-debian-handbook-zh-CN.txt --ctx 512\n"
             "  bonsai perplexity -m zh-tiny-qwen3/ -f eval.txt --save-logits bf16.kld\n"
             "  bonsai perplexity -m zh-ptq1_0.gguf -f eval.txt --kl-base bf16.kld --json",
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

  // KL divergence: the base's side saves, the other side compares position by position.
  const int64_t n_vocab = model->cfg.n_vocab;
  KldHeader kh;
  kh.n_vocab = n_vocab;
  kh.n_ctx = po.n_ctx;
  kh.k = vm["kl-top-k"].as<int64_t>();
  kh.tokens_hash = hash_tokens(tokens);
  if (kh.k < 1) throw Error("--kl-top-k must be at least 1");
  std::vector<BaseDist> base;
  const bool save = vm.count("save-logits"), compare = vm.count("kl-base");
  if (compare) {
    const std::string bp = vm["kl-base"].as<std::string>();
    KldHeader bh;
    base = read_kld(bp, &bh);
    check_kld_base(bp, bh, kh);
    const int64_t avail = bh.chunks;
    if (po.max_chunks < 0 || po.max_chunks > avail) po.max_chunks = avail;
  }
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens, ctx %lld, scoring %lld tokens per chunk\n", tokens.size(),
                 static_cast<long long>(po.n_ctx), static_cast<long long>(po.n_ctx - po.n_ctx / 2 - 1));
  const KldRun run = perplexity_kld(*model, *backend, tokens, po, text_path, save ? kh.k : 0, compare ? &base : nullptr,
                                    compare ? vm["kl-base"].as<std::string>() : "", [&](int64_t i, double ppl) {
                                      if (!json) std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
                                    });
  const PerplexityResult& r = run.ppl;
  const double tps = double(r.chunks * po.n_ctx) / r.seconds;
  if (save) {
    kh.chunks = r.chunks;
    write_kld(vm["save-logits"].as<std::string>(), kh, run.saved);
  }
  const KldResult& k = run.kld;
  if (json) {
    nlohmann::json j = {{"model", vm["model"].as<std::string>()}, {"text", text_path}, {"ppl", r.ppl}, {"ppl_err", r.ppl_err},
                        {"mean_nll", r.mean_nll}, {"tokens", r.tokens}, {"tokens_scored", r.tokens_scored}, {"ctx", r.n_ctx},
                        {"chunks", r.chunks}, {"seconds", r.seconds}, {"tokens_per_second", tps}};
    if (compare)
      j["kld"] = {{"positions", k.n}, {"mean", k.mean}, {"mean_err", k.mean_err}, {"median", k.median}, {"p99", k.p99},
                  {"max", k.max}, {"top1_agreement", k.top1_agree}, {"delta_p_mean", k.dp_mean},
                  {"delta_p_rms", k.dp_rms}, {"base_rest_mass_mean", k.mean_rest}};
    print_json(j);
    return 0;
  }
  std::fprintf(stderr, "\n");
  std::printf("chunks: %lld, tokens scored: %lld, %.1f s (%.1f tokens/s evaluated)\n", static_cast<long long>(r.chunks),
              static_cast<long long>(r.tokens_scored), r.seconds, tps);
  std::printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (compare) {
    std::printf("KLD: mean %.6f +/- %.6f, median %.6f, p99 %.6f, max %.6f over %lld positions\n", k.mean, k.mean_err,
                k.median, k.p99, k.max, static_cast<long long>(k.n));
    std::printf("top-1 agreement: %.2f%%; delta p (right token): mean %+.5f, rms %.5f\n", 100.0 * k.top1_agree,
                k.dp_mean, k.dp_rms);
    std::printf("base mass outside its top-%lld (merged): mean %.4f\n", static_cast<long long>(kh.k), k.mean_rest);
  }
  return 0;
}

const Registrar reg({"perplexity", "measure perplexity of a model on a text (llama-perplexity method)", run});

}  // namespace
}  // namespace bonsai::cli
