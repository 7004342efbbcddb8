// `bonsai plan --budget`: a type per block matrix minimising the summed predicted loss (each
// tensor's sensitivity, the KLD when it alone takes that type) within a size budget, solved
// exactly (mixed/knapsack.h), written as a plan YAML that `bonsai quantize --plan` takes.
//
// Budgets: "2.2bpw" is bits per weight over the block linear weights (the matrices inside the
// transformer blocks: the tensors the plan chooses types for); a size ("40MB", "38.5MiB", "1.2GB",
// or plain bytes) is the summed tensor data of the whole model (the blocks' matrices plus what
// the base plan gives the other tensors: embedding, head, norms), so the blocks get that size less
// the fixed rest. The GGUF file adds its metadata (tokenizer, keys) on top of either.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/tensor_set.h"
#include "mixed/knapsack.h"
#include "mixed/sensitivity.h"
#include "quantize/plan.h"

namespace bonsai::mixed {

struct Budget {
  bool is_bpw = false;
  double bpw = 0;       // when is_bpw
  uint64_t bytes = 0;   // otherwise
  std::string text;     // as given
};
// Error naming the option for anything else than NUMBERbpw, NUMBER[kB|MB|GB|KiB|MiB|GiB|B].
Budget parse_budget(const std::string& s);

struct BudgetChoice {
  std::string name;
  TypeId type = TypeId::F32;
  uint64_t bytes = 0;
  double loss = 0;
};

struct BudgetPlan {
  std::string yaml;
  std::vector<BudgetChoice> choices;  // the block matrices, in the sensitivity table's order
  KnapsackResult knapsack;
  uint64_t block_budget = 0;   // bytes the block matrices may take
  uint64_t fixed_bytes = 0;    // every other tensor, as the base plan stores it
  int64_t block_elems = 0;
  quant::ResolvedPlan resolved;  // the YAML read back and resolved against the model
  double bpw() const { return block_elems ? 8.0 * double(knapsack.bytes) / double(block_elems) : 0; }
};

// tensors/n_layer: the model's; base: the plan the non-block tensors take their types from.
// Error naming `sensitivity_source` when the table lacks a type or a block matrix of the model.
BudgetPlan plan_for_budget(const SensitivityTable& table, const std::string& sensitivity_source,
                           const std::vector<TypeId>& types, const Budget& budget, const std::vector<Tensor>& tensors,
                           int64_t n_layer, const quant::Plan& base, const std::string& name);

// An ECMAScript regex matching exactly `s`.
std::string exact_regex(const std::string& s);

}  // namespace bonsai::mixed
