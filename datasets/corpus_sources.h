// Where each package keeps its text, and which extractor reads it. Each returns the raw
// paragraphs of an unpacked package tree, in a fixed order (files sorted by path), before
// clean-up and filters.
#pragma once
#include <string>
#include <vector>

namespace bonsai::datasets {

// usr/share/man/zh_CN/man*/* (the zh_TW pages are left out; `.so` stubs and symlinks skipped).
std::vector<std::string> manpages_zh_paragraphs(const std::string& root);
// usr/share/libreoffice/help/zh-CN/**/*.html
std::vector<std::string> libreoffice_help_paragraphs(const std::string& root);
// usr/share/games/fortunes/{tang300,song100,chinese}
std::vector<std::string> fortunes_zh_paragraphs(const std::string& root);
// usr/share/doc/debian-handbook/html/zh-CN/*.html
std::vector<std::string> debian_handbook_paragraphs(const std::string& root);

}  // namespace bonsai::datasets
