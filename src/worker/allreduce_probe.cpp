// One rank of the node's all-reduce probe (include/anchor/worker/worker.hpp).
#include <csignal>
#include <cstdio>
#include <iostream>

#include "anchor/common/utf8.hpp"
#include "anchor/dist/allreduce.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/worker/worker.hpp"

namespace anchor::worker {

ExitCode run_allreduce_probe(const AllReduceProbeOptions& opts) {
  const dist::LaunchEnv env = dist::detect_launch();
  if (!env.distributed())
    throw Error(ErrorKind::kUsage, "the all-reduce probe needs two ranks or more, started with torchrun's variables",
                "run `anchor preflight CONFIG --ranks 2`: it starts the ranks itself");
  std::string device = dist::rank_device(opts.device, env, static_cast<int>(torch::cuda::device_count()));
  if (device == "auto") device = "cpu";  // rank_device's auto without a GPU
  const bool on_gpu = device.rfind("cuda", 0) == 0;
  const std::string backend = dist::choose_backend(opts.backend, on_gpu, dist::nccl_available(), TORCH_VERSION);
  if (dist::dist_fault().at(dist::DistFault::Point::kProbe, env.rank)) {
    std::fflush(nullptr);
    ::raise(SIGKILL);  // ANCHOR_DIST_FAULT=sigkill_probe:<rank>: the test seam (launch.hpp)
  }
  dist::ProcessGroup pg(env, opts.timeout_s, backend);
  const auto timings = dist::time_allreduce(pg, dist::allreduce_probe_sizes(), device, 2, opts.iters);
  if (pg.rank() == 0)
    std::cout << dump_json(dist::allreduce_json(timings, pg.size(), backend, opts.iters)) << std::endl;
  pg.barrier("all-reduce probe end");
  return ExitCode::kOk;
}

}  // namespace anchor::worker
