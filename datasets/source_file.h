// Reading the files of an unpacked package: plain or gzip-compressed (man pages are .gz).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace bonsai::datasets {

// The bytes of `path`, gunzipped when the name ends in ".gz". Error naming the file when it
// cannot be read, is not valid gzip, or would inflate past max_bytes (a corrupt or hostile
// stream must not exhaust memory).
std::string read_source_file(const std::string& path, uint64_t max_bytes = 256u << 20);

// Regular files (not symlinks) under `dir` whose name ends with `suffix`, recursively or not,
// sorted by path (bytewise, so the order is the same everywhere). Hidden files and folders
// (a name starting with '.') are left out. Error naming `dir` when it is missing.
std::vector<std::string> list_files(const std::filesystem::path& dir, const std::string& suffix, bool recursive);

}  // namespace bonsai::datasets
