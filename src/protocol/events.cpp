#include "anchor/protocol/events.hpp"

#include <cstdio>
#include <ctime>

#include "anchor/common/utf8.hpp"

namespace anchor::protocol {

std::string utc_now() {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s.%03dZ", date, static_cast<int>(ms));
  return buf;
}

double unix_now() {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return static_cast<double>(us) / 1e6;
}

namespace {
bool g_events_enabled = true;
}

void set_events_enabled(bool on) { g_events_enabled = on; }

void emit(protocol::Body body) {
  if (!g_events_enabled) return;
  const std::string line =
      std::string(kEventPrefix) + dump_json(protocol::to_json(protocol::line(std::move(body)))) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

StageTimer::StageTimer(std::string name) : name_(std::move(name)), t0_(std::chrono::steady_clock::now()) {
  emit(protocol::StageLine{name_, "begin", "", std::nullopt});
}

double StageTimer::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

nlohmann::json StageTimer::end(nlohmann::json figures) {
  nlohmann::json rec = {{"stage", name_}, {"status", "passed"}, {"seconds", elapsed()}, {"figures", figures}};
  emit(protocol::StageLine{name_, "end", "passed", rec["seconds"].get<double>()});
  return rec;
}

}  // namespace anchor::protocol
