// Sizes in bytes as people write them: "1.23 GiB" out, "6G" / "6GiB" / "512MiB" / "1e9" in.
#pragma once
#include <cstdint>
#include <string>

namespace bonsai {

// "1.23 GiB", "45.6 MiB".
std::string human_bytes(double bytes);

// A size: a number with an optional unit K, M, G, T (powers of 1024, with or without "iB"/"B",
// any case) or none (bytes). Error naming `what` (the option) for anything else or for 0.
uint64_t parse_byte_size(const std::string& s, const std::string& what);

}  // namespace bonsai
