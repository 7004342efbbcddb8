// Items of a fortune(6) database (fortunes-zh: Tang and Song poems, sayings).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace bonsai::datasets {

// One item per entry (entries are separated by a line holding only "%"); the rules
// (docs/corpus.md): ANSI colour sequences (ESC [ digits/';' m) removed; the entry's lines are
// trimmed, blank ones dropped, and joined: directly after a line ending in Chinese
// sentence punctuation (。！？，；、：), else with one space — so a poem's title, author and
// verses become one line, and clean_paragraph() later removes the spaces between CJK text.
std::vector<std::string> fortune_items(std::string_view file);

}  // namespace bonsai::datasets
