#include "view/html_page.h"

#include <vector>

#include "view/viewer_sources.h"  // generated from viewer.html, viewer.css, viewer_*.js

namespace cudalloc::view {
namespace {

struct Slot {
  std::string_view marker;
  std::string text;
};

// The template with each slot's marker replaced by its text. Markers are searched in the
// template only, never in inserted text, so nothing inserted can be taken for a marker.
std::string fill(std::string_view page, const std::vector<Slot>& slots) {
  std::string out;
  std::size_t from = 0;
  while (true) {
    std::size_t at = std::string_view::npos;
    const Slot* next = nullptr;
    for (const Slot& s : slots) {
      const std::size_t pos = page.find(s.marker, from);
      if (pos < at) {
        at = pos;
        next = &s;
      }
    }
    if (next == nullptr) break;
    out.append(page.substr(from, at - from));
    out += next->text;
    from = at + next->marker.size();
  }
  out.append(page.substr(from));
  return out;
}

// The page's scripts in load order: helpers first, main last.
std::string script() {
  std::string out;
  for (std::string_view part :
       {kViewerUtilJs, kViewerTimelineJs, kViewerHistoryJs, kViewerSegmentsJs, kViewerTraceJs,
        kViewerMainJs}) {
    out.append(part);
    out += '\n';
  }
  return out;
}

}  // namespace

std::string script_safe_json(const nlohmann::json& value) {
  const std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + text.size() / 16);
  for (char c : text) {
    // These characters only occur inside JSON strings, where a \u escape means the same.
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_page(const nlohmann::json& model, const std::string& title) {
  return fill(kViewerHtml, {{"@TITLE@", html_escape(title)},
                            {"/*@STYLE@*/", std::string(kViewerCss)},
                            {"/*@SCRIPT@*/", script()},
                            {"@DATA@", script_safe_json(model)}});
}

}  // namespace cudalloc::view
