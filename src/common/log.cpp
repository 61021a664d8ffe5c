#include "anchor/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "anchor/error.hpp"

namespace anchor::log {

void init(Level level) {
  auto logger = spdlog::get("anchor");
  if (!logger) {
    logger = spdlog::stderr_color_mt("anchor");
    logger->set_pattern("%^%L%$ %H:%M:%S.%e %v");
    spdlog::set_default_logger(logger);
  }
  switch (level) {
    case Level::kDebug: spdlog::set_level(spdlog::level::debug); break;
    case Level::kInfo: spdlog::set_level(spdlog::level::info); break;
    case Level::kWarn: spdlog::set_level(spdlog::level::warn); break;
    case Level::kError: spdlog::set_level(spdlog::level::err); break;
    case Level::kOff: spdlog::set_level(spdlog::level::off); break;
  }
}

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  throw Error(ErrorKind::kUsage, "unknown log level '" + std::string(name) + "'",
              "use one of: debug, info, warn, error, off");
}

}  // namespace anchor::log
