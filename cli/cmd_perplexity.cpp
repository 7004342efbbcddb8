// bonsai perplexity -m MODEL -f TEXT: llama-perplexity's measurement, on any model bonsai reads.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "cli/progress.h"
#include "datasets/choice_tasks.h"
#include "eval/result_json.h"
#include "eval/tasks.h"
#include "formats/atomic_file.h"
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

// --multiple-choice / --hellaswag / --winogrande: accuracy the way llama-perplexity scores it.
int run_task(const po::variables_map& vm, bool json) {
  const char* kind = vm.count("multiple-choice") ? "multiple-choice" : vm.count("hellaswag") ? "hellaswag" : "winogrande";
  const std::string path = vm[kind].as<std::string>();
  const std::string bytes = read_text(path);
  const int64_t limit = vm["task-limit"].as<int64_t>();
  std::vector<eval::ChoiceTask> choices;
  std::vector<eval::WinograndeTask> wino;
  if (std::string(kind) == "multiple-choice") choices = datasets::parse_choice_tasks(bytes, path);
  else if (std::string(kind) == "hellaswag") choices = eval::parse_hellaswag(bytes, path);
  else wino = eval::parse_winogrande(bytes, path);
  if (limit >= 0) {
    if (choices.size() > size_t(limit)) choices.resize(size_t(limit));
    if (wino.size() > size_t(limit)) wino.resize(size_t(limit));
  }
  auto backend = make_backend(vm["device"].as<std::string>(), vm["threads"].as<int>());
  const auto model = load_model(vm["model"].as<std::string>());
  const auto tok = model_tokenizer(*model);
  const int64_t n = int64_t(choices.size() + wino.size());
  Progress bar(kind, n);
  const eval::TaskProgress progress = [&](int64_t done, int64_t) {
    if (!json) bar.update(done);
  };
  const eval::TaskScore r = wino.empty() ? eval::score_choices(*model, *backend, *tok, choices, progress)
                                         : eval::score_winogrande(*model, *backend, *tok, wino, progress);
  if (json) {
    print_json({{"model", vm["model"].as<std::string>()}, {"task", kind}, {"file", path}, {"tasks", r.tasks},
                {"correct", r.correct}, {"accuracy", r.accuracy}, {"accuracy_err", r.accuracy_err},
                {"chance", r.chance}, {"seconds", r.seconds}});
    return 0;
  }
  std::printf("%s: %lld tasks, accuracy %.2f%% +/- %.2f%% (%lld right; chance %.2f%%), %.1f s\n", kind,
              static_cast<long long>(r.tasks), 100 * r.accuracy, 100 * r.accuracy_err, static_cast<long long>(r.correct),
              100 * r.chance, r.seconds);
  return 0;
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  opts.add_options()("file,f", po::value<std::string>(), "text to measure (UTF-8)")(
      "multiple-choice", po::value<std::string>(), "score llama-perplexity's multiple-choice task FILE instead (bonsai corpus choices makes one)")(
      "hellaswag", po::value<std::string>(), "score a HellaSwag task FILE (6 lines a task) instead")(
      "winogrande", po::value<std::string>(), "score a Winogrande CSV FILE instead")(
      "task-limit", po::value<int64_t>()->default_value(-1), "score only the first N tasks (-1: all)")(
      "ctx,c", po::value<int64_t>()->default_value(512), "context size: tokens per chunk")(
      "chunks", po::value<int64_t>()->default_value(-1), "measure only the first N chunks (-1: all)")(
      "save-logits", po::value<std::string>(), "save this model's next-token distributions to FILE (the base for --kl-base)")(
      "kl-base", po::value<std::string>(), "KL divergence against the distributions saved in FILE by --save-logits")(
      "kl-top-k", po::value<int64_t>()->default_value(0),
      "--save-logits layout: 0 keeps every token's log-probability in 16 bits (exact KLD, 2 bytes x vocabulary a "
      "position); K > 0 keeps the top K and merges the rest (a lower bound, for huge vocabularies)")(
      "kl-chunks", po::value<int64_t>()->default_value(-1),
      "--save-logits stores the positions of the first N chunks only (-1: every chunk measured)");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai perplexity -m MODEL -f TEXT [--ctx 512] [--chunks N] [--save-logits F | --kl-base F] [--json]\n"
             "       bonsai perplexity -m MODEL --multiple-choice|--hellaswag|--winogrande FILE [--task-limit N]",
             "Perplexity as llama.cpp's llama-perplexity computes it: the text is tokenized once (BOS\n"
             "first when the vocabulary adds one), cut into chunks of --ctx tokens evaluated\n"
             "independently, and the second half of each chunk is scored. Prints the running\n"
             "estimate per chunk and a final line 'PPL = x +/- err'. The text needs two contexts.\n\n"
             "KL divergence (as llama-perplexity --kl-divergence-base): run the reference model with\n"
             "--save-logits BASE.kld, then the quantized one with --kl-base BASE.kld on the same text\n"
             "and --ctx (it measures the base's chunks). Prints the two perplexities over the same tokens\n"
             "and their paired difference, mean ln(PPL(Q)/PPL(base)) and PPL(Q) - PPL(base), each with\n"
             "the standard error of a difference on the same tokens (far smaller than either run's own\n"
             "+/-, which is printed beside it); then mean/median/p90/p99/p99.9/max KLD, top-1 agreement\n"
             "and the change in the right token's probability (mean, RMS).\n"
             "The base stores every token's log-probability in 16 bits (--kl-top-k 0, the default:\n"
             "~300 KB a position for a 152k vocabulary, so --kl-chunks N keeps the first N chunks); the\n"
             "rounding's largest possible effect on the mean KLD is computed and printed. --kl-top-k K\n"
             "keeps the top K and merges the rest, a lower bound printed with the merged mass.\n\n"
             "Tasks (instead of -f): --multiple-choice FILE, --hellaswag FILE, --winogrande FILE read\n"
             "the files llama-perplexity reads and score them as it does: each choice by the mean\n"
             "log-probability of its tokens after what the choices share (question + \" \" + answer;\n"
             "Winogrande: the sentence after the blank), the highest wins. Prints accuracy +/-\n"
             "sqrt(p(1-p)/(n-1)) and chance. --task-limit N scores the first N (llama-perplexity draws N\n"
             "at random). bonsai corpus choices builds a Chinese multiple-choice file from held-out text.\n\n"
             "examples:\n  bonsai perplexity -m zh-tiny-qwen3/ -f eval-debian-handbook-zh-CN.txt --ctx 512\n"
             "  bonsai perplexity -m zh-tiny-qwen3/ -f eval.txt --save-logits bf16.kld --kl-chunks 20\n"
             "  bonsai perplexity -m zh-ptq1_0.gguf -f eval.txt --kl-base bf16.kld --json\n"
             "  bonsai perplexity -m zh-ptq1_0.gguf --multiple-choice zh-choices.bin",
             opts, {}, vm))
    return 0;
  const bool json = vm["json"].as<bool>();
  const int n_task_files = int(vm.count("multiple-choice") + vm.count("hellaswag") + vm.count("winogrande"));
  if (n_task_files > 1) throw po::error("give one of --multiple-choice, --hellaswag, --winogrande");
  if (n_task_files == 1) return run_task(vm, json);
  if (!vm.count("file")) throw po::error("the option '--file' is required (or a task: --multiple-choice, --hellaswag, --winogrande)");
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

  // KL divergence: the base's side records, the other side compares position by position.
  const int64_t n_vocab = model->cfg.n_vocab;
  KldHeader kh;
  kh.n_vocab = n_vocab;
  kh.n_ctx = po.n_ctx;
  kh.k = vm["kl-top-k"].as<int64_t>();
  kh.tokens_hash = hash_tokens(tokens);
  const int64_t kl_chunks = vm["kl-chunks"].as<int64_t>();
  if (kh.k < 0 || kh.k > n_vocab) throw Error(cat("--kl-top-k must be 0 (every token) or 1..", n_vocab));
  if (kl_chunks < -1 || kl_chunks == 0) throw Error("--kl-chunks must be -1 (all) or at least 1");
  const bool save = vm.count("save-logits"), compare = vm.count("kl-base");
  KldBase base;
  if (compare) {
    base = KldBase::open(vm["kl-base"].as<std::string>());
    base.check_fits(kh);
    po.max_chunks = base.header().chunks;
  }
  const int64_t chunks = perplexity_chunks(int64_t(tokens.size()), po.n_ctx, po.max_chunks);
  const int64_t saved_chunks = kld_kept_chunks(chunks, kl_chunks);
  std::unique_ptr<KldRecorder> rec;
  if (save) {
    const std::string sp = vm["save-logits"].as<std::string>();
    const uint64_t need = kld_base_bytes(kh, chunks, kl_chunks);
    require_space(sp, need, available_bytes(sp));
    if (!json)
      std::fprintf(stderr, "saving %s: %lld chunks' distributions, %.1f MiB (%s)\n", sp.c_str(),
                   static_cast<long long>(saved_chunks), double(need) / 1048576.0,
                   kh.k ? cat("top ", kh.k, " tokens").c_str() : "every token, 16 bits");
    rec = std::make_unique<KldRecorder>(kh, sp);
  }
  if (!json)
    std::fprintf(stderr, "perplexity: %zu tokens, ctx %lld, scoring %lld tokens per chunk\n", tokens.size(),
                 static_cast<long long>(po.n_ctx), static_cast<long long>(scored_per_chunk(po.n_ctx)));
  const KldRun run = perplexity_kld(*model, *backend, tokens, po, text_path, rec.get(), saved_chunks,
                                    compare ? &base : nullptr, [&](int64_t i, double ppl) {
                                      if (!json) std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
                                    });
  if (rec) rec->finish(run.ppl.chunks, saved_chunks);
  const PerplexityResult& r = run.ppl;
  const double tps = double(r.chunks * po.n_ctx) / r.seconds;
  const KldResult& k = run.kld;
  if (json) {
    nlohmann::ordered_json j = {{"model", vm["model"].as<std::string>()}, {"text", text_path}};
    j.update(eval::perplexity_json(r));
    if (compare) {
      j["kld"] = eval::kld_json(k, base);
      j["paired"] = eval::paired_json(k);
    }
    print_json(nlohmann::json(j));
    return 0;
  }
  std::fprintf(stderr, "\n");
  std::printf("chunks: %lld, tokens scored: %lld, %.1f s (%.1f tokens/s evaluated)\n", static_cast<long long>(r.chunks),
              static_cast<long long>(r.tokens_scored), r.seconds, tps);
  std::printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
  if (compare) {
    std::printf("vs base, over its %lld positions: PPL(base) %.4f, PPL(Q) %.4f, Cor(nll) %.4f\n",
                static_cast<long long>(k.paired_n), k.ppl_base, k.ppl, k.nll_correlation);
    std::printf("  mean ln(PPL(Q)/PPL(base)) %+.6f +/- %.6f (paired); PPL(Q) - PPL(base) %+.4f +/- %.4f (paired;"
                " %.4f were the runs independent)\n",
                k.dlnppl, k.dlnppl_err, k.dppl, k.dppl_err, k.dppl_err_unpaired);
    std::printf("KLD over %lld positions: mean %.6f +/- %.6f, median %.6f, p90 %.6f, p99 %.6f, p99.9 %.6f, max %.6f\n",
                static_cast<long long>(k.n), k.mean, k.mean_err, k.median, k.p90, k.p99, k.p999, k.max);
    std::printf("top-1 agreement: %.2f%%; delta p (right token): mean %+.5f, rms %.5f\n", 100.0 * k.top1_agree,
                k.dp_mean, k.dp_rms);
    if (base.header().k == 0)
      std::printf("base: every token in 16 bits; the rounding moves the mean KLD by at most %.2g\n", k.rounding_bound);
    else
      std::printf("base: top %lld tokens, the rest merged (a lower bound); merged mass: mean %.4f\n",
                  static_cast<long long>(base.header().k), k.mean_rest);
  }
  return 0;
}

const Registrar reg({"perplexity", "measure perplexity of a model on a text (llama-perplexity method)", run});

}  // namespace
}  // namespace bonsai::cli
