// bonsai tokenize -m MODEL|TOKENIZER -f TEXT: token ids (or pieces), as llama-tokenize prints them.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/json_out.h"
#include "formats/error.h"
#include "runtime/load.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("model,m", po::value<std::string>()->required(),
                     "model file or folder, tokenizer.json, or a llama2.c tokenizer .bin")(
      "file,f", po::value<std::string>(), "text file to tokenize")(
      "prompt,p", po::value<std::string>(), "text to tokenize (instead of -f)")(
      "pieces", po::bool_switch(), "print the token pieces instead of ids")(
      "no-bos", po::bool_switch(), "do not add BOS even when the vocabulary adds one")(
      "no-parse-special", po::bool_switch(), "treat special-token text as plain text");
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai tokenize -m MODEL|TOKENIZER (-f TEXT | -p TEXT) [--pieces]",
             "Tokenizes text as the model's runtime does and prints the ids on one line, space\n"
             "separated (or the pieces with --pieces), like llama.cpp's llama-tokenize. For\n"
             "debugging tokenization against other tools.\n\n"
             "example:\n  bonsai tokenize -m tokenizer.json -p 'Hello world, 你好'",
             opts, {}, vm))
    return 0;
  std::string text;
  if (vm.count("file")) {
    const std::string path = vm["file"].as<std::string>();
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(path, "cannot read the text file");
    std::ostringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  } else if (vm.count("prompt")) {
    text = vm["prompt"].as<std::string>();
  } else {
    throw po::error("give the text with -f FILE or -p TEXT");
  }
  const auto tok = load_tokenizer(vm["model"].as<std::string>());
  const auto ids = tok->encode(text, tok->add_bos_default() && !vm["no-bos"].as<bool>(),
                               !vm["no-parse-special"].as<bool>());
  if (vm["json"].as<bool>()) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int32_t id : ids) pieces.push_back(tok->piece(id));
    print_json({{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}});
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += vm["pieces"].as<bool>() ? tok->piece(ids[i]) : std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

const Registrar reg({"tokenize", "print the token ids or pieces of a text", run});

}  // namespace
}  // namespace bonsai::cli
