// The subcommand table and the option helpers every subcommand shares, so an option such as
// --json or --threads is defined (name, meaning, default) in exactly one place.
#pragma once
#include <boost/program_options.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bonsai::cli {

namespace po = boost::program_options;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // args after the subcommand name
};

// Registered by each cmd_*.cpp through a static Registrar.
std::vector<Command>& commands();
struct Registrar {
  explicit Registrar(Command c) { commands().push_back(c); }
};

// Parses args against `opts` (positional names in `pos`). Prints help and returns false for
// --help; throws po::error for bad options (main prints it with the subcommand's usage).
bool parse(const std::vector<std::string>& args, const std::string& usage, const std::string& about,
           po::options_description& opts, const po::positional_options_description& pos,
           po::variables_map& vm);

// Shared option definitions.
void add_json(po::options_description& o);     // --json
void add_threads(po::options_description& o);  // -t/--threads
void add_model(po::options_description& o);    // -m/--model (required)
void add_device(po::options_description& o);   // --device cpu|cuda[:N]

}  // namespace bonsai::cli
