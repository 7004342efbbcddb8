// Mixed-precision plans: YAML rules that give every tensor of a model a storage type and, for the
// ternary types, a method (configs/README.md documents the format; configs/*.yaml are presets,
// compiled into the binary). Later rules override earlier ones; tensors no rule matches take the
// plan's default; 1-D tensors (norms, biases) are always F32.
#pragma once
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "formats/tensor_set.h"
#include "formats/types.h"
#include "quantize/ternary.h"

namespace bonsai::quant {

struct PlanRule {
  int line = 0;            // in the plan file, for errors
  std::string match;       // ECMAScript regex, searched in the GGUF tensor name
  std::regex re;
  // Inclusive ranges of block indices the rule is limited to (negative: counted from the end,
  // -1 = the last block); empty = any tensor. A rule with layers never matches a tensor outside
  // the blocks.
  std::vector<std::pair<int64_t, int64_t>> layers;
  TypeId type = TypeId::PTQ1_0;
  std::optional<Method> method;
  std::string option;     // a command-line override ("--tensor-type ..."); empty for a file rule
  bool required = true;   // a rule that matches no matrix is an error
};

struct Plan {
  std::string source;  // the file, or "preset NAME"
  std::string name;    // the preset name or the file's stem
  TypeId default_type = TypeId::PTQ1_0;
  std::optional<Method> method;  // the plan's method for ternary tensors no rule gives one
  std::vector<PlanRule> rules;
};

// `bonsai quantize --type`: every ternary type the plan names (its default and its rules) becomes
// `type` (PTQ1_0 or PQ2_0; Error otherwise), so one plan serves stage 1 and stage 2.
void set_ternary_type(Plan& plan, TypeId type);

// The types a plan may name.
bool plan_type_allowed(TypeId t);
bool is_ternary(TypeId t);  // PTQ1_0, PQ2_0: quantized by the calibrated methods

// Parses YAML text; errors name `source` and the line.
Plan parse_plan(const std::string& yaml, const std::string& source);
// A path to a YAML file, else a preset name (configs/NAME.yaml compiled in); Error listing the
// presets when it is neither.
Plan load_plan(const std::string& path_or_preset);
std::vector<std::string> preset_names();

// llama-quantize-style overrides from the command line, applied after every rule of the plan
// (so they win) and shown in the printed plan: --tensor-type REGEX=TYPE (repeatable, in order),
// --output-tensor-type TYPE (output.weight; nothing when the model ties its head) and
// --token-embedding-type TYPE (token_embd.weight). Errors name the option.
struct PlanOverrides {
  std::vector<std::string> tensor_types;
  std::string output_type, token_embd_type;  // empty: not given
};
void apply_overrides(Plan& plan, const PlanOverrides& o);

// One tensor's decision.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> ne;
  TypeId type = TypeId::F32;
  std::optional<Method> method;  // ternary types only
  int64_t block = -1;            // blk.N index, -1 outside the blocks
  uint64_t bytes = 0;
  int rule_line = 0;             // the rule that decided it (0: the default / 1-D)
  std::string rule_option;       // or the command-line override that did
};

struct ResolvedPlan {
  std::string plan_name, plan_source;
  std::vector<TensorPlan> tensors;  // in the model's order
  uint64_t total_bytes = 0;
  int64_t total_elems = 0;
  uint64_t block_linear_bytes = 0;  // the matrices inside the blocks
  int64_t block_linear_elems = 0;

  const TensorPlan* find(const std::string& name) const;
  bool needs_importance() const;  // some tensor's method uses E[x²] (optimal, gptq)
  bool needs_gram() const;        // some tensor uses gptq
  // The type most block matrix elements have: what general.file_type names.
  TypeId dominant_block_type() const;
  std::string json() const;   // the resolved plan, for bonsai.plan
  std::string table() const;  // tensor, shape, type, method, bytes; then the totals
};

// The block index of a GGUF tensor name ("blk.12.attn_q.weight" -> 12), -1 otherwise.
int64_t block_index(const std::string& name);

// Applies the plan to the tensors of a model with n_layer blocks. `method` is the command line's
// --method (overrides the plan's own; a rule's method overrides both); `fallback` applies when
// neither gives one. Errors (naming the plan source): a rule that matches no tensor, a type whose
// block size does not divide a tensor's rows.
ResolvedPlan resolve_plan(const Plan& plan, const std::vector<Tensor>& tensors, int64_t n_layer,
                          std::optional<Method> method, Method fallback);

}  // namespace bonsai::quant
