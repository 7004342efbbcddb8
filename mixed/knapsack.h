// Choosing one option per item (a type per tensor) to minimise the summed loss with the summed
// size within a budget: the multiple-choice knapsack, solved exactly by dynamic programming over
// sizes in units of their greatest common divisor (tensor sizes under the block types share a
// large one, so the table stays small). Only when the table would exceed `max_cells` are sizes
// rounded UP to a coarser unit: the budget is then still respected, and the result is optimal for
// the rounded sizes (reported as not exact, with the unit).
#pragma once
#include <cstdint>
#include <vector>

namespace bonsai::mixed {

struct Option {
  uint64_t bytes = 0;
  double loss = 0;
};

struct KnapsackResult {
  std::vector<int> pick;  // per item, the index of its chosen option
  uint64_t bytes = 0;     // exact summed size of the choice
  double loss = 0;        // summed loss of the choice
  uint64_t unit = 1;      // the size unit the table used
  bool exact = true;      // false: sizes were rounded up to `unit` (see above)
};

// items[i] lists item i's options (at least one each). Error when an item has none or when even
// the smallest option of every item exceeds the budget (the message gives that minimum).
KnapsackResult choose_options(const std::vector<std::vector<Option>>& items, uint64_t budget,
                              uint64_t max_cells = uint64_t(1) << 26);

}  // namespace bonsai::mixed
