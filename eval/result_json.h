// The JSON of a perplexity run, one definition for `bonsai perplexity --json` and `bonsai eval`'s
// cells (so a cell's figures are the single command's, field for field).
#pragma once
#include <nlohmann/json.hpp>

#include "runtime/kld.h"

namespace bonsai::eval {

// ppl, ppl_err, mean_nll, tokens, tokens_scored, ctx, chunks, seconds, tokens_per_second.
nlohmann::ordered_json perplexity_json(const PerplexityResult& r);
// The KLD summary against `base` (positions, layout, mean ... rounding_bound).
nlohmann::ordered_json kld_json(const KldResult& k, const KldBase& base);
// The paired difference against the base (positions, ppl_base, ppl, delta_ln_ppl ...).
nlohmann::ordered_json paired_json(const KldResult& k);
// "every token, 16 bits" or "top K".
std::string kld_layout(const KldBase& base);

}  // namespace bonsai::eval
