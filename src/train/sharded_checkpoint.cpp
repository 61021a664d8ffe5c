// Distributed checkpoint save: every rank writes its files, rank 0 commits.
#include "anchor/train/sharded_checkpoint.hpp"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "anchor/common/fs.hpp"
#include "anchor/dist/launch.hpp"
#include "anchor/dist/process_group.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace anchor::train {
namespace {

void save_fault(int rank, std::int64_t step) {
  if (!dist::dist_fault().at(dist::DistFault::Point::kSave, rank, step)) return;
  ANCHOR_LOG_WARN("dist", "ANCHOR_DIST_FAULT: rank {} kills itself in the save of step {} after writing its files",
                  rank, step);
  std::fflush(nullptr);
  ::raise(SIGKILL);
}

}  // namespace

std::optional<checkpoint::SaveResult> save_distributed(dist::ProcessGroup& pg, checkpoint::Store& store,
                                                       checkpoint::SaveRequest req, const checkpoint::Hook& hook,
                                                       std::map<std::string, checkpoint::TensorDigests>* written) {
  // Keys unique per call: every rank saves in the same order.
  static int seq = 0;
  const std::string k = "ckpt/" + std::to_string(req.step) + "/" + std::to_string(seq++);
  const std::int64_t step = req.step;
  std::optional<checkpoint::SaveResult> res;
  if (pg.rank() == 0) {
    req.remote.announce = [&](const std::string& tmp) { pg.exchange(k + "/dir", tmp); };
    req.remote.collect = [&]() {
      save_fault(0, step);
      // A Gloo barrier first: a dead rank's closed sockets are seen at once
      // (a store get would only time out); a hung one after the timeout.
      pg.barrier("checkpoint save of step " + std::to_string(step) + " (waiting for every rank's files)");
      auto all = pg.exchange(k + "/files", "[]");
      std::vector<checkpoint::RemoteFile> out;
      for (std::size_t r = 1; r < all.size(); ++r)
        for (const auto& f : nlohmann::json::parse(all[r])) {
          checkpoint::RemoteFile rf{f.at("path").get<std::string>(), FileDigest{"", f.at("size").get<std::uint64_t>()},
                                    std::nullopt};
          if (f.contains("sha256"))  // a file of too many tensors to pin apart
            rf.digest.sha256 = f.at("sha256").get<std::string>();
          else
            rf.tensors = checkpoint::TensorDigests{f.at("header_sha256").get<std::string>(),
                                                   f.at("tensors").get<std::map<std::string, std::string>>()};
          out.push_back(std::move(rf));
        }
      return out;
    };
    res = store.save(req, hook);
    if (written) *written = res->digests;
  } else {
    const std::string tmp = pg.exchange(k + "/dir", "")[0];
    nlohmann::json mine = nlohmann::json::array();
    for (const auto& f : req.files) {
      const std::string path = tmp + "/" + f.filename;
      // write_safetensors fsyncs the file; rank 0 fsyncs the directory before COMMITTED.
      if (f.tensors.size() > checkpoint::kMaxTensorsPinnedApart) {
        auto d = checkpoint::write_safetensors(fs::real_fs(), path, f.tensors, f.metadata);
        mine.push_back({{"path", f.filename}, {"size", d.size}, {"sha256", d.sha256}});
        continue;
      }
      checkpoint::TensorDigests td;
      auto d = checkpoint::write_safetensors(fs::real_fs(), path, f.tensors, f.metadata, &td);
      mine.push_back({{"path", f.filename}, {"size", d.size}, {"header_sha256", td.header}, {"tensors", td.tensors}});
      if (written) written->emplace(f.filename, std::move(td));
    }
    save_fault(pg.rank(), step);
    pg.barrier("checkpoint save of step " + std::to_string(step) + " (waiting for every rank's files)");
    pg.exchange(k + "/files", mine.dump());
  }
  pg.barrier("checkpoint commit of step " + std::to_string(step));
  return res;
}

}  // namespace anchor::train
