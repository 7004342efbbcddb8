// Prose paragraphs of an HTML page (LibreOffice help, the Debian handbook): the text of block
// elements, with the page furniture and code left out.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace bonsai::datasets {

struct HtmlRules {
  // Elements (any tag) whose class list holds one of these are dropped with all they contain.
  std::vector<std::string> skip_classes;
};

// LibreOffice help: search and bookmark widgets, code listings, and the module-specific
// `switch` blocks (text for other modules than the page's).
HtmlRules libreoffice_help_rules();
// Debian handbook (DocBook/publican HTML): program listings, screens, tables, navigation, TOC, index.
HtmlRules debian_handbook_rules();

// The paragraphs of one page (UTF-8), the rules of docs/corpus.md:
//  - a paragraph ends at the start and end of p, div, h1..h6, li, dt, dd, blockquote, section,
//    ul, ol, dl, title, body, td, th, tr, and at br;
//  - dropped with their content: script, style, pre, table, head, header, aside, nav, noscript,
//    footer, button, select, object, svg; an element with id "banner" or "title"; an element
//    with a class in rules.skip_classes;
//  - void elements (br, img, meta, input, ...) hold nothing; an end tag closes the nearest open
//    element of its name and all opened inside it (an end tag with none open is ignored);
//  - script and style content is raw text up to its end tag; comments, <!...> and <?...?> give
//    nothing; character references are decoded; a '<' that starts no tag is text.
// Paragraph text is returned as found (whitespace included): clean_paragraph() tidies it.
std::vector<std::string> html_paragraphs(std::string_view html, const HtmlRules& rules);

// Decodes character references (&amp; &#20013; &#x4E2D; and the common named ones) in text.
std::string decode_html_entities(std::string_view s);

}  // namespace bonsai::datasets
