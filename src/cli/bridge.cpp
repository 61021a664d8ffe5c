// What both binaries share of the hand-over (bridge.hpp).
#include "bridge.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "anchor/common/process.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace anchor::cli {
namespace {
std::vector<std::string> g_argv;
}

void remember_argv(int argc, char** argv) { g_argv.assign(argv, argv + argc); }

std::string torch_binary() {
  std::string self = proc::self_exe();
  if (torch_in_process()) return self;
  return (std::filesystem::path(self).parent_path() / "anchor-torch").string();
}

void hand_over_to_torch(const std::string& why) {
  const std::string bin = torch_binary();
  ANCHOR_LOG_DEBUG("cli", "handing over to {}: {}", bin, why);
  std::vector<char*> args;
  args.push_back(const_cast<char*>(bin.c_str()));
  for (std::size_t i = 1; i < g_argv.size(); ++i) args.push_back(g_argv[i].data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  log::flush();
  ::execv(bin.c_str(), args.data());
  const int e = errno;
  throw Error(ErrorKind::kRuntime, "cannot start " + bin + " (" + why + "): " + std::strerror(e),
              "anchor-torch is built and installed next to anchor; rebuild with `make build`");
}

}  // namespace anchor::cli
