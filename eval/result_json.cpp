#include "eval/result_json.h"

#include "formats/error.h"

namespace bonsai::eval {

nlohmann::ordered_json perplexity_json(const PerplexityResult& r) {
  const double tps = r.seconds > 0 ? double(r.chunks * r.n_ctx) / r.seconds : 0.0;
  return {{"ppl", r.ppl},     {"ppl_err", r.ppl_err}, {"mean_nll", r.mean_nll}, {"tokens", r.tokens},
          {"tokens_scored", r.tokens_scored}, {"ctx", r.n_ctx}, {"chunks", r.chunks}, {"seconds", r.seconds},
          {"tokens_per_second", tps}};
}

std::string kld_layout(const KldBase& b) {
  return b.header().k == 0 ? "every token, 16 bits" : cat("top ", b.header().k);
}

nlohmann::ordered_json kld_json(const KldResult& k, const KldBase& base) {
  return {{"positions", k.n},
          {"layout", kld_layout(base)},
          {"mean", k.mean},
          {"mean_err", k.mean_err},
          {"median", k.median},
          {"p90", k.p90},
          {"p99", k.p99},
          {"p99_9", k.p999},
          {"max", k.max},
          {"top1_agreement", k.top1_agree},
          {"delta_p_mean", k.dp_mean},
          {"delta_p_rms", k.dp_rms},
          {"base_rest_mass_mean", k.mean_rest},
          {"rounding_bound", k.rounding_bound}};
}

nlohmann::ordered_json paired_json(const KldResult& k) {
  return {{"positions", k.paired_n},
          {"ppl_base", k.ppl_base},
          {"ppl", k.ppl},
          {"delta_ln_ppl", k.dlnppl},
          {"delta_ln_ppl_err", k.dlnppl_err},
          {"delta_ppl", k.dppl},
          {"delta_ppl_err", k.dppl_err},
          {"delta_ppl_err_unpaired", k.dppl_err_unpaired},
          {"nll_correlation", k.nll_correlation}};
}

}  // namespace bonsai::eval
