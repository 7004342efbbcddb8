#include "quantize/plan.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/error.h"

namespace bonsai::quant {

namespace {

// {name, YAML text} of configs/*.yaml, generated at configure time (quantize/CMakeLists.txt), so
// the presets need no files beside the installed binary.
const std::pair<const char*, const char*> kPresets[] = {
#include "quantize/presets.inc"
};

// A regex from a plan or the command line, checked before std::regex sees it: rule regexes match
// tensor names ("blk\\.[0-9]+\\.ffn_down"), and std::regex compiles and matches by recursion, so
// an unbounded pattern from a downloaded plan could exhaust the stack; libstdc++ also reads a
// number ({n,m}, \N) into a long without an overflow check (undefined behaviour from 19 digits,
// found by the plan fuzz target). Errors start with `at`.
constexpr size_t kMaxRegexBytes = 256;
constexpr size_t kMaxRegexDigits = 6;

void check_regex_size(const std::string& re, const std::string& at) {
  if (re.size() > kMaxRegexBytes)
    throw Error(cat(at, ": regex of ", re.size(), " bytes (at most ", kMaxRegexBytes, ")"));
  size_t run = 0;
  for (char c : re)
    if ((run = (c >= '0' && c <= '9') ? run + 1 : 0) > kMaxRegexDigits)
      throw Error(cat(at, ": regex '", re, "' holds a number of more than ", kMaxRegexDigits, " digits"));
}

std::string where(const std::string& source, const YAML::Node& n) {
  return cat(source, ":", n.Mark().line + 1);
}

TypeId parse_type(const std::string& s, const std::string& at) {
  const TypeTraits* t = find_type(s);
  if (!t || !plan_type_allowed(t->id))
    throw Error(cat(at, ": unknown type '", s, "' (a plan may use F32, F16, BF16, Q8_0, Q4_0, PQ2_0, PTQ1_0)"));
  return t->id;
}

Method parse_method_at(const std::string& s, const std::string& at) {
  try {
    return parse_method(s);
  } catch (const Error& e) {
    throw Error(cat(at, ": ", e.what()));
  }
}

int64_t parse_index(const std::string& s, const std::string& at) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throw Error(cat(at, ": '", s, "' is not a block index"));
  return v;
}

// One element of `layers`: an integer (negative counts from the end), "a-b" (a, b >= 0) or "a..b".
std::pair<int64_t, int64_t> parse_range(const std::string& s, const std::string& at) {
  if (auto dots = s.find(".."); dots != std::string::npos)
    return {parse_index(s.substr(0, dots), at), parse_index(s.substr(dots + 2), at)};
  if (auto dash = s.find('-', 1); dash != std::string::npos)
    return {parse_index(s.substr(0, dash), at), parse_index(s.substr(dash + 1), at)};
  const int64_t v = parse_index(s, at);
  return {v, v};
}

std::vector<std::pair<int64_t, int64_t>> parse_layers(const YAML::Node& n, const std::string& source) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const std::string at = where(source, n);
  if (n.IsScalar()) {
    out.push_back(parse_range(n.Scalar(), at));
  } else if (n.IsSequence()) {
    for (const auto& e : n) {
      if (!e.IsScalar()) throw Error(cat(where(source, e), ": layers must list indices or ranges"));
      out.push_back(parse_range(e.Scalar(), where(source, e)));
    }
  } else {
    throw Error(cat(at, ": layers must be an index, a range \"a-b\" / \"a..b\", or a list of them"));
  }
  if (out.empty()) throw Error(cat(at, ": layers is an empty list"));
  return out;
}

std::string scalar(const YAML::Node& n, const char* key, const std::string& source) {
  if (!n.IsScalar()) throw Error(cat(where(source, n), ": '", key, "' must be a single value"));
  return n.Scalar();
}

}  // namespace

bool plan_type_allowed(TypeId t) {
  switch (t) {
    case TypeId::F32: case TypeId::F16: case TypeId::BF16: case TypeId::Q8_0: case TypeId::Q4_0:
    case TypeId::PQ2_0: case TypeId::PTQ1_0:
      return true;
    default:
      return false;
  }
}

bool is_ternary(TypeId t) { return t == TypeId::PTQ1_0 || t == TypeId::PQ2_0; }

namespace {


Plan parse_plan_yaml(const YAML::Node& root, const std::string& source) {
  if (!root.IsMap()) throw Error(cat(source, ": a plan is a YAML mapping with 'default' and 'rules'"));
  Plan p;
  p.source = source;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "default") {
      p.default_type = parse_type(scalar(v, "default", source), where(source, v));
    } else if (key == "method") {
      p.method = parse_method_at(scalar(v, "method", source), where(source, v));
    } else if (key == "name") {
      p.name = scalar(v, "name", source);
    } else if (key == "description") {
      scalar(v, "description", source);
    } else if (key == "rules") {
      if (!v.IsSequence() && !v.IsNull()) throw Error(cat(where(source, v), ": 'rules' must be a list"));
      for (const auto& r : v) {
        if (!r.IsMap()) throw Error(cat(where(source, r), ": a rule is a mapping {match, layers, type, method}"));
        PlanRule rule;
        rule.line = r.Mark().line + 1;
        const std::string at = cat(source, ":", rule.line);
        bool has_type = false;
        for (const auto& f : r) {
          const std::string k = f.first.as<std::string>();
          if (k == "match") {
            rule.match = scalar(f.second, "match", source);
            check_regex_size(rule.match, where(source, f.second));
            try {
              rule.re = std::regex(rule.match, std::regex::ECMAScript);
            } catch (const std::regex_error& e) {
              throw Error(cat(where(source, f.second), ": bad regex '", rule.match, "': ", e.what()));
            }
          } else if (k == "layers") {
            rule.layers = parse_layers(f.second, source);
          } else if (k == "type") {
            rule.type = parse_type(scalar(f.second, "type", source), where(source, f.second));
            has_type = true;
          } else if (k == "method") {
            rule.method = parse_method_at(scalar(f.second, "method", source), where(source, f.second));
          } else {
            throw Error(cat(where(source, f.first), ": unknown rule key '", k, "' (match, layers, type, method)"));
          }
        }
        if (rule.match.empty()) throw Error(cat(at, ": a rule needs 'match' (a regex on tensor names)"));
        if (!has_type) throw Error(cat(at, ": a rule needs 'type'"));
        if (rule.method && !is_ternary(rule.type))
          throw Error(cat(at, ": 'method' applies to PTQ1_0 and PQ2_0 only (type ", traits(rule.type).name,
                          " uses its reference encoder)"));
        p.rules.push_back(std::move(rule));
      }
    } else {
      throw Error(cat(where(source, kv.first), ": unknown key '", key, "' (name, description, default, method, rules)"));
    }
  }
  if (!root["default"]) throw Error(cat(source, ": the plan needs 'default' (the type of tensors no rule matches)"));
  return p;
}

}  // namespace

Plan parse_plan(const std::string& yaml, const std::string& source) {
  // yaml-cpp throws its own exceptions while loading and when a node is not what as<T>() asks
  // for (a key that is a list): each becomes an Error naming the plan and the line.
  try {
    return parse_plan_yaml(YAML::Load(yaml), source);
  } catch (const YAML::Exception& e) {
    throw Error(cat(source, ":", e.mark.line + 1, ": bad YAML: ", e.msg));
  }
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& [name, text] : kPresets) v.push_back(name);
  return v;
}

Plan load_plan(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    std::ifstream f(arg, std::ios::binary);
    if (!f) fail(arg, "cannot read the plan");
    std::ostringstream ss;
    ss << f.rdbuf();
    Plan p = parse_plan(ss.str(), arg);
    if (p.name.empty()) p.name = std::filesystem::path(arg).stem().string();
    return p;
  }
  for (const auto& [name, text] : kPresets)
    if (arg == name) {
      Plan p = parse_plan(text, cat("preset ", name));
      if (p.name.empty()) p.name = name;
      return p;
    }
  std::string list;
  for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
  fail(arg, "no such plan file, and not a preset (", list, ")");
}

int64_t block_index(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return -1;
  int64_t v = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

const TensorPlan* ResolvedPlan::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

bool ResolvedPlan::needs_importance() const {
  for (const auto& t : tensors)
    if (t.method && (*t.method == Method::optimal || method_needs_gram(*t.method))) return true;
  return false;
}

bool ResolvedPlan::needs_gram() const {
  for (const auto& t : tensors)
    if (t.method && method_needs_gram(*t.method)) return true;
  return false;
}

TypeId ResolvedPlan::dominant_block_type() const {
  std::map<TypeId, int64_t> elems;
  for (const auto& t : tensors)
    if (t.block >= 0 && t.ne.size() >= 2) {
      int64_t n = 1;
      for (int64_t d : t.ne) n *= d;
      elems[t.type] += n;
    }
  TypeId best = TypeId::F32;
  int64_t most = -1;
  for (const auto& [type, n] : elems)
    if (n > most) best = type, most = n;
  return best;
}

std::string ResolvedPlan::json() const {
  nlohmann::ordered_json j;
  j["plan"] = plan_name;
  j["source"] = plan_source;
  nlohmann::ordered_json ts = nlohmann::ordered_json::object();
  for (const auto& t : tensors) {
    nlohmann::ordered_json e;
    e["type"] = traits(t.type).name;
    if (t.method) e["method"] = method_name(*t.method);
    if (t.rule_line) e["rule_line"] = t.rule_line;
    if (!t.rule_option.empty()) e["rule_option"] = t.rule_option;
    ts[t.name] = e;
  }
  j["tensors"] = ts;
  return j.dump();
}

std::string ResolvedPlan::table() const {
  size_t w = 6;
  for (const auto& t : tensors) w = std::max(w, t.name.size());
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %-16s  %-7s  %-8s  %12s\n", int(w), "tensor", "shape", "type", "method", "bytes");
  os << line;
  for (const auto& t : tensors) {
    Tensor shape;
    shape.ne = t.ne;
    std::snprintf(line, sizeof line, "%-*s  %-16s  %-7s  %-8s  %12llu%s%s\n", int(w), t.name.c_str(),
                  shape.shape_str().c_str(), traits(t.type).name, t.method ? method_name(*t.method) : "-",
                  static_cast<unsigned long long>(t.bytes), t.rule_option.empty() ? "" : "  <- ",
                  t.rule_option.c_str());
    os << line;
  }
  std::snprintf(line, sizeof line,
                "total: %llu bytes (%.2f MiB), %.4f bits/weight over all %lld weights; "
                "block linear weights: %.4f bits/weight over %lld weights\n",
                static_cast<unsigned long long>(total_bytes), double(total_bytes) / (1024.0 * 1024.0),
                total_elems ? 8.0 * double(total_bytes) / double(total_elems) : 0.0, static_cast<long long>(total_elems),
                block_linear_elems ? 8.0 * double(block_linear_bytes) / double(block_linear_elems) : 0.0,
                static_cast<long long>(block_linear_elems));
  os << line;
  return os.str();
}

void apply_overrides(Plan& plan, const PlanOverrides& o) {
  auto add = [&](const std::string& option, const std::string& regex, const std::string& type, bool required) {
    PlanRule r;
    r.option = option;
    r.match = regex;
    check_regex_size(regex, option);
    try {
      r.re = std::regex(regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(cat(option, ": '", regex, "' is not a regular expression (", e.what(), ")"));
    }
    r.type = parse_type(type, option);
    r.required = required;
    plan.rules.push_back(std::move(r));
  };
  for (const std::string& tt : o.tensor_types) {
    const size_t eq = tt.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == tt.size())
      throw Error(cat("--tensor-type ", tt, ": expected REGEX=TYPE, e.g. 'ffn_down=q8_0'"));
    add("--tensor-type " + tt, tt.substr(0, eq), tt.substr(eq + 1), true);
  }
  if (!o.output_type.empty())
    add("--output-tensor-type " + o.output_type, "^output\\.weight$", o.output_type, false);
  if (!o.token_embd_type.empty())
    add("--token-embedding-type " + o.token_embd_type, "^token_embd\\.weight$", o.token_embd_type, true);
}

void set_ternary_type(Plan& plan, TypeId type) {
  if (!is_ternary(type))
    throw Error(cat("--type ", traits(type).name, " is not a ternary type (PTQ1_0 or PQ2_0): name other types in a plan"));
  if (is_ternary(plan.default_type)) plan.default_type = type;
  for (PlanRule& r : plan.rules)
    if (is_ternary(r.type)) r.type = type;
}

ResolvedPlan resolve_plan(const Plan& plan, const std::vector<Tensor>& tensors, int64_t n_layer,
                          std::optional<Method> method, Method fallback) {
  ResolvedPlan r;
  r.plan_name = plan.name;
  r.plan_source = plan.source;
  const Method base = method ? *method : plan.method ? *plan.method : fallback;
  // Resolve the rules' block ranges against this model's block count.
  std::vector<std::vector<bool>> in_layers(plan.rules.size());
  for (size_t i = 0; i < plan.rules.size(); ++i) {
    const PlanRule& rule = plan.rules[i];
    if (rule.layers.empty()) continue;
    in_layers[i].assign(size_t(n_layer), false);
    for (auto [lo, hi] : rule.layers) {
      const int64_t a = lo < 0 ? n_layer + lo : lo, b = hi < 0 ? n_layer + hi : hi;
      if (a < 0 || b < 0 || a >= n_layer || b >= n_layer || a > b)
        throw Error(cat(plan.source, ":", rule.line, ": block range ", lo, "..", hi, " is not within the model's ",
                        n_layer, " blocks (0..", n_layer - 1, ")"));
      for (int64_t l = a; l <= b; ++l) in_layers[i][size_t(l)] = true;
    }
  }
  std::vector<int64_t> hits(plan.rules.size(), 0);
  for (const Tensor& t : tensors) {
    TensorPlan tp;
    tp.name = t.name;
    tp.ne = t.ne;
    tp.block = block_index(t.name);
    if (t.ne.size() < 2) {
      tp.type = TypeId::F32;
    } else {
      tp.type = plan.default_type;
      std::optional<Method> m;
      for (size_t i = 0; i < plan.rules.size(); ++i) {
        const PlanRule& rule = plan.rules[i];
        if (!in_layers[i].empty() && (tp.block < 0 || tp.block >= n_layer || !in_layers[i][size_t(tp.block)])) continue;
        if (!std::regex_search(t.name, rule.re)) continue;
        ++hits[i];
        tp.type = rule.type;
        tp.rule_line = rule.line;
        tp.rule_option = rule.option;
        m = rule.method;
      }
      if (is_ternary(tp.type)) tp.method = m ? *m : base;
      const int be = traits(tp.type).block_elems;
      if (t.ne[0] % be)
        throw Error(cat(!tp.rule_option.empty() ? tp.rule_option
                        : tp.rule_line   ? cat(plan.source, ":", tp.rule_line)
                                         : plan.source,
                        ": tensor '", t.name, "' ",
                        t.shape_str(), " cannot be ", traits(tp.type).name, ": its rows of ", t.ne[0],
                        " are not a multiple of ", be));
    }
    tp.bytes = tensor_bytes(tp.type, tp.ne).value_or(0);
    const int64_t n = t.nelements();
    r.total_bytes += tp.bytes;
    r.total_elems += n;
    if (tp.block >= 0 && t.ne.size() >= 2) {
      r.block_linear_bytes += tp.bytes;
      r.block_linear_elems += n;
    }
    r.tensors.push_back(std::move(tp));
  }
  for (size_t i = 0; i < plan.rules.size(); ++i)
    if (!hits[i] && plan.rules[i].required)
      throw Error(cat(plan.rules[i].option.empty() ? cat(plan.source, ":", plan.rules[i].line) : plan.rules[i].option,
                      ": rule '", plan.rules[i].match, "' matches no matrix of this model"));
  return r;
}

}  // namespace bonsai::quant
