#include "mixed/budget.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "formats/error.h"
#include "formats/number.h"
#include "quantize/pipeline.h"

namespace bonsai::mixed {

Budget parse_budget(const std::string& s) {
  Budget b;
  b.text = s;
  size_t used = 0;
  const double v = leading_double(s, &used);
  std::string unit = s.substr(used);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (used == 0 || !std::isfinite(v) || v <= 0)
    throw Error(cat("--budget ", s, ": expected a positive number with a unit, e.g. 2.2bpw or 40MB"));
  if (unit == "bpw") {
    b.is_bpw = true;
    b.bpw = v;
    return b;
  }
  static const std::map<std::string, double> units = {{"", 1},         {"b", 1},          {"kb", 1e3},
                                                       {"mb", 1e6},      {"gb", 1e9},       {"kib", 1024.0},
                                                       {"mib", 1048576.0}, {"gib", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end())
    throw Error(cat("--budget ", s, ": unknown unit '", s.substr(used), "' (bpw, B, kB, MB, GB, KiB, MiB, GiB)"));
  b.bytes = uint64_t(std::floor(v * it->second));
  return b;
}

std::string exact_regex(const std::string& s) {
  std::string o = "^";
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) o += '\\';
    o += c;
  }
  return o + "$";
}

BudgetPlan plan_for_budget(const SensitivityTable& table, const std::string& src, const std::vector<TypeId>& types,
                           const Budget& budget, const std::vector<Tensor>& tensors, int64_t n_layer,
                           const quant::Plan& base, const std::string& name) {
  if (types.empty()) throw Error("--types: no candidate type");
  for (TypeId t : types)
    if (!table.has(t)) fail(src, "has no measurements for ", traits(t).name, " (measure it with bonsai sensitivity --types)");
  const quant::ResolvedPlan rb = quant::resolve_plan(base, tensors, n_layer, std::nullopt, quant::kDefaultMethod);
  BudgetPlan p;
  p.fixed_bytes = rb.total_bytes - rb.block_linear_bytes;
  p.block_elems = rb.block_linear_elems;
  // The block matrices: the model's, each measured in the table.
  std::vector<const TensorSensitivity*> items;
  for (const auto& t : rb.tensors) {
    if (t.block < 0 || t.ne.size() < 2) continue;
    const TensorSensitivity* e = table.find(t.name);
    if (!e) fail(src, "has no entry for the model's block matrix '", t.name, "' (measured on another model?)");
    if (e->ne != t.ne) fail(src, "'", t.name, "' has another shape than the model's");
    items.push_back(e);
  }
  if (budget.is_bpw) {
    p.block_budget = uint64_t(std::floor(budget.bpw * double(p.block_elems) / 8.0));
  } else {
    if (budget.bytes <= p.fixed_bytes)
      throw Error(cat("--budget ", budget.text, ": the tensors outside the blocks already take ", p.fixed_bytes,
                      " bytes under the base plan ", base.name));
    p.block_budget = budget.bytes - p.fixed_bytes;
  }
  std::vector<std::vector<Option>> opts;
  for (const TensorSensitivity* e : items) {
    std::vector<Option> o;
    for (TypeId t : types) {
      // A type whose block does not divide the rows cannot be chosen for this tensor.
      if (e->ne[0] % traits(t).block_elems) continue;
      o.push_back({e->bytes.at(t), e->kld.at(t)});
    }
    if (o.empty()) fail(src, "no candidate type fits the rows of '", e->name, "'");
    opts.push_back(std::move(o));
  }
  try {
    p.knapsack = choose_options(opts, p.block_budget);
  } catch (const Error& e) {
    throw Error(cat("--budget ", budget.text, " (", p.block_budget, " bytes for the block matrices): ", e.what()));
  }
  std::map<TypeId, int64_t> count;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<TypeId> fit;
    for (TypeId t : types)
      if (items[i]->ne[0] % traits(t).block_elems == 0) fit.push_back(t);
    const TypeId t = fit[size_t(p.knapsack.pick[i])];
    p.choices.push_back({items[i]->name, t, items[i]->bytes.at(t), items[i]->kld.at(t)});
    count[t] += items[i]->elements();
  }
  TypeId def = p.choices.empty() ? base.default_type : p.choices[0].type;
  for (const auto& [t, n] : count)
    if (n > count[def]) def = t;

  // The YAML: the non-block matrices as the base plan has them, then one rule per block matrix
  // that differs from the default.
  char head[512];
  std::snprintf(head, sizeof head,
                "# Written by bonsai plan --budget %s from %s: predicted summed KLD %.6g, block matrices %llu of %llu "
                "bytes (%.4f bits/weight over the block linear weights).\n",
                budget.text.c_str(), src.c_str(), p.knapsack.loss, static_cast<unsigned long long>(p.knapsack.bytes),
                static_cast<unsigned long long>(p.block_budget), p.bpw());
  std::string y = head;
  y += "name: " + name + "\n";
  y += "description: budget " + budget.text + ", types chosen per tensor by sensitivity\n";
  y += std::string("default: ") + traits(def).name + "\n";
  y += "method: " + table.method + "\n";
  std::string rules;
  auto rule = [&](const std::string& n, TypeId t) {
    rules += "  - match: '" + exact_regex(n) + "'\n    type: " + traits(t).name + "\n";
  };
  for (const auto& t : rb.tensors)
    if (t.block < 0 && t.ne.size() >= 2 && t.type != def) rule(t.name, t.type);
  for (const BudgetChoice& c : p.choices)
    if (c.type != def) rule(c.name, c.type);
  y += rules.empty() ? "rules: []\n" : "rules:\n" + rules;

  // Read back: the plan quantize will see must give exactly these types and sizes.
  const quant::Plan back = quant::parse_plan(y, name + " (generated)");
  p.resolved = quant::resolve_plan(back, tensors, n_layer, std::nullopt, quant::kDefaultMethod);
  for (const BudgetChoice& c : p.choices) {
    const quant::TensorPlan* tp = p.resolved.find(c.name);
    if (!tp || tp->type != c.type) throw Error(cat("internal: the generated plan does not give '", c.name, "' its type"));
  }
  if (p.resolved.block_linear_bytes != p.knapsack.bytes || p.resolved.total_bytes != p.fixed_bytes + p.knapsack.bytes)
    throw Error("internal: the generated plan's sizes differ from the choice");
  p.yaml = std::move(y);
  return p;
}

}  // namespace bonsai::mixed
