// `anchor pilot` under torchrun or srun (docs/distributed.md): the launched
// processes meet through c10d's store, so this needs LibTorch and lives in
// anchor-torch; the front end hands the command over (src/cli/bridge.hpp).
#include <unistd.h>

#include <chrono>

#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/store.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"
#include "anchor/pipeline/pilot.hpp"

namespace anchor::pipeline {

int run_pilot(const PilotOptions& opts) {
  const auto launch = dist::detect_launch();  // a partial or contradictory environment: exit 2
  if (launch.launcher == dist::Launcher::kNone) return run_supervisor(opts, 0);

  // Under torchrun/srun: the pilot needs fresh worker processes and a real
  // SIGKILL, so the launched processes are supervisors, not workers. On one
  // node, rank 0 runs the pilot with as many self-started ranks as the
  // launcher started; the other launched processes wait for its exit code and
  // exit with it (docs/distributed.md).
  if (launch.local_world_size != launch.world_size)
    throw Error(ErrorKind::kUsage,
                std::string("anchor pilot under ") + dist::launcher_name(launch.launcher) + " on several nodes (" +
                    launch.describe() + ") is not supported yet",
                "run it on one node: torchrun --nproc_per_node N, or anchor pilot --nproc-per-node N");
  config::Config cfg = opts.config ? *opts.config : config::load(opts.config_path, opts.overrides);
  dist::check_nproc_per_node(launch, cfg.distributed.nproc_per_node);
  PilotOptions here = opts;
  here.config = &cfg;
  dist::Store store(launch, cfg.distributed.timeout_s);
  if (launch.rank != 0) {
    ANCHOR_LOG_INFO("pilot", "{}: rank 0 runs the pilot with {} ranks; waiting for its verdict", launch.describe(),
                    launch.world_size);
    const int code = std::stoi(store.wait_get("pilot/exit", "rank 0 (the pilot's supervisor)"));
    store.add("pilot/ack", 1);
    ANCHOR_LOG_INFO("pilot", "rank 0's pilot exited with {}", code);
    return code;
  }
  ANCHOR_LOG_INFO("pilot", "{}: this process supervises the pilot", launch.describe());
  int code = 1;
  try {
    code = run_supervisor(here, launch.world_size);
  } catch (const Error& e) {
    code = exit_code_for(e.kind());
    store.set("pilot/exit", std::to_string(code));
    throw;
  }
  store.set("pilot/exit", std::to_string(code));
  // The store lives in this process (unless the agent hosts it): stay until every rank has read the verdict.
  const auto t0 = std::chrono::steady_clock::now();
  while (store.add("pilot/ack", 0) < launch.world_size - 1 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(cfg.distributed.timeout_s))
    ::usleep(20000);
  return code;
}

}  // namespace anchor::pipeline
