// libFuzzer target for the config loader: arbitrary bytes as a YAML config.
// Any input may be rejected, but only with anchor::Error (ConfigError listing
// problems); anything else escaping, a crash or a sanitizer report is a bug.
// An accepted config must survive to_json -> from_json with the same digest.
#include <cstddef>
#include <cstdint>
#include <string>

#include "anchor/config/config.hpp"
#include "anchor/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto c = anchor::config::load_string(text, "fuzz.yaml", {}, "/fuzz");
    const auto again = anchor::config::from_json(anchor::config::to_json(c), "/fuzz");
    if (anchor::config::digest(again) != anchor::config::digest(c)) __builtin_trap();
  } catch (const anchor::Error&) {
    // Rejected with a clear error: the expected outcome for most inputs.
  }
  return 0;
}
