#include "core/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <cstring>

namespace cudalloc {
namespace {

spdlog::logger* make_logger() {
  // Not registered in spdlog's global registry: a host program using spdlog keeps its own.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto* logger = new spdlog::logger("cudalloc", std::move(sink));
  logger->set_pattern("[%n %l] %v");
  const char* level = std::getenv("CUDALLOC_LOG");
  spdlog::level::level_enum lvl = spdlog::level::warn;
  if (level != nullptr && *level != '\0') {
    lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && std::strcmp(level, "off") != 0) {
      lvl = spdlog::level::warn;
      logger->warn("CUDALLOC_LOG='{}' is not one of trace|debug|info|warn|error|off; using warn",
                   level);
    }
  }
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  return logger;
}

}  // namespace

spdlog::logger& log() {
  // Intentionally leaked so that logging from static destructors stays valid.
  static spdlog::logger* logger = make_logger();
  return *logger;
}

}  // namespace cudalloc
