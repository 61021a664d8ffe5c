#pragma once
// Human-readable sizes for messages and tables: "512 B", "1.5 KiB", "2.3 MiB".
#include <cstdio>
#include <string>

namespace anchor {

inline std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

}  // namespace anchor
