#include "formats/summary.h"

namespace bonsai {

SizeSummary summarize(const TensorSet& ts) {
  SizeSummary s;
  for (const Tensor& t : ts.tensors) {
    for (SizeTotals* tot : {&s.all, &s.by_type[traits(t.type).name]}) {
      tot->tensors += 1;
      tot->params += t.nelements();
      tot->bytes += t.nbytes;
    }
  }
  return s;
}

}  // namespace bonsai
