// bonsai generate -m MODEL -p PROMPT: streams a continuation.
#include <chrono>
#include <cstdio>

#include "cli/command.h"
#include "formats/error.h"
#include "runtime/load.h"
#include "runtime/sampler.h"
#include "runtime/transformer.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  SamplerOptions so;
  opts.add_options()("prompt,p", po::value<std::string>()->default_value(""), "prompt text (empty: start from BOS)")(
      "n-predict,n", po::value<int64_t>()->default_value(128), "tokens to generate")(
      "ctx,c", po::value<int64_t>()->default_value(0), "context size (0: prompt + n, at most the training context)")(
      "temp", po::value<float>(&so.temp)->default_value(so.temp), "temperature; 0 is greedy")(
      "top-k", po::value<int>(&so.top_k)->default_value(so.top_k), "keep the k most likely tokens (0: off)")(
      "top-p", po::value<float>(&so.top_p)->default_value(so.top_p), "nucleus: smallest set with this mass (1: off)")(
      "min-p", po::value<float>(&so.min_p)->default_value(so.min_p), "drop tokens below min-p x the top probability")(
      "repeat-penalty", po::value<float>(&so.repeat_penalty)->default_value(so.repeat_penalty),
      "penalise the last 64 tokens (1: off)")(
      "seed", po::value<uint64_t>(&so.seed)->default_value(so.seed), "random seed");
  add_threads(opts);
  add_device(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai generate -m MODEL [-p PROMPT] [-n 128] [--temp 0.8] [--seed S]",
             "Generates text after the prompt, printing tokens as they come. --temp 0 is greedy\n"
             "decoding (deterministic); otherwise the sampler applies repeat penalty, top-k, top-p,\n"
             "min-p and temperature in that order. Speed is printed on stderr at the end.\n\n"
             "example:\n  bonsai generate -m stories260K.gguf --temp 0 -n 40",
             opts, {}, vm))
    return 0;
  auto backend = make_backend(vm["device"].as<std::string>(), vm["threads"].as<int>());
  const auto model = load_model(vm["model"].as<std::string>());
  const auto tok = model_tokenizer(*model);
  const int64_t n_gen = vm["n-predict"].as<int64_t>();
  std::vector<int32_t> prompt = tok->encode(vm["prompt"].as<std::string>(), tok->add_bos_default(), true);
  if (prompt.empty()) prompt.push_back(tok->bos());
  int64_t n_ctx = vm["ctx"].as<int64_t>();
  if (n_ctx <= 0) n_ctx = std::min<int64_t>(int64_t(prompt.size()) + n_gen, std::max<int64_t>(model->cfg.n_ctx_train, 512));
  if (int64_t(prompt.size()) >= n_ctx) throw Error(cat("the prompt has ", prompt.size(), " tokens; the context holds ", n_ctx));

  Session s(*model, *backend, n_ctx, std::max<int64_t>(int64_t(prompt.size()), 1));
  Sampler sampler(so);
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<float> logits(size_t(model->cfg.n_vocab));
  const auto t0 = std::chrono::steady_clock::now();
  s.eval(prompt.data(), int64_t(prompt.size()), int64_t(prompt.size()) - 1, logits.data());
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  std::string shown;
  int64_t produced = 0;
  while (produced < n_gen && s.pos() < n_ctx) {
    const int32_t t = sampler.sample(logits.data(), model->cfg.n_vocab);
    if (t == tok->eos()) break;
    out.push_back(t);
    ++produced;
    // Decode the whole continuation and print what is new: pieces that are partial UTF-8 or
    // need their neighbours (SentencePiece spaces) come out right.
    const std::string text = tok->decode(out);
    if (text.size() > shown.size() && text.compare(0, shown.size(), shown) == 0) {
      std::fwrite(text.data() + shown.size(), 1, text.size() - shown.size(), stdout);
      std::fflush(stdout);
      shown = text;
    }
    if (s.pos() >= n_ctx) break;
    s.eval(&t, 1, 0, logits.data());
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("\n");
  std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s; generated: %lld tokens, %.1f tokens/s\n", prompt.size(),
               double(prompt.size()) / std::chrono::duration<double>(t1 - t0).count(), static_cast<long long>(produced),
               double(produced) / std::chrono::duration<double>(t2 - t1).count());
  return 0;
}

const Registrar reg({"generate", "generate text from a prompt (greedy or sampled)", run});

}  // namespace
}  // namespace bonsai::cli
