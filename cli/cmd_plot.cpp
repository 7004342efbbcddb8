// bonsai plot -i TABLE -o OUT.svg --x COL --y COL: a scatter plot of two columns of a CSV/TSV
// table, with the one SVG writer (plot/svg.h) every bonsai figure uses.
#include <cstdio>
#include <sstream>

#include "cli/command.h"
#include "formats/error.h"
#include "formats/number.h"
#include "formats/text_file.h"
#include "plot/svg.h"

namespace bonsai::cli {
namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream ss(line);
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

double number(const std::string& s, const std::string& where) {
  size_t used = 0;
  const double v = leading_double(s, &used);
  if (used == 0 || used != s.size()) throw Error(cat(where, ": '", s, "' is not a number"));
  return v;
}

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("input,i", po::value<std::string>()->required(), "table with a header line (TSV, or CSV)")(
      "output,o", po::value<std::string>()->required(), "SVG to write")(
      "x", po::value<std::string>()->required(), "column for x")("y", po::value<std::string>()->required(), "column for y")(
      "label", po::value<std::string>(), "column naming each point")(
      "ref", po::value<std::vector<std::string>>()->multitoken(), "NAME=Y horizontal reference line (repeatable)")(
      "log-y", po::bool_switch(), "logarithmic y axis")("title", po::value<std::string>()->default_value(""), "title")(
      "x-label", po::value<std::string>(), "x axis label (default: the column)")(
      "y-label", po::value<std::string>(), "y axis label (default: the column)");
  po::variables_map vm;
  if (!parse(args, "bonsai plot -i TABLE.tsv -o OUT.svg --x COL --y COL [--label COL] [--ref NAME=Y]... [--log-y]",
             "Draws column --y against column --x of a table (tab-separated when the header has a tab,\n"
             "else comma-separated) as labelled points, with optional horizontal reference lines.\n"
             "Rows with an empty x or y are left out.\n\n"
             "example:\n  bonsai plot -i docs/stage2-ppl-bpw.tsv -o docs/stage2-ppl-bpw.svg --x bpw_ternary --y ppl \\\n"
             "      --label name --ref BF16=712.122 --log-y",
             opts, {}, vm))
    return 0;
  const std::string in = vm["input"].as<std::string>();
  std::istringstream text(read_text_file(in));
  std::string line;
  if (!std::getline(text, line)) fail(in, "is empty: expected a header line");
  const char sep = line.find('\t') != std::string::npos ? '\t' : ',';
  const std::vector<std::string> header = split(line, sep);
  auto column = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    fail(in, "has no column '", name, "'");
  };
  const size_t cx = column(vm["x"].as<std::string>()), cy = column(vm["y"].as<std::string>());
  const bool labelled = vm.count("label");
  const size_t cl = labelled ? column(vm["label"].as<std::string>()) : 0;
  plot::XYChart c;
  c.title = vm["title"].as<std::string>();
  c.x_label = vm.count("x-label") ? vm["x-label"].as<std::string>() : header[cx];
  c.y_label = vm.count("y-label") ? vm["y-label"].as<std::string>() : header[cy];
  c.log_y = vm["log-y"].as<bool>();
  plot::Series s;
  s.name = header[cy];
  int line_no = 1;
  while (std::getline(text, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto cells = split(line, sep);
    const std::string at = cat(in, ":", line_no);
    if (cells.size() != header.size()) throw Error(cat(at, ": ", cells.size(), " cells, the header has ", header.size()));
    if (cells[cx].empty() || cells[cy].empty()) continue;
    s.x.push_back(number(cells[cx], at));
    s.y.push_back(number(cells[cy], at));
    if (labelled) s.labels.push_back(cells[cl]);
  }
  c.series.push_back(std::move(s));
  if (vm.count("ref"))
    for (const std::string& r : vm["ref"].as<std::vector<std::string>>()) {
      const size_t eq = r.rfind('=');
      if (eq == std::string::npos || eq == 0) throw Error(cat("--ref ", r, ": expected NAME=Y"));
      c.refs.push_back({r.substr(0, eq), number(r.substr(eq + 1), "--ref " + r)});
    }
  write_text_file(vm["output"].as<std::string>(), plot::render(c));
  std::printf("wrote %s (%zu points)\n", vm["output"].as<std::string>().c_str(), c.series[0].x.size());
  return 0;
}

const Registrar reg({"plot", "draw two columns of a table as an SVG scatter plot", run});

}  // namespace
}  // namespace bonsai::cli
