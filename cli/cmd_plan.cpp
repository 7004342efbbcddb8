// bonsai plan --budget B -m MODEL --sensitivity FILE -o plan.yaml: the type per block matrix that
// minimises the summed sensitivity within the budget (mixed/budget.h), as a plan YAML.
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/command.h"
#include "cli/json_out.h"
#include "cli/progress.h"
#include "formats/error.h"
#include "formats/model_file.h"
#include "formats/text_file.h"
#include "mixed/budget.h"
#include "quantize/pipeline.h"
#include "runtime/model.h"

namespace bonsai::cli {
namespace {

int run(const std::vector<std::string>& args) {
  po::options_description opts("options");
  add_model(opts);
  opts.add_options()("budget", po::value<std::string>()->required(),
                     "2.2bpw (bits/weight over the block linear weights) or a size of all tensor data (40MB, 38MiB)")(
      "sensitivity", po::value<std::string>()->required(), "the table bonsai sensitivity wrote")(
      "types", po::value<std::string>(), "candidate types, comma-separated (default: every type the table measured)")(
      "base-plan", po::value<std::string>()->default_value(quant::kDefaultPlan),
      "plan whose types the tensors outside the blocks keep (embedding, head)")(
      "name", po::value<std::string>(), "the plan's name (default: the output's stem)")(
      "output,o", po::value<std::string>()->required(), "plan YAML to write")(
      "svg", po::value<std::string>(), "also draw the chosen bits/weight per tensor (layers x kinds)");
  add_json(opts);
  po::variables_map vm;
  if (!parse(args, "bonsai plan --budget 2.2bpw|40MB -m MODEL --sensitivity FILE [--types ...] -o plan.yaml",
             "Chooses a type for every block matrix (the linear weights inside the transformer blocks)\n"
             "minimising the summed sensitivity (each tensor's KLD when it alone takes the type) with the\n"
             "size within the budget: the multiple-choice knapsack, solved exactly by dynamic programming\n"
             "over tensor sizes (in units of their greatest common divisor). The tensors outside the\n"
             "blocks keep the base plan's types. A bpw budget is bits per weight over the block linear\n"
             "weights; a size budget counts all tensor data (the blocks get it less the fixed rest).\n"
             "Writes a plan YAML for bonsai quantize --plan, and prints the predicted size against the\n"
             "budget.\n\n"
             "example:\n  bonsai plan --budget 2.2bpw -m zh-tiny-qwen3 --sensitivity zh.sensitivity.json -o b22.yaml",
             opts, {}, vm))
    return 0;
  const bool json = vm["json"].as<bool>();
  const std::string sens_path = vm["sensitivity"].as<std::string>(), out = vm["output"].as<std::string>();
  const mixed::SensitivityTable table = mixed::read_sensitivity(sens_path);
  const std::vector<TypeId> types =
      vm.count("types") ? mixed::parse_type_list(vm["types"].as<std::string>(), "--types") : table.types;
  const mixed::Budget budget = mixed::parse_budget(vm["budget"].as<std::string>());
  const TensorSet src = open_model(vm["model"].as<std::string>());
  const ModelConfig cfg = read_model_config(src);
  const quant::Plan base = quant::load_plan(vm["base-plan"].as<std::string>());
  const std::string name = vm.count("name") ? vm["name"].as<std::string>() : std::filesystem::path(out).stem().string();
  const mixed::BudgetPlan p =
      mixed::plan_for_budget(table, sens_path, types, budget, src.tensors, cfg.n_layer, base, name);
  write_text_file(out, p.yaml);
  std::map<std::string, int64_t> per_type;
  std::map<std::string, double> bpw_of;
  for (const auto& c : p.choices) {
    per_type[traits(c.type).name]++;
    bpw_of[c.name] = 8.0 * double(traits(c.type).block_bytes) / double(traits(c.type).block_elems);
  }
  if (vm.count("svg")) {
    plot::HeatmapFigure f;
    f.title = cat("plan ", name, " (budget ", budget.text, "): bits/weight chosen per tensor");
    f.value_label = "bits/weight";
    f.log_scale = false;
    f.panels.push_back(mixed::tensor_grid(table.tensors, bpw_of, name));
    write_text_file(vm["svg"].as<std::string>(), plot::render(f));
  }
  const double bpw_budget = 8.0 * double(p.block_budget) / double(p.block_elems);
  if (json) {
    nlohmann::json j = {{"plan", out},
                        {"budget", budget.text},
                        {"block_budget_bytes", p.block_budget},
                        {"block_bytes", p.knapsack.bytes},
                        {"block_elems", p.block_elems},
                        {"bpw_block_linear", p.bpw()},
                        {"bpw_budget", bpw_budget},
                        {"fixed_bytes", p.fixed_bytes},
                        {"total_tensor_bytes", p.resolved.total_bytes},
                        {"predicted_kld_sum", p.knapsack.loss},
                        {"exact", p.knapsack.exact},
                        {"unit_bytes", p.knapsack.unit},
                        {"types", per_type}};
    print_json(j);
    return 0;
  }
  std::printf("%-28s %-8s %10s %12s\n", "tensor", "type", "bytes", "KLD alone");
  for (const auto& c : p.choices)
    std::printf("%-28s %-8s %10llu %12.4g\n", c.name.c_str(), traits(c.type).name, static_cast<unsigned long long>(c.bytes),
                c.loss);
  std::string mix;
  for (const auto& [t, n] : per_type) mix += cat(mix.empty() ? "" : ", ", n, " ", t);
  std::printf("types: %s\n", mix.c_str());
  std::printf("block linear weights: %llu of %llu budget bytes, %.4f bits/weight (budget %.4f) over %lld weights\n",
              static_cast<unsigned long long>(p.knapsack.bytes), static_cast<unsigned long long>(p.block_budget), p.bpw(),
              bpw_budget, static_cast<long long>(p.block_elems));
  std::printf("all tensor data: %s (%llu bytes; outside the blocks %llu, as plan %s)%s\n",
              human_bytes(double(p.resolved.total_bytes)).c_str(), static_cast<unsigned long long>(p.resolved.total_bytes),
              static_cast<unsigned long long>(p.fixed_bytes), base.name.c_str(),
              budget.is_bpw ? "" : cat(" against the budget of ", budget.bytes, " bytes").c_str());
  std::printf("predicted summed KLD %.6g (%s)\n", p.knapsack.loss,
              p.knapsack.exact ? "exact optimum over the candidate types"
                               : cat("optimal with sizes rounded up to ", p.knapsack.unit, "-byte units").c_str());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

const Registrar reg({"plan", "choose a type per tensor within a size budget from sensitivities (plan YAML)", run});

}  // namespace
}  // namespace bonsai::cli
