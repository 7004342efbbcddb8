// Reading a number at the start of a string, for command-line values and text tables.
#pragma once
#include <exception>
#include <string>

namespace bonsai {

// The double that begins s (std::stod's syntax), and in *used how many characters it took;
// *used = 0 (and 0 returned) when s does not begin with a number or it is out of range.
inline double leading_double(const std::string& s, size_t* used) {
  try {
    return std::stod(s, used);
  } catch (const std::exception&) {
    *used = 0;
    return 0;
  }
}

}  // namespace bonsai
