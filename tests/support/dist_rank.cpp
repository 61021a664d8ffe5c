// One rank of a DDP run for tests/integration/dist/test_ddp.cpp: reads the
// launch environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), trains
// STEPS steps of CONFIG, writes every parameter as raw float32 to OUT.rank<r>
// and the step records as JSON lines to OUT.rank<r>.json.
//   dist_rank CONFIG STEPS OUT [--die-at-step K] [--hang-at-step K] [--perturb-at-step K]
//             [--ckpt DIR] [--save-at K]... [--restore 1]
// The faults act on rank 1 at the start of step K: SIGKILL itself, block
// forever (a hung rank), or change one parameter (replicas diverge).
// Checkpoints (docs/checkpoints.md): --save-at K saves into DIR after K steps
// (every rank writes its files: train/sharded_checkpoint.hpp); --restore 1
// restores the newest committed checkpoint of DIR first (any world size) and
// writes the restored state digest and RNG resharding to OUT.rank<r>.restored.json;
// STEPS then counts the steps after it. The state digest at each save goes to
// OUT.rank<r>.saved<K>.json, this rank's share of the state (Trainer::sharding)
// after the last step to OUT.rank<r>.sharding.json.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "anchor/config/config.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/error.hpp"
#include "anchor/checkpoint/store.hpp"
#include "anchor/train/sharded_checkpoint.hpp"
#include "anchor/train/trainer.hpp"

int main(int argc, char** argv) {
  using namespace anchor;
  if (argc < 4) {
    std::cerr << "usage: dist_rank CONFIG STEPS OUT [--die-at-step K|--hang-at-step K|--perturb-at-step K]\n";
    return 2;
  }
  int die = -1, hang = -1, perturb = -1;
  bool restore = false;
  std::string ckpt;
  std::vector<int> save_at;
  for (int i = 4; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ckpt") {
      ckpt = argv[i + 1];
      continue;
    }
    int k = std::stoi(argv[i + 1]);
    if (a == "--die-at-step")
      die = k;
    else if (a == "--hang-at-step")
      hang = k;
    else if (a == "--perturb-at-step")
      perturb = k;
    else if (a == "--save-at")
      save_at.push_back(k);
    else if (a == "--restore")
      restore = k != 0;
  }
  try {
    auto cfg = config::load(argv[1]);
    const int steps = std::stoi(argv[2]);
    auto env = dist::detect_launch();
    std::unique_ptr<dist::ProcessGroup> pg;
    if (env.distributed()) pg = std::make_unique<dist::ProcessGroup>(env, cfg.distributed.timeout_s);
    train::Trainer t(cfg, env.rank, env.world_size);
    if (pg) t.attach(pg.get(), static_cast<std::int64_t>(cfg.distributed.bucket_mb * 1024 * 1024));
    const std::string out = std::string(argv[3]) + ".rank" + std::to_string(env.rank);
    std::ofstream rec(out + ".json");
    checkpoint::Store store(ckpt.empty() ? "." : ckpt);
    if (restore) {
      auto loaded = store.restore_newest();
      if (!loaded) throw Error(ErrorKind::kVerification, "no committed checkpoint in " + ckpt);
      t.restore(*loaded, train::RestoreFaults::from_env());
      nlohmann::json r = {{"step", loaded->step}, {"state", t.state_digest()}, {"rng_restore", t.rng_restore()}};
      std::ofstream(out + ".restored.json") << r.dump(2);
    }
    for (int s = 0; s < steps; ++s) {
      if (std::find(save_at.begin(), save_at.end(), static_cast<int>(t.step())) != save_at.end()) {
        std::ofstream(out + ".saved" + std::to_string(t.step()) + ".json") << t.state_digest().dump(2);
        std::vector<torch::Tensor> keep;
        auto req = t.save_request(keep, nlohmann::json::object());
        if (pg)
          train::save_distributed(*pg, store, std::move(req));
        else
          store.save(req);
      }
      if (env.rank == 1 && s == die) ::raise(SIGKILL);
      if (env.rank == 1 && s == hang)
        for (;;) ::pause();
      if (env.rank == 1 && s == perturb) {
        torch::NoGradGuard g;
        t.model().parameters()[0].add_(1e-3);
      }
      rec << t.train_step().to_json().dump() << "\n" << std::flush;
    }
    // The store lives in rank 0: no rank leaves while another may still read it.
    std::ofstream(out + ".sharding.json") << t.sharding().dump(2);
    std::ofstream(out + ".state.json") << t.state_digest().dump(2);
    if (pg) pg->barrier("end of training");
    std::ofstream f(out, std::ios::binary);
    for (const auto& p : t.model().parameters()) {
      auto c = p.detach().to(torch::kFloat32).contiguous();
      f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    }
    return 0;
  } catch (const Error& e) {
    std::cerr << "dist_rank: error: " << e.what() << "\n";
    return static_cast<int>(exit_code_for(e.kind()));
  } catch (const std::exception& e) {
    std::cerr << "dist_rank: error: " << e.what() << "\n";
    return 1;
  }
}
