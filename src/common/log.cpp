#include "anchor/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "anchor/error.hpp"

namespace anchor::log {

namespace {

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::kDebug: return spdlog::level::debug;
    case Level::kInfo: return spdlog::level::info;
    case Level::kWarn: return spdlog::level::warn;
    case Level::kError: return spdlog::level::err;
    case Level::kOff: break;
  }
  return spdlog::level::off;
}

}  // namespace

void init(Level level) {
  auto logger = spdlog::get("anchor");
  if (!logger) {
    // NO_COLOR (no-color.org): set and not empty, no colour even on a terminal.
    const char* no_color = std::getenv("NO_COLOR");
    logger = spdlog::stderr_color_mt("anchor",
                                     no_color && *no_color ? spdlog::color_mode::never : spdlog::color_mode::automatic);
    // A pilot worker whose live line the supervisor draws on the terminal
    // (ANCHOR_LIVE_PROGRESS, include/anchor/protocol/progress.hpp): that line ends at
    // column 0, so each of the worker's lines first clears it.
    const char* live_env = std::getenv("ANCHOR_LIVE_PROGRESS");
    const bool live = live_env && std::string(live_env) == "1" && ::isatty(STDERR_FILENO) == 1;
    // And each line leaves in one write (the colour sink writes a line in
    // pieces; the supervisor's redraw must not land between them).
    if (live) std::setvbuf(stderr, nullptr, _IOLBF, 1 << 16);
    logger->set_pattern(std::string(live ? "\033[K" : "") + "%^%L%$ %H:%M:%S.%e %v");
    spdlog::set_default_logger(logger);
  }
  spdlog::set_level(to_spdlog(level));
}

bool enabled(Level level) { return level != Level::kOff && spdlog::should_log(to_spdlog(level)); }

void write(Level level, std::string_view tag, const std::string& message) {
  spdlog::log(to_spdlog(level), "[{}] {}", tag, message);
}

void flush() {
  if (auto logger = spdlog::default_logger()) logger->flush();
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
