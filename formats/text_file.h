// Whole-file text I/O for small outputs (reports, JSON, YAML, SVG): reads name the file in their
// errors; writes go through AtomicFile, so a crash never leaves half a file under the final name.
#pragma once
#include <string>
#include <string_view>

namespace bonsai {

std::string read_text_file(const std::string& path);  // Error naming the file when unreadable
void write_text_file(const std::string& path, std::string_view text);

}  // namespace bonsai
