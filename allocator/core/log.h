// cudalloc's logger: spdlog, header-only, to stderr, prefixed "cudalloc". The level comes from
// CUDALLOC_LOG (trace|debug|info|warn|error|off; default warn) on first use.
#pragma once

#include <spdlog/spdlog.h>

namespace cudalloc {

spdlog::logger& log();

}  // namespace cudalloc
