#include "mixed/knapsack.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "formats/error.h"

namespace bonsai::mixed {

KnapsackResult choose_options(const std::vector<std::vector<Option>>& items, uint64_t budget, uint64_t max_cells) {
  uint64_t min_total = 0, unit = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty()) throw Error(cat("knapsack: item ", i, " has no option"));
    uint64_t lo = std::numeric_limits<uint64_t>::max();
    for (const Option& o : items[i]) {
      lo = std::min(lo, o.bytes);
      unit = std::gcd(unit, o.bytes);
    }
    min_total += lo;
  }
  if (min_total > budget)
    throw Error(cat("the budget of ", budget, " bytes is below the smallest possible choice (", min_total, " bytes)"));
  KnapsackResult r;
  if (items.empty()) return r;
  if (unit == 0) unit = 1;  // every option is 0 bytes
  // Table: items x (capacity + 1) cells of one byte (the option taken). Coarsen when too large.
  auto cells = [&](uint64_t u) { return uint64_t(items.size()) * (budget / u + 1); };
  r.exact = true;
  if (cells(unit) > max_cells) {
    const uint64_t want = budget / std::max<uint64_t>(1, max_cells / items.size() - 1) + 1;
    unit = (want + unit - 1) / unit * unit;  // a multiple of the exact unit: sizes that divide stay exact
    r.exact = false;
  }
  r.unit = unit;
  const uint64_t cap = budget / unit;
  auto units = [&](uint64_t bytes) { return (bytes + unit - 1) / unit; };  // rounded up: never over budget
  const double inf = std::numeric_limits<double>::infinity();
  // best[c]: least loss of the items so far with at most c units.
  std::vector<double> best(cap + 1, 0.0), next(cap + 1);
  std::vector<std::vector<uint8_t>> took(items.size(), std::vector<uint8_t>(cap + 1, 0xff));
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].size() > 255) throw Error(cat("knapsack: item ", i, " has more than 255 options"));
    std::fill(next.begin(), next.end(), inf);
    for (size_t k = 0; k < items[i].size(); ++k) {
      const uint64_t w = units(items[i][k].bytes);
      for (uint64_t c = w; c <= cap; ++c) {
        const double v = best[c - w] + items[i][k].loss;
        if (v < next[c]) next[c] = v, took[i][c] = uint8_t(k);
      }
    }
    best.swap(next);
  }
  if (best[cap] == inf)
    throw Error(cat("the budget of ", budget, " bytes holds no choice once sizes are rounded to ", unit,
                    "-byte units; raise the budget"));
  r.pick.assign(items.size(), 0);
  uint64_t c = cap;
  for (size_t i = items.size(); i-- > 0;) {
    const int k = took[i][c];
    r.pick[i] = k;
    c -= units(items[i][size_t(k)].bytes);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    r.bytes += items[i][size_t(r.pick[i])].bytes;
    r.loss += items[i][size_t(r.pick[i])].loss;
  }
  return r;
}

}  // namespace bonsai::mixed
