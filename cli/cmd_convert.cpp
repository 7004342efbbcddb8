// bonsai convert -m SRC -o OUT --type T: one weight type for a whole model, no calibration.
#include <cstdio>

#include "cli/command.h"
#include "formats/error.h"
#include "formats/model_file.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  opts.add_options()("out,o", po::value<std::string>()->required(), "output: FILE.gguf or FILE.bonsai")(
      "type", po::value<std::string>()->default_value("f16"), "type of the 2-D weights: f32, f16, bf16 or q8_0");
  add_threads(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai convert -m SRC -o OUT.gguf|OUT.bonsai [--type f32|f16|bf16|q8_0]",
             "Converts between a Hugging Face folder, GGUF, .bonsai and llama2.c checkpoints with one\n"
             "type for the 2-D weights (norms and biases stay F32), keeping the architecture and\n"
             "tokenizer metadata llama.cpp needs, so llama.cpp can load and measure the same file.\n"
             "For calibrated ternary types use `bonsai quantize`.\n\n"
             "example:\n  bonsai convert -m zh-tiny-qwen3/ -o zh-tiny-f32.gguf --type f32",
             opts, {}, vm))
    return 0;
  const std::string type_name = vm["type"].as<std::string>();
  const TypeTraits* t = find_type(type_name);
  if (!t || !(t->id == TypeId::F32 || t->id == TypeId::F16 || t->id == TypeId::BF16 || t->id == TypeId::Q8_0))
    throw po::error("--type must be f32, f16, bf16 or q8_0 (got '" + type_name + "')");
  const std::string out = vm["out"].as<std::string>();
  const TensorSet src = open_model(vm["model"].as<std::string>());
  convert_model(src, t->id, out);
  std::printf("wrote %s (%s, %zu tensors)\n", out.c_str(), t->name, src.tensors.size());
  return 0;
}

const Registrar reg({"convert", "convert a model between formats with one weight type", run});

}  // namespace
}  // namespace bonsai::cli
