// ckpt_saver ROOT [--mib M] [--steps N] [--keep K]
// Saves checkpoints of about M MiB through the Store in a loop, printing
// "saved <step>" (flushed) after each save returns, for the kill-loop test.
// At start it does what a restarted worker does: removes stale temps and
// continues after the newest checkpoint that verifies ("restored <step>").
// After each save it applies retention (keep K), so kills also land in
// deletions. N = 0 saves until killed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "anchor/checkpoint/store.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "support/checkpoint_fixture.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ckpt_saver ROOT [--mib M] [--steps N] [--keep K]\n");
    return 2;
  }
  std::string root = argv[1];
  double mib = 4;
  long steps = 0;
  int keep = 2;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib"))
      mib = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--keep"))
      keep = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "ckpt_saver: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  anchor::log::init(anchor::log::Level::kInfo);  // logs to stderr; stdout carries "saved" lines
  try {
    anchor::checkpoint::Store store(root);
    store.remove_stale_temps();
    std::int64_t step = 0;
    if (auto l = store.restore_newest()) {
      step = l->step;
      std::printf("restored %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
    }
    // model w is n floats, optimizer n/4: 5n bytes in all.
    const std::int64_t n = static_cast<std::int64_t>(mib * (1 << 20) / 5);
    for (long i = 0; steps == 0 || i < steps; ++i) {
      ++step;
      const auto saved = store.save(anchor::test::make_request(step, n));
      std::printf("saved %lld\n", static_cast<long long>(step));
      std::fflush(stdout);
      store.apply_retention(keep, saved.dir);  // as the pilot calls it: the new step is not read back
      anchor::test::tensor_cache().clear();
    }
  } catch (const anchor::Error& e) {
    std::fprintf(stderr, "ckpt_saver: %s\n", e.what());
    return 1;
  }
  return 0;
}
