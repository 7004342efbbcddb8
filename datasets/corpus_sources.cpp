#include "datasets/corpus_sources.h"

#include <algorithm>
#include <filesystem>

#include "datasets/fortune_text.h"
#include "datasets/html_text.h"
#include "datasets/paragraph_text.h"
#include "datasets/source_file.h"
#include "datasets/troff_text.h"
#include "formats/error.h"

namespace bonsai::datasets {
namespace fs = std::filesystem;

namespace {

void append(std::vector<std::string>& to, std::vector<std::string>&& from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

std::vector<std::string> html_tree(const std::vector<std::string>& files, const HtmlRules& rules) {
  std::vector<std::string> out;
  for (const auto& f : files) append(out, html_paragraphs(valid_utf8(read_source_file(f)), rules));
  return out;
}

}  // namespace

std::vector<std::string> manpages_zh_paragraphs(const std::string& root) {
  const fs::path man = fs::path(root) / "usr/share/man/zh_CN";
  std::error_code ec;
  if (!fs::is_directory(man, ec)) fail(man.string(), "folder not found (is manpages-zh unpacked here?)");
  // All pages of all sections, sorted by full path.
  std::vector<std::string> pages;
  for (fs::directory_iterator it(man, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("man") && it->is_directory(ec)) append(pages, list_files(it->path(), "", false));
  }
  if (ec) fail(man.string(), "cannot list: ", ec.message());
  std::sort(pages.begin(), pages.end());
  std::vector<std::string> out;
  for (const auto& p : pages) {
    const std::string text = valid_utf8(read_source_file(p));
    if (troff_is_so_stub(text)) continue;
    append(out, troff_paragraphs(text));
  }
  return out;
}

std::vector<std::string> libreoffice_help_paragraphs(const std::string& root) {
  return html_tree(list_files(fs::path(root) / "usr/share/libreoffice/help/zh-CN", ".html", true),
                   libreoffice_help_rules());
}

std::vector<std::string> fortunes_zh_paragraphs(const std::string& root) {
  std::vector<std::string> out;
  for (const char* name : {"tang300", "song100", "chinese"}) {
    const fs::path f = fs::path(root) / "usr/share/games/fortunes" / name;
    append(out, fortune_items(valid_utf8(read_source_file(f.string()))));
  }
  return out;
}

std::vector<std::string> debian_handbook_paragraphs(const std::string& root) {
  return html_tree(list_files(fs::path(root) / "usr/share/doc/debian-handbook/html/zh-CN", ".html", false),
                   debian_handbook_rules());
}

}  // namespace bonsai::datasets
