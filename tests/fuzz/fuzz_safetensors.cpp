// libFuzzer target for the strict safetensors parser (ANCHOR_FUZZ=ON, clang).
// Property: parse either throws anchor::Error or returns a file whose entries
// lie inside it; re-serializing an accepted file and parsing it again yields
// the same entries and bytes; a rejection's message is valid UTF-8 (it goes
// into JSON: verify --json, skip reasons). Anything else (crash, other
// exception, sanitizer report) is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/common/utf8.hpp"
#include "anchor/error.hpp"

namespace ck = anchor::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto f = ck::SafetensorsFile::parse(bytes, "fuzz");
    std::vector<ck::TensorRef> refs;
    for (const auto& e : f.entries()) {
      if (e.end < e.begin || 8 + f.header_size() + e.end > size) std::abort();
      refs.push_back({e.name, e.dtype, e.shape, f.data(e), static_cast<std::size_t>(e.end - e.begin)});
    }
    auto g = ck::SafetensorsFile::parse(ck::serialize_safetensors(refs, f.metadata()), "again");
    if (g.entries().size() != f.entries().size() || g.metadata() != f.metadata()) std::abort();
    for (std::size_t i = 0; i < g.entries().size(); ++i) {
      const auto& a = f.entries()[i];
      const auto& b = g.entries()[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.end - a.begin != b.end - b.begin ||
          std::memcmp(f.data(a), g.data(b), a.end - a.begin) != 0)
        std::abort();
    }
  } catch (const anchor::Error& e) {
    // Rejected with a message: the expected outcome for most inputs.
    if (!anchor::is_valid_utf8(e.what())) std::abort();
  }
  return 0;
}
