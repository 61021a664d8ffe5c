#pragma once
// Logging front door. spdlog sits behind it; logs go to stderr, machine output
// (reports, --json) to stdout. Messages carry a stage tag:
//   ANCHOR_LOG_INFO("train_step", "step={} loss={:.4f}", step, loss);
//
// The message is formatted here, in the caller's translation unit, with the
// fmt its include path finds (header-only: FMT_HEADER_ONLY, set for every
// target), and handed to spdlog as a finished string in log.cpp. So spdlog's
// headers, built against Debian's fmt, never meet the newer fmt that PyTorch
// 2.x ships inside its own include directory (docs/development.md).
#include <fmt/format.h>

#include <string>
#include <string_view>

namespace anchor::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

// Installs the stderr logger. Safe to call more than once.
void init(Level level);
Level parse_level(std::string_view name);  // "debug", "info", "warn", "error", "off"

// Whether a message at `level` would be written now (cheap; checked before formatting).
bool enabled(Level level);
// Writes "[tag] message" at `level`.
void write(Level level, std::string_view tag, const std::string& message);
// Flushes the logger (before a process exits without unwinding).
void flush();

}  // namespace anchor::log

#define ANCHOR_LOG_AT(level, tag, ...)                                                               \
  do {                                                                                               \
    if (::anchor::log::enabled(level)) ::anchor::log::write(level, tag, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define ANCHOR_LOG_DEBUG(tag, ...) ANCHOR_LOG_AT(::anchor::log::Level::kDebug, tag, __VA_ARGS__)
#define ANCHOR_LOG_INFO(tag, ...) ANCHOR_LOG_AT(::anchor::log::Level::kInfo, tag, __VA_ARGS__)
#define ANCHOR_LOG_WARN(tag, ...) ANCHOR_LOG_AT(::anchor::log::Level::kWarn, tag, __VA_ARGS__)
#define ANCHOR_LOG_ERROR(tag, ...) ANCHOR_LOG_AT(::anchor::log::Level::kError, tag, __VA_ARGS__)
