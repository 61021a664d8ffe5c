#pragma once
// Logging front door. spdlog sits behind it; logs go to stderr, machine output
// (reports, --json) to stdout. Messages carry a stage tag:
//   ANCHOR_LOG_INFO("train_step", "step={} loss={:.4f}", step, loss);
#include <spdlog/spdlog.h>

#include <string_view>

namespace anchor::log {

enum class Level { kDebug, kInfo, kWarn, kError, kOff };

// Installs the stderr logger. Safe to call more than once.
void init(Level level);
Level parse_level(std::string_view name);  // "debug", "info", "warn", "error", "off"

}  // namespace anchor::log

#define ANCHOR_LOG_DEBUG(tag, ...) ::spdlog::debug("[" tag "] " __VA_ARGS__)
#define ANCHOR_LOG_INFO(tag, ...) ::spdlog::info("[" tag "] " __VA_ARGS__)
#define ANCHOR_LOG_WARN(tag, ...) ::spdlog::warn("[" tag "] " __VA_ARGS__)
#define ANCHOR_LOG_ERROR(tag, ...) ::spdlog::error("[" tag "] " __VA_ARGS__)
