#pragma once
// A key-value store shared by the ranks of a launch (c10d TCPStore behind a
// torch-free interface), for coordination outside the process group: the
// pilot's rank 0 tells the other launched processes its verdict. Rank 0 hosts
// it on MASTER_ADDR:MASTER_PORT, or the torchrun agent does
// (TORCHELASTIC_USE_AGENT_STORE=True; keys then live under its prefix). On one
// node under the agent's store, rank 0 hosts it anyway, on a free port it
// publishes in torchrun's attempt directory (LaunchEnv::meets_in_attempt_dir):
// the agent's torch may speak another store protocol than this build's.
#include <memory>
#include <optional>
#include <string>

#include "anchor/dist/launch.hpp"

namespace anchor::dist {

class Store {
 public:
  // Connects (or hosts) within timeout_s; throws Error (kRuntime) naming the
  // address, or Error (kConfig) when the agent's store runs a torch whose
  // store protocol this build's LibTorch does not speak (several nodes). A
  // store rank 0 hosts names its launch (LaunchEnv::launch_id); a client
  // whose launch it is not throws Error (kRuntime) naming both.
  Store(const LaunchEnv& env, double timeout_s);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Returns once the store holds the value: a get from any client after it
  // sees it.
  void set(const std::string& key, const std::string& value);
  // Waits for `key` with no overall limit, checking every second that the
  // store is still there; throws Error naming `who_hosts` when it is gone.
  std::string wait_get(const std::string& key, const std::string& who_hosts);
  // The value of `key` when it is set, nullopt when not (yet); never waits.
  // Throws Error naming `who_hosts` when the store is gone.
  std::optional<std::string> try_get(const std::string& key, const std::string& who_hosts);
  // Atomic add; returns the new value.
  long long add(const std::string& key, long long delta);

 private:
  void check_launch(const LaunchEnv& env, double timeout_s);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anchor::dist
