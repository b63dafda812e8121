// The self-contained HTML page of `cudalloc view`: the page sources built into the binary
// (viewer.html, viewer.css, viewer.js, embedded at build time) with the view model inlined as
// JSON. The page loads nothing from anywhere: it opens from disk with no network.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace cudalloc::view {

// The page for `model` (view_model()), titled `title`.
std::string render_page(const nlohmann::json& model, const std::string& title);

// JSON text that is safe inside a <script> element: '<', '>' and '&' are written as \u
// escapes (so "</script>" or "<!--" in a string cannot end or change the element), as is
// every non-ASCII character (U+2028 and U+2029 included).
std::string script_safe_json(const nlohmann::json& value);

// Text safe inside an HTML element or a quoted attribute.
std::string html_escape(const std::string& text);

}  // namespace cudalloc::view
