// bonsai eval --models A B ... --texts X Y ... -o DIR: every model x text in one resumable job.
#include <cstdio>

#include "cli/command.h"
#include "cli/json_out.h"
#include "cli/progress.h"
#include "eval/eval.h"
#include "formats/error.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  eval::EvalOptions o;
  opts.add_options()("models", po::value<std::vector<std::string>>(&o.models)->multitoken(),
                     "models to measure (GGUF, .bonsai, Hugging Face folder, llama2.c .bin)")(
      "texts", po::value<std::vector<std::string>>(&o.texts)->multitoken(), "evaluation texts (UTF-8)")(
      "tasks", po::value<std::vector<std::string>>(&o.tasks)->multitoken(),
      "task files as KIND:FILE, KIND multiple-choice, hellaswag or winogrande: each model's accuracy (bonsai perplexity --help)")(
      "task-limit", po::value<int64_t>(&o.task_limit)->default_value(o.task_limit), "score only the first N tasks of each (-1: all)")(
      "kl-base-model", po::value<std::string>(&o.kl_base_model),
      "the reference: measured first on every text, its distributions the KLD base of every other cell")(
      "output,o", po::value<std::string>(&o.out_dir)->required(), "output folder (cells already there are skipped)")(
      "ctx,c", po::value<int64_t>(&o.ctx)->default_value(o.ctx), "context size: tokens per chunk")(
      "chunks", po::value<int64_t>(&o.chunks)->default_value(o.chunks), "chunks per text (-1: the whole text)")(
      "kl-top-k", po::value<int64_t>(&o.kl_top_k)->default_value(o.kl_top_k),
      "KLD base layout: 0 keeps every token in 16 bits (exact), K > 0 the top K (a lower bound)")(
      "kl-chunks", po::value<int64_t>(&o.kl_chunks)->default_value(o.kl_chunks),
      "chunks per text whose distributions the base keeps (-1: all; perplexity covers every chunk)");
  add_threads(opts);
  add_device(opts);
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai eval --models A.gguf B.gguf ... --texts X.txt Y.txt ... [--tasks KIND:FILE ...] [--kl-base-model BASE] -o DIR",
             "Every model on every text in one job, each model loaded once, each cell measured\n"
             "exactly as `bonsai perplexity` measures it (the same code and the same JSON fields).\n"
             "With --kl-base-model the base runs first on every text and saves its distributions\n"
             "(DIR/kld/TEXT.kld: ~300 KB a position for a 152k vocabulary, --kl-chunks bounds it);\n"
             "every other cell then adds KLD and the paired difference of perplexities against it\n"
             "(see bonsai perplexity --help).\n"
             "Each finished cell is DIR/cells/MODEL@TEXT.json, written atomically: a killed or\n"
             "interrupted job, run again with the same options, skips the finished cells (and the\n"
             "models whose cells are all finished); a cell measured with other settings is an error.\n"
             "--tasks adds a column per task file, each model's accuracy scored as `bonsai perplexity\n"
             "--multiple-choice` (or --hellaswag, --winogrande) scores it.\n"
             "At the end: DIR/eval.csv, DIR/eval.json (every cell) and DIR/eval.svg (perplexity of\n"
             "each model, one line per text). Names are the files' names without extension.\n\n"
             "example:\n  bonsai eval --kl-base-model zh-tiny-qwen3/ --models q8_0.gguf ptq1.gguf pq2.gguf \\\n"
             "      --texts eval-zh.txt other-zh.txt --chunks 20 --tasks multiple-choice:zh-choices.bin -o eval/",
             opts, {}, vm))
    return 0;
  o.device = vm["device"].as<std::string>();
  o.threads = vm["threads"].as<int>();
  const bool json = vm["json"].as<bool>();
  if (o.ctx < 4 || o.ctx % 2) throw po::error("--ctx must be an even number >= 4");
  if (o.kl_chunks == 0 || o.kl_chunks < -1) throw po::error("--kl-chunks must be -1 (all) or at least 1");
  eval::EvalEvents ev;
  ev.info = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
  std::unique_ptr<Progress> progress;
  ev.progress = [&](int64_t done, int64_t total, const std::string& note) {
    if (!progress) progress = std::make_unique<Progress>("eval chunks", total);
    progress->update(done, note);
  };
  const std::vector<eval::Cell> cells = eval::run_eval(o, ev);
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& c : cells) all.push_back(nlohmann::json(c));
    print_json(all);
    return 0;
  }
  std::printf("%-24s %-24s %20s %14s %22s\n", "model", "text", "PPL", "KLD", "ln(PPL/PPL(base))");
  for (const auto& c : cells) {
    char kld[32] = "", dl[48] = "";
    if (c.contains("kld")) std::snprintf(kld, sizeof kld, "%.6f", c["kld"]["mean"].get<double>());
    if (c.contains("paired"))
      std::snprintf(dl, sizeof dl, "%+.5f +/- %.5f", c["paired"]["delta_ln_ppl"].get<double>(),
                    c["paired"]["delta_ln_ppl_err"].get<double>());
    if (c.contains("task")) {
      std::printf("%-24s %-24s accuracy %.2f%% +/- %.2f%% (%s, chance %.2f%%)\n", c["model"].get<std::string>().c_str(),
                  c["text"].get<std::string>().c_str(), 100 * c["accuracy"].get<double>(),
                  100 * c["accuracy_err"].get<double>(), c["task"].get<std::string>().c_str(), 100 * c["chance"].get<double>());
      continue;
    }
    std::printf("%-24s %-24s %10.4f +/- %7.4f %14s %22s\n", c["model"].get<std::string>().c_str(),
                c["text"].get<std::string>().c_str(), c["ppl"].get<double>(), c["ppl_err"].get<double>(), kld, dl);
  }
  std::printf("wrote %s/eval.csv, eval.json, eval.svg\n", o.out_dir.c_str());
  return 0;
}

const Registrar reg({"eval", "perplexity (and KLD against a base model) of many models on many texts, resumable", run});

}  // namespace
}  // namespace bonsai::cli
