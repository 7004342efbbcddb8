// bonsai — ternary quantization toolchain. `bonsai <command> --help` for each command.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>

#include "cli/command.h"
#include "formats/error.h"

namespace bonsai::cli {

std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}

bool parse(const std::vector<std::string>& args, const std::string& usage, const std::string& about,
           po::options_description& opts, const po::positional_options_description& pos,
           po::variables_map& vm) {
  opts.add_options()("help,h", "show this help");
  po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: " << usage << "\n\n" << about << "\n\n" << opts << "\n";
    return false;
  }
  po::notify(vm);
  if (vm.count("threads") && vm["threads"].as<int>() > 0) omp_set_num_threads(vm["threads"].as<int>());
  return true;
}

void add_json(po::options_description& o) {
  o.add_options()("json", po::bool_switch(), "print one JSON object (for scripts) instead of text");
}

void add_threads(po::options_description& o) {
  o.add_options()("threads,t", po::value<int>()->default_value(0), "worker threads (0: all cores)");
}

void add_model(po::options_description& o) {
  o.add_options()("model,m", po::value<std::string>()->required(),
                  "model: GGUF, .bonsai, Hugging Face folder or llama2.c .bin");
}

void add_device(po::options_description& o) {
  o.add_options()("device", po::value<std::string>()->default_value("cpu"), "compute device: cpu or cuda[:N]");
}

}  // namespace bonsai::cli

namespace {

void usage(std::ostream& os) {
  os << "bonsai " BONSAI_VERSION " — calibrated ternary quantization for LLMs\n\n"
     << "usage: bonsai <command> [options]    (bonsai <command> --help for details)\n\ncommands:\n";
  auto cmds = bonsai::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return std::string(a.name) < b.name; });
  for (const auto& c : cmds) {
    os << "  " << c.name;
    for (size_t i = std::string(c.name).size(); i < 12; ++i) os << ' ';
    os << c.summary << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bonsai::cli;
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  if (name == "--version") {
    std::cout << "bonsai " BONSAI_VERSION "\n";
    return 0;
  }
  for (const auto& c : commands()) {
    if (name != c.name) continue;
    try {
      return c.run(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const po::error& e) {
      std::cerr << "bonsai " << name << ": " << e.what() << " (see bonsai " << name << " --help)\n";
      return 2;
    } catch (const bonsai::Error& e) {
      std::cerr << "bonsai " << name << ": error: " << e.what() << "\n";
      return 1;
    } catch (const std::bad_alloc&) {
      std::cerr << "bonsai " << name << ": error: out of memory\n";
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "bonsai " << name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "bonsai: unknown command '" << name << "'\n\n";
  usage(std::cerr);
  return 2;
}
