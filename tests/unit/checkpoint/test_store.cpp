#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <thread>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/in_child.hpp"

namespace {

namespace ck = anchor::checkpoint;
namespace afs = anchor::fs;
using anchor::test::CheckpointDir;
using anchor::test::make_request;
using anchor::test::tensor_value;

std::string slurp(const std::filesystem::path& p) { return afs::read_file(p.string()); }
void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o << s;
}
bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// What a manifest v2 pins of a safetensors file, computed here from the file's
// bytes (not through the store): the SHA-256 of the header (the 8-byte length
// and the JSON) and of each tensor's slice of the data section.
nlohmann::json pins_of(const std::filesystem::path& p) {
  const std::string b = slurp(p);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  const auto header = nlohmann::json::parse(b.substr(8, n));
  nlohmann::json tensors = nlohmann::json::object();
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto begin = it.value()["data_offsets"][0].get<std::size_t>(),
               end = it.value()["data_offsets"][1].get<std::size_t>();
    tensors[it.key()] = anchor::sha256_hex(b.substr(8 + n + begin, end - begin));
  }
  return {{"header_sha256", anchor::sha256_hex(b.substr(0, 8 + n))}, {"tensors", tensors}};
}
std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += x + "\n";
  return s;
}

class StoreTest : public CheckpointDir {};

TEST_F(StoreTest, SaveWritesLayoutAndRestoreReadsItBack) {
  ck::Store store(root());
  auto req = make_request(2, 1000);
  std::vector<std::string> points;
  auto res = store.save(req, [&](std::string_view p) { points.emplace_back(p); });
  EXPECT_EQ(res.dir, root() + "/step-00000002");
  EXPECT_EQ(points, (std::vector<std::string>{"begin", "after_mkdir", "after_file:model.safetensors",
                                              "after_file:optimizer.safetensors", "after_file:state.json",
                                              "after_manifest", "after_committed", "after_dir_fsync", "after_rename",
                                              "after_parent_fsync", "done"}));
  std::filesystem::path d = res.dir;
  for (auto f : {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json", "COMMITTED"})
    EXPECT_TRUE(std::filesystem::exists(d / f)) << f;
  EXPECT_EQ(slurp(d / "COMMITTED"), anchor::sha256_hex(slurp(d / "manifest.json")) + "\n");
  auto manifest = nlohmann::json::parse(slurp(d / "manifest.json"));
  EXPECT_EQ(manifest["format"], "anchor.checkpoint-manifest/v2");
  EXPECT_EQ(manifest["step"], 2);
  ASSERT_EQ(manifest["files"].size(), 3u);
  std::uint64_t total = 0;
  for (auto& f : manifest["files"]) {
    const auto path = d / f["path"].get<std::string>();
    auto fd = anchor::sha256_file(path.string());
    EXPECT_EQ(f["size"], fd.size);
    if (path.extension() == ".safetensors") {  // pinned per tensor: each byte hashed once (docs/checkpoints.md)
      EXPECT_FALSE(f.contains("sha256")) << f.dump();
      EXPECT_EQ(f["header_sha256"], pins_of(path)["header_sha256"]) << f.dump();
      EXPECT_EQ(f["tensors"], pins_of(path)["tensors"]) << f.dump();
      const auto& own = res.digests.at(f["path"].get<std::string>());
      EXPECT_EQ(own.header, f["header_sha256"]);
      EXPECT_EQ(nlohmann::json(own.tensors), f["tensors"]) << "SaveResult::digests are what the manifest pins";
    } else {
      EXPECT_EQ(f["sha256"], fd.sha256);
    }
  }
  EXPECT_EQ(res.digests.size(), 2u);
  for (auto& e : std::filesystem::directory_iterator(d)) total += e.file_size();
  EXPECT_EQ(res.bytes, total);

  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 2);
  EXPECT_EQ(loaded->state["step"], 2);
  EXPECT_EQ(loaded->state["lr"], 0.5);
  EXPECT_TRUE(loaded->skipped.empty());
  const auto& model = loaded->files.at("model.safetensors");
  const auto* w = model.find("w");
  ASSERT_NE(w, nullptr);
  const float* wp = reinterpret_cast<const float*>(model.data(*w));
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(wp[i], tensor_value(2, i));
  EXPECT_EQ(model.metadata().at("kind"), "model");
  EXPECT_TRUE(store.verify(res.dir).ok);
}

// Files of 2 MiB and more take the huge-page buffer and the pipelined hash on
// read; 4 MiB and more the parallel hash on write. Same results as the
// one-pass sha256_file, and a flip deep in the data is still caught.
TEST_F(StoreTest, LargeFilesUseParallelPaths) {
  ck::Store store(root());
  store.save(make_request(1, 1000));
  auto dir = store.save(make_request(2, 1500000)).dir;  // model 6 MB
  const std::string model = dir + "/model.safetensors";
  auto manifest = nlohmann::json::parse(slurp(std::filesystem::path(dir) / "manifest.json"));
  EXPECT_EQ(manifest["files"][0]["path"], "model.safetensors");
  EXPECT_EQ(manifest["files"][0]["tensors"], pins_of(model)["tensors"]);
  anchor::FileDigest d;
  auto bytes = ck::FileBytes::read(model, &d);
  EXPECT_EQ(d.sha256, anchor::sha256_file(model).sha256);
  EXPECT_EQ(d.size, std::filesystem::file_size(model));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), slurp(model));
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->step, 2);
  const auto& f = l->files.at("model.safetensors");
  const float* w = reinterpret_cast<const float*>(f.data(*f.find("w")));
  EXPECT_EQ(w[1499999], tensor_value(2, 1499999));
  {
    std::fstream io(model, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(5000000);
    io.put('\x01');
  }
  EXPECT_EQ(store.restore_newest()->step, 1);
}

TEST_F(StoreTest, RequestValidation) {
  ck::Store store(root());
  auto req = make_request(3, 10);
  req.state["step"] = 4;
  EXPECT_THROW(store.save(req), anchor::Error);
  req = make_request(3, 10);
  req.files.push_back(req.files[0]);
  EXPECT_THROW(store.save(req), anchor::Error);
  req = make_request(3, 10);
  req.files[0].filename = "manifest.json";
  EXPECT_THROW(store.save(req), anchor::Error);
  req = make_request(3, 10);
  req.files[0].filename = "../x";
  EXPECT_THROW(store.save(req), anchor::Error);
  EXPECT_FALSE(std::filesystem::exists(root() + "/step-00000003"));
}

TEST_F(StoreTest, CreatesMissingRootAndResavesSameStep) {
  ck::Store store(root() + "/a/b");
  store.save(make_request(5, 10));
  auto req = make_request(5, 10);
  req.state["lr"] = 0.25;  // different content, same step
  store.save(req);
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->state["lr"], 0.25);
  // Only step-5 is left: the replaced one was deleted, no temp remains.
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(root() + "/a/b")) (void)e, ++n;
  EXPECT_EQ(n, 1);
}

TEST_F(StoreTest, RestoreFallsBackAndRecordsSkips) {
  ck::Store store(root());
  store.save(make_request(2, 100));
  store.save(make_request(4, 100));
  store.save(make_request(6, 100));
  // step 6: uncommitted; step 4: a temp dir alongside; a corrupt step 4 data byte.
  std::filesystem::remove(root() + "/step-00000006/COMMITTED");
  std::filesystem::create_directory(root() + "/step-00000008.tmp-abc");
  auto p = std::filesystem::path(root()) / "step-00000004" / "model.safetensors";
  auto s = slurp(p);
  s[s.size() - 3] ^= 1;
  spit(p, s);
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->step, 2);
  ASSERT_EQ(l->skipped.size(), 3u);
  EXPECT_EQ(l->skipped[0].dir, root() + "/step-00000008.tmp-abc");
  EXPECT_EQ(l->skipped[0].reason, "temporary directory of an unfinished save");
  EXPECT_EQ(l->skipped[1].reason, "no COMMITTED marker: the save did not finish");
  EXPECT_TRUE(contains(l->skipped[2].reason, "model.safetensors: tensor 'w' SHA-256 is ")) << l->skipped[2].reason;
  // max_step picks older ones.
  auto l2 = store.restore_newest(3);
  ASSERT_TRUE(l2);
  EXPECT_EQ(l2->step, 2);
  EXPECT_FALSE(store.restore_newest(1).has_value());
  // Empty/missing root.
  EXPECT_FALSE(ck::Store(root() + "/none").restore_newest().has_value());
}

TEST_F(StoreTest, VerifyExplainsEveryProblem) {
  ck::Store store(root());
  auto d = std::filesystem::path(store.save(make_request(2, 100)).dir);
  // Three problems at once: a missing file, a modified state.json, an extra file.
  std::filesystem::remove(d / "optimizer.safetensors");
  spit(d / "state.json", "{\"step\": 3}\n");
  spit(d / "extra.bin", "x");
  auto v = store.verify(d.string());
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.state, "invalid");
  auto all = joined(v.problems);
  EXPECT_TRUE(contains(all, "optimizer.safetensors is missing (listed in manifest.json)")) << all;
  EXPECT_TRUE(contains(all, "state.json: size is 12 bytes, manifest.json says")) << all;
  EXPECT_TRUE(contains(all, "state.json step is 3 but the directory is step 2")) << all;
  EXPECT_TRUE(contains(all, "extra.bin is not listed in manifest.json")) << all;
}

// The files of a checkpoint are read and hashed in parallel (check_files in
// store.cpp): what restores is every file's bytes, and the problems of several
// damaged files come out in manifest order on every run.
TEST_F(StoreTest, ManyFilesAreCheckedInParallelAndTheirProblemsComeInManifestOrder) {
  using ck::DType;
  ck::SaveRequest r;
  r.step = 4;
  // Large files (> 2 MiB: the read that hashes on a second thread) and small ones, interleaved.
  const std::int64_t sizes[] = {1 << 20, 1000, 700000, 3, 1 << 19, 50};
  for (int f = 0; f < 6; ++f) {
    const auto& buf = anchor::test::tensor_buffer(4, sizes[f], 10 + f);
    r.files.push_back(
        {"part" + std::to_string(f) + ".safetensors", {{"t", DType::F32, {sizes[f]}, buf.data(), buf.size() * 4}}, {}});
  }
  r.state = {{"lr", 0.5}};
  ck::Store store(root());
  const auto d = std::filesystem::path(store.save(r).dir);
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded);
  for (int f = 0; f < 6; ++f) {
    const auto& file = loaded->files.at("part" + std::to_string(f) + ".safetensors");
    const auto* e = file.find("t");
    ASSERT_NE(e, nullptr);
    const auto& want = anchor::test::tensor_buffer(4, sizes[f], 10 + f);
    EXPECT_EQ(std::memcmp(file.data(*e), want.data(), want.size() * 4), 0) << "part" << f;
  }

  // Damage three files, in an order unlike the manifest's and unlike their sizes.
  std::string bytes = slurp(d / "part4.safetensors");
  bytes[bytes.size() / 2] ^= 1;
  spit(d / "part4.safetensors", bytes);
  std::filesystem::remove(d / "part1.safetensors");
  bytes = slurp(d / "part0.safetensors");
  spit(d / "part0.safetensors", bytes.substr(0, bytes.size() - 8));
  std::vector<std::string> first;
  for (int run = 0; run < 10; ++run) {
    const auto v = store.verify(d.string());
    ASSERT_FALSE(v.ok);
    ASSERT_EQ(v.problems.size(), 4u) << joined(v.problems);
    EXPECT_TRUE(contains(v.problems[0], "part0.safetensors: size is")) << joined(v.problems);
    EXPECT_TRUE(contains(v.problems[1], "part0.safetensors: file length mismatch")) << joined(v.problems);
    EXPECT_TRUE(contains(v.problems[2], "part1.safetensors is missing")) << joined(v.problems);
    EXPECT_TRUE(contains(v.problems[3], "part4.safetensors: tensor 't' SHA-256 is")) << joined(v.problems);
    if (run == 0) first = v.problems;
    EXPECT_EQ(v.problems, first) << "run " << run;
  }
  EXPECT_FALSE(store.restore_newest()) << "the only checkpoint is damaged";
}

// manifest.json edited (COMMITTED made to match), so the store gets past the
// commit check to what the edit is about.
void rewrite_manifest(const std::filesystem::path& d, const std::function<void(nlohmann::json&)>& edit) {
  auto m = nlohmann::json::parse(slurp(d / "manifest.json"));
  edit(m);
  spit(d / "manifest.json", m.dump(2) + "\n");
  spit(d / "COMMITTED", anchor::sha256_hex(slurp(d / "manifest.json")) + "\n");
}

nlohmann::json& entry(nlohmann::json& m, const std::string& path) {
  for (auto& f : m["files"])
    if (f["path"] == path) return f;
  throw std::runtime_error("no entry " + path);
}

// Manifest v2: the restore hands back the digests it verified, the ones the
// save computed; a changed tensor or header is named; the pins must name
// exactly the file's tensors (every byte is covered).
TEST_F(StoreTest, PerTensorPinsAreVerifiedNamedAndHandedBack) {
  ck::Store store(root());
  const auto saved = store.save(make_request(2, 1000));
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->digests.size(), 2u);
  for (const auto& [name, d] : saved.digests) {
    EXPECT_EQ(loaded->digests.at(name).header, d.header) << name;
    EXPECT_EQ(loaded->digests.at(name).tensors, d.tensors) << name;
  }
  const std::filesystem::path dir = saved.dir;
  const std::string model = slurp(dir / "model.safetensors");

  // The header: same length, still valid JSON ("kind": "model" -> "modex").
  std::string h = model;
  const auto at = h.find("\"model\"");
  ASSERT_NE(at, std::string::npos);
  h[at + 5] = 'x';
  spit(dir / "model.safetensors", h);
  auto v = store.verify(dir.string());
  ASSERT_EQ(v.problems.size(), 1u) << joined(v.problems);
  EXPECT_TRUE(contains(v.problems[0], "model.safetensors: header SHA-256 is ")) << v.problems[0];

  // One data byte of tensor b (the first in the file): named, the other tensor not.
  std::string b = model;
  b[b.size() - 1000 * 4 - 1] ^= 1;  // the last byte of b, just before w's 4000
  spit(dir / "model.safetensors", b);
  v = store.verify(dir.string());
  ASSERT_EQ(v.problems.size(), 1u) << joined(v.problems);
  EXPECT_TRUE(contains(v.problems[0], "model.safetensors: tensor 'b' SHA-256 is ")) << v.problems[0];
  EXPECT_FALSE(store.restore_newest()) << "the only checkpoint is damaged";

  // Negative control: the file as written verifies again.
  spit(dir / "model.safetensors", model);
  EXPECT_TRUE(store.verify(dir.string()).ok) << joined(store.verify(dir.string()).problems);

  // A pin missing, and a pin of a tensor the file does not hold.
  rewrite_manifest(dir, [](nlohmann::json& m) {
    auto& t = entry(m, "model.safetensors")["tensors"];
    t["x"] = t["b"];
    t.erase("b");
  });
  v = store.verify(dir.string());
  ASSERT_EQ(v.problems.size(), 2u) << joined(v.problems);
  EXPECT_EQ(v.problems[0], "model.safetensors: manifest.json pins tensor 'x', which the file does not hold");
  EXPECT_EQ(v.problems[1], "model.safetensors: tensor 'b' is not pinned in manifest.json");
}

// A file of more tensors than kMaxTensorsPinnedApart is pinned whole (its
// per-tensor entry would outgrow the manifest); the checkpoint still verifies.
TEST_F(StoreTest, AFileOfVeryManyTensorsIsPinnedWhole) {
  static const std::uint8_t kByte = 7;
  ck::SaveRequest r;
  r.step = 2;
  r.files.push_back({"many.safetensors", {}, {}});
  r.files.push_back({"few.safetensors", {{"x", ck::DType::U8, {1}, &kByte, 1}}, {}});
  for (std::size_t i = 0; i <= ck::kMaxTensorsPinnedApart; ++i)
    r.files[0].tensors.push_back({"t" + std::to_string(i), ck::DType::U8, {1}, &kByte, 1});
  ck::Store store(root());
  const auto res = store.save(r);
  auto m = nlohmann::json::parse(slurp(std::filesystem::path(res.dir) / "manifest.json"));
  EXPECT_EQ(entry(m, "many.safetensors")["sha256"], anchor::sha256_file(res.dir + "/many.safetensors").sha256);
  EXPECT_FALSE(entry(m, "many.safetensors").contains("tensors"));
  EXPECT_TRUE(entry(m, "few.safetensors").contains("tensors")) << "the limit is per file";
  EXPECT_EQ(res.digests.count("many.safetensors"), 0u);
  const auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->files.at("many.safetensors").entries().size(), ck::kMaxTensorsPinnedApart + 1);
  EXPECT_EQ(loaded->digests.count("few.safetensors"), 1u);
}

// A crafted manifest that pins every tensor wrongly: the first 8 are named,
// then how many more; the reason stays short.
TEST_F(StoreTest, ManyDifferingTensorsAreNamedUpToEightThenCounted) {
  static const std::uint8_t kByte = 1;
  ck::SaveRequest r;
  r.step = 2;
  r.files.push_back({"model.safetensors", {}, {}});
  for (int i = 0; i < 20; ++i)
    r.files[0].tensors.push_back({"t" + std::to_string(100 + i), ck::DType::U8, {1}, &kByte, 1});
  ck::Store store(root());
  const std::filesystem::path dir = store.save(r).dir;
  rewrite_manifest(dir, [](nlohmann::json& m) {
    for (auto& [name, hex] : entry(m, "model.safetensors")["tensors"].items()) hex = std::string(64, 'a');
  });
  const auto v = store.verify(dir.string());
  ASSERT_EQ(v.problems.size(), 9u) << joined(v.problems);
  EXPECT_TRUE(contains(v.problems[0], "model.safetensors: tensor 't100' SHA-256 is ")) << v.problems[0];
  EXPECT_TRUE(contains(v.problems[7], "tensor 't107'")) << v.problems[7];
  EXPECT_EQ(v.problems[8], "model.safetensors: and 12 more tensors whose SHA-256 differs");
}

// Very many tensors over several files: a manifest that would outgrow what a
// reader takes (64 MiB) pins its largest per-tensor files whole, so the
// checkpoint it commits is one a restore takes.
TEST_F(StoreTest, AManifestThatWouldOutgrowTheReadersLimitPinsFilesWhole) {
  ck::SaveRequest r;
  r.step = 2;
  constexpr int kFiles = 13, kEach = 60000;  // 780k pins of ~86 bytes: ~67 MB
  for (int f = 0; f < kFiles; ++f) {
    r.files.push_back({"f" + std::to_string(10 + f) + ".safetensors", {}, {}});
    for (int i = 0; i < kEach; ++i)
      r.files.back().tensors.push_back({"t" + std::to_string(100000 + i), ck::DType::U8, {0}, nullptr, 0});
  }
  ck::Store store(root());
  const auto res = store.save(r);
  const auto text = slurp(std::filesystem::path(res.dir) / "manifest.json");
  EXPECT_LE(text.size(), 64u << 20);
  const auto m = nlohmann::json::parse(text);
  int whole = 0, apart = 0;
  for (const auto& f : m["files"]) {
    if (f["path"] == "state.json") continue;
    (f.contains("sha256") ? whole : apart) += 1;
  }
  EXPECT_GE(whole, 1);
  EXPECT_GE(apart, 1) << "only as many pinned whole as needed";
  EXPECT_EQ(whole + apart, kFiles);
  const auto v = store.verify(res.dir);
  EXPECT_TRUE(v.ok) << joined(v.problems);
}

// Malformed v2 entries are refused as such: one SHA-256 and per-tensor pins
// at once, a pin that is not a SHA-256, per-tensor pins of a file that is not
// safetensors, and per-tensor pins in a v1 manifest.
TEST_F(StoreTest, MalformedPerTensorEntriesAreRefused) {
  ck::Store store(root());
  const std::filesystem::path dir = store.save(make_request(2, 100)).dir;
  const std::string original = slurp(dir / "manifest.json");
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> cases = {
      {"malformed file entry",
       [](nlohmann::json& m) { entry(m, "model.safetensors")["sha256"] = std::string(64, 'a'); }},
      {"malformed file entry",
       [](nlohmann::json& m) { entry(m, "model.safetensors")["tensors"]["w"] = "not a digest"; }},
      {"malformed file entry", [](nlohmann::json& m) { entry(m, "model.safetensors").erase("header_sha256"); }},
      {"pins state.json per tensor, but it is not a .safetensors file",
       [](nlohmann::json& m) {
         auto& st = entry(m, "state.json");
         st.erase("sha256");
         st["header_sha256"] = std::string(64, 'a');
         st["tensors"] = nlohmann::json::object();
       }},
      {"malformed file entry", [](nlohmann::json& m) { m["format"] = "anchor.checkpoint-manifest/v1"; }},
  };
  for (const auto& [want, edit] : cases) {
    spit(dir / "manifest.json", original);
    rewrite_manifest(dir, edit);
    const auto v = store.verify(dir.string());
    EXPECT_FALSE(v.ok) << want;
    EXPECT_TRUE(contains(joined(v.problems), want)) << want << "\n" << joined(v.problems);
  }
  spit(dir / "manifest.json", original);
  spit(dir / "COMMITTED", anchor::sha256_hex(original) + "\n");
  EXPECT_TRUE(store.verify(dir.string()).ok) << "negative control: the manifest as written";
}

// A v1 checkpoint (every file pinned by one SHA-256: anchor before v2, and the
// Python helper's) still verifies and restores; it hands back no per-tensor
// digests, and a damaged file is still caught.
TEST_F(StoreTest, AVersionOneManifestStillVerifiesAndRestores) {
  ck::Store store(root());
  const std::filesystem::path dir = store.save(make_request(2, 1000)).dir;
  rewrite_manifest(dir, [&](nlohmann::json& m) {
    m["format"] = "anchor.checkpoint-manifest/v1";
    for (auto& f : m["files"]) {
      f.erase("header_sha256");
      f.erase("tensors");
      f["sha256"] = anchor::sha256_file((dir / f["path"].get<std::string>()).string()).sha256;
    }
  });
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded) << joined(store.verify(dir.string()).problems);
  EXPECT_EQ(loaded->step, 2);
  EXPECT_TRUE(loaded->digests.empty());
  EXPECT_EQ(loaded->files.size(), 2u);
  std::string b = slurp(dir / "model.safetensors");
  b[b.size() - 3] ^= 1;
  spit(dir / "model.safetensors", b);
  const auto v = store.verify(dir.string());
  ASSERT_EQ(v.problems.size(), 1u) << joined(v.problems);
  EXPECT_TRUE(contains(v.problems[0], "model.safetensors: SHA-256 is ")) << v.problems[0];
}

// A file replaced by a symlink to something larger than the manifest says is
// refused by its size before it is read (the verify-only memory bound rests on it).
TEST_F(StoreTest, ASymlinkToALargerFileIsRefusedBeforeItIsRead) {
  ck::Store store(root());
  const auto d = std::filesystem::path(store.save(make_request(2, 100)).dir);
  const auto big = dir_ / "big.bin";
  spit(big, std::string(1 << 20, 'x'));
  std::filesystem::remove(d / "optimizer.safetensors");
  std::filesystem::create_symlink(big, d / "optimizer.safetensors");
  const auto v = store.verify(d.string());
  ASSERT_FALSE(v.ok);
  EXPECT_TRUE(contains(joined(v.problems), "optimizer.safetensors: size is 1048576 bytes, manifest.json says"))
      << joined(v.problems);
  EXPECT_FALSE(contains(joined(v.problems), "SHA-256 is")) << "refused before it was read: " << joined(v.problems);
}

TEST_F(StoreTest, CommittedMustMatchManifest) {
  ck::Store store(root());
  auto d = std::filesystem::path(store.save(make_request(2, 10)).dir);
  spit(d / "COMMITTED", std::string(64, 'a') + "\n");
  auto v = store.verify(d.string());
  ASSERT_FALSE(v.ok);
  EXPECT_TRUE(contains(joined(v.problems), "COMMITTED holds aaaa")) << joined(v.problems);
  spit(d / "COMMITTED", "garbage");
  EXPECT_TRUE(contains(joined(store.verify(d.string()).problems), "COMMITTED does not hold a SHA-256"));
}

TEST_F(StoreTest, EveryByteFlipAndTruncationIsDetected) {
  ck::Store store(root());
  store.save(make_request(2, 300));
  auto d = std::filesystem::path(store.save(make_request(4, 300)).dir);
  std::mt19937 rng(12345);
  int trials = 0;
  for (const char* name : {"model.safetensors", "optimizer.safetensors", "state.json", "manifest.json", "COMMITTED"}) {
    const std::string orig = slurp(d / name);
    // Sampled positions: every byte of the first 64 (length prefix and header
    // start), the last 16, and 48 random ones across header and data.
    std::vector<std::size_t> pos;
    for (std::size_t i = 0; i < std::min<std::size_t>(64, orig.size()); ++i) pos.push_back(i);
    for (std::size_t i = orig.size() > 16 ? orig.size() - 16 : 0; i < orig.size(); ++i) pos.push_back(i);
    for (int i = 0; i < 48; ++i) pos.push_back(rng() % orig.size());
    for (std::size_t p : pos) {
      std::string bad = orig;
      bad[p] = static_cast<char>(bad[p] ^ (1u << (rng() % 8)));
      spit(d / name, bad);
      auto v = store.verify(d.string());
      ASSERT_FALSE(v.ok) << name << " flip at " << p;
      auto l = store.restore_newest();
      ASSERT_TRUE(l);
      ASSERT_EQ(l->step, 2) << name << " flip at " << p;
      ++trials;
    }
    for (std::size_t n :
         {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(8), orig.size() / 2, orig.size() - 1}) {
      spit(d / name, orig.substr(0, n));
      ASSERT_FALSE(store.verify(d.string()).ok) << name << " truncated to " << n;
      ASSERT_EQ(store.restore_newest()->step, 2);
      ++trials;
    }
    spit(d / name, orig + "\n");  // extension
    ASSERT_FALSE(store.verify(d.string()).ok) << name << " extended";
    spit(d / name, orig);
    ASSERT_TRUE(store.verify(d.string()).ok) << name << " restored";  // negative control
    std::filesystem::remove(d / name);                                // a missing file
    ASSERT_FALSE(store.verify(d.string()).ok) << name << " missing";
    ASSERT_EQ(store.restore_newest()->step, 2);
    spit(d / name, orig);
  }
  EXPECT_GT(trials, 400);
  EXPECT_EQ(store.restore_newest()->step, 4);
}

// --- injected file-system faults --------------------------------------------

struct FaultCase {
  afs::Op op;
  int nth;
  int err;
  const char* what;  // expected in the message
};

TEST_F(StoreTest, InjectedFaultsLeavePreviousCheckpointIntact) {
  // Calls per save of make_request (root exists): creates 5 (2 safetensors,
  // state, manifest, COMMITTED), 5 fsyncs, fsync_dir: temp dir then root.
  std::vector<FaultCase> cases = {
      {afs::Op::kWrite, 1, ENOSPC, "ENOSPC"},  {afs::Op::kWrite, 3, EIO, "EIO"},
      {afs::Op::kWrite, 6, ENOSPC, "ENOSPC"},  {afs::Op::kFsync, 1, EIO, "EIO"},
      {afs::Op::kFsync, 4, ENOSPC, "ENOSPC"},  {afs::Op::kFsync, 5, EIO, "EIO"},
      {afs::Op::kCreate, 5, ENOSPC, "ENOSPC"}, {afs::Op::kMkdir, 1, ENOSPC, "ENOSPC"},
      {afs::Op::kRename, 1, EIO, "EIO"},       {afs::Op::kFsyncDir, 1, EIO, "EIO"},
      {afs::Op::kFsyncDir, 2, EIO, "EIO"},
  };
  for (bool resave : {false, true}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(afs::op_name(c.op)) + " #" + std::to_string(c.nth) + " " + c.what +
                   (resave ? " (re-save of the newest step)" : ""));
      std::filesystem::remove_all(root());
      ck::Store good(root());
      good.save(make_request(2, 3000));
      const std::string before = slurp(root() + "/step-00000002/manifest.json");
      afs::FaultInjectingFs faulty;
      faulty.fail_on(c.op, c.nth, c.err);
      ck::Store store(root(), faulty);
      const std::int64_t step = resave ? 2 : 4;
      auto req = make_request(step, 3000);
      req.state["lr"] = 0.125;
      try {
        store.save(req);
        FAIL() << "save did not fail";
      } catch (const anchor::Error& e) {
        EXPECT_EQ(e.kind(), anchor::ErrorKind::kIo);
        EXPECT_TRUE(contains(e.what(), c.what)) << e.what();
        EXPECT_TRUE(contains(e.what(), root())) << e.what();  // names the path
        EXPECT_TRUE(contains(e.what(), "save checkpoint step " + std::to_string(step))) << e.what();
      }
      // Previous checkpoint intact and readable; nothing else left behind.
      std::vector<std::string> names;
      for (auto& e : std::filesystem::directory_iterator(root())) names.push_back(e.path().filename());
      EXPECT_EQ(names, std::vector<std::string>{"step-00000002"});
      EXPECT_EQ(slurp(root() + "/step-00000002/manifest.json"), before);
      auto l = good.restore_newest();
      ASSERT_TRUE(l);
      EXPECT_EQ(l->step, 2);
      EXPECT_EQ(l->state["lr"], 0.5);  // the old content, not the failed save's
      // The next save of the same step works.
      auto r = good.save(req);
      EXPECT_TRUE(good.verify(r.dir).ok);
      EXPECT_EQ(good.restore_newest()->state["lr"], 0.125);
    }
  }
}

TEST_F(StoreTest, HookFailureAtEveryPointLeavesPreviousIntact) {
  for (const char* at :
       {"begin", "after_mkdir", "after_file:model.safetensors", "after_file:state.json", "after_manifest",
        "after_committed", "after_dir_fsync", "after_rename", "after_parent_fsync"}) {
    SCOPED_TRACE(at);
    std::filesystem::remove_all(root());
    ck::Store store(root());
    store.save(make_request(2, 100));
    auto throwing = [&](std::string_view p) {
      if (p == at) throw anchor::Error(anchor::ErrorKind::kRuntime, "injected at " + std::string(p));
    };
    EXPECT_THROW(store.save(make_request(4, 100), throwing), anchor::Error);
    EXPECT_EQ(store.restore_newest()->step, 2);
    EXPECT_EQ(store.list().size(), 1u);
  }
}

TEST_F(StoreTest, RealFullDiskViaRlimitFsize) {
  ck::Store store(root());
  store.save(make_request(2, 1000));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl {
      64 * 1024, 64 * 1024
    };
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int code = 10;
    try {
      ck::Store(root()).save(make_request(4, 100000));  // 400 KB > 64 KiB
    } catch (const anchor::Error& e) {
      std::string m = e.what();
      code = (m.find("EFBIG") != std::string::npos && m.find("step-00000004.tmp-") != std::string::npos) ? 0 : 11;
      if (code) std::fprintf(stderr, "message: %s\n", m.c_str());
    } catch (...) {
      code = 12;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: save succeeded, 11: wrong message, 12: other exception";
  EXPECT_EQ(store.list().size(), 1u);  // no temp left
  EXPECT_EQ(store.restore_newest()->step, 2);
  store.save(make_request(4, 100000));  // without the limit it works
  EXPECT_EQ(store.restore_newest()->step, 4);
}

// --- maintenance ------------------------------------------------------------

TEST_F(StoreTest, RemoveStaleTemps) {
  ck::Store store(root());
  store.save(make_request(2, 10));
  std::filesystem::create_directories(root() + "/step-00000004.tmp-1234/x");
  std::filesystem::create_directories(root() + "/step-00000001.trash-99");
  std::filesystem::create_directories(root() + "/unrelated");
  auto removed = store.remove_stale_temps();
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed,
            (std::vector<std::string>{root() + "/step-00000001.trash-99", root() + "/step-00000004.tmp-1234"}));
  EXPECT_TRUE(std::filesystem::exists(root() + "/unrelated"));
  EXPECT_TRUE(store.verify(root() + "/step-00000002").ok);
  EXPECT_TRUE(store.remove_stale_temps().empty());
}

TEST_F(StoreTest, RetentionKeepsNewestValid) {
  ck::Store store(root());
  for (int s : {1, 2, 3, 4, 5}) store.save(make_request(s, 10));
  EXPECT_THROW(store.apply_retention(0), anchor::Error);
  // Corrupt the newest: it does not count, and it is left for inspection.
  spit(root() + "/step-00000005/state.json", "{}");
  auto del = store.apply_retention(2);
  EXPECT_EQ(del, (std::vector<std::string>{root() + "/step-00000002", root() + "/step-00000001"}));
  std::vector<std::int64_t> left;
  for (auto& v : store.list()) left.push_back(v.step);
  EXPECT_EQ(left, (std::vector<std::int64_t>{5, 4, 3}));
  EXPECT_EQ(store.restore_newest()->step, 4);
  // Fewer valid than keep_last: nothing is deleted.
  EXPECT_TRUE(store.apply_retention(3).empty());
  // keep 1 never deletes the newest valid one.
  del = store.apply_retention(1);
  EXPECT_EQ(del, (std::vector<std::string>{root() + "/step-00000003"}));
  EXPECT_EQ(store.restore_newest()->step, 4);
}

// A restore says what it saw (Loaded::verified): a directory that still
// matches it counts as verified without being read; one changed since is read
// again and its problem found.
TEST_F(StoreTest, ARestoresViewOfItsDirectoryVouchesForItOnlyWhileNothingChanged) {
  ck::Store store(root());
  store.save(make_request(1, 10));
  const auto newest = store.save(make_request(2, 10));
  // Restored at once, the files' ctimes are within the racy margin: no view.
  ASSERT_TRUE(store.restore_newest());
  EXPECT_TRUE(store.restore_newest()->verified.empty());
  // Aged past it (as worker A's R steps age its save), the restore keeps one.
  std::this_thread::sleep_for(std::chrono::nanoseconds(ck::VerifiedDir::kRacyMarginNs) + std::chrono::milliseconds(50));
  const auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded);
  const ck::VerifiedDir seen = loaded->verified;
  ASSERT_FALSE(seen.empty());
  std::vector<std::string> names;
  for (const auto& e : seen.entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"COMMITTED", "manifest.json", "model.safetensors", "optimizer.safetensors",
                                             "state.json"}));
  EXPECT_TRUE(seen.still_matches(newest.dir));
  EXPECT_FALSE(seen.still_matches(root() + "/step-00000001"));  // another directory
  const auto counted = store.verify(newest.dir, {seen});
  EXPECT_TRUE(counted.ok);
  EXPECT_EQ(counted.step, 2);
  EXPECT_EQ(counted.bytes, store.verify(newest.dir).bytes);
  // Round trip through JSON (resume.json carries it); a malformed one is refused by name.
  EXPECT_EQ(ck::VerifiedDir::from_json(seen.to_json()), seen);
  auto bad = seen.to_json();
  bad["entries"][1].erase("ctime_ns");
  try {
    ck::VerifiedDir::from_json(bad);
    ADD_FAILURE() << "a missing ctime_ns was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("entries[1].ctime_ns"), std::string::npos) << e.what();
  }
  // A data byte changed after the restore (same size, mtime set back): the
  // ctime moved, so nothing vouches and the verification reads and finds it.
  const auto data = newest.dir + "/model.safetensors";
  struct stat before {};
  ASSERT_EQ(::stat(data.c_str(), &before), 0);
  std::string bytes = slurp(data);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  spit(data, bytes);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, data.c_str(), times, 0), 0);
  EXPECT_FALSE(seen.still_matches(newest.dir));
  EXPECT_FALSE(store.verify(newest.dir, {seen}).ok);
  // What vouches is not read at all: a view taken of the damaged directory
  // (as if a verification had passed it) makes it count (the control that the
  // flip is there: verified without it, it fails).
  const auto damaged_view = ck::VerifiedDir::of(newest.dir);
  ASSERT_TRUE(damaged_view);
  EXPECT_TRUE(store.verify(newest.dir, {*damaged_view}).ok);
  EXPECT_FALSE(store.verify(newest.dir).ok);
  // An entry added since: no longer the same directory.
  spit(newest.dir + "/extra.bin", "x");
  EXPECT_FALSE(damaged_view->still_matches(newest.dir));
  EXPECT_FALSE(store.list({*damaged_view})[0].ok);
  // A link among the entries: its target's changes would not show in the
  // link's identity, so no view is taken of such a directory.
  std::filesystem::remove(newest.dir + "/extra.bin");
  ASSERT_TRUE(ck::VerifiedDir::of(newest.dir));
  std::filesystem::create_symlink("model.safetensors", newest.dir + "/alias.safetensors");
  EXPECT_FALSE(ck::VerifiedDir::of(newest.dir));
}

// The directory a save just committed counts as verifying without being read
// again (its bytes were hashed as they were written); any other is read whole.

TEST_F(StoreTest, RetentionTrustsTheJustCommittedStepWithoutReadingIt) {
  ck::Store store(root());
  for (int s : {1, 2}) store.save(make_request(s, 10));
  const auto newest = store.save(make_request(3, 10));
  // A data byte of step 3 changed behind the store's back: reading it would find it.
  const auto data = newest.dir + "/model.safetensors";
  ASSERT_TRUE(std::filesystem::exists(data)) << data;
  std::string bytes = slurp(data);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  spit(data, bytes);
  // Negative control: not named as just committed, step 3 is read, fails, and
  // is not counted; steps 2 and 1 are the valid ones kept.
  EXPECT_TRUE(store.apply_retention(2).empty());
  // Named: step 3 is counted without being read, so step 2 is the second kept
  // and step 1 goes; nothing was read to find that (the flip stays unseen).
  EXPECT_EQ(store.apply_retention(2, newest.dir), (std::vector<std::string>{root() + "/step-00000001"}));
  // Without its COMMITTED file the name alone counts for nothing.
  std::filesystem::remove(newest.dir + "/COMMITTED");
  EXPECT_TRUE(store.apply_retention(1, newest.dir).empty());
  EXPECT_EQ(store.restore_newest()->step, 2);
}

// A kill between the rename to trash and the removal leaves only trash.
TEST_F(StoreTest, RetentionInterruptedAfterRenameIsHarmless) {
  ck::Store plain(root());
  for (int s : {1, 2, 3}) plain.save(make_request(s, 10));
  afs::FaultInjectingFs faulty;
  faulty.fail_on(afs::Op::kRemove, 1, EIO);  // renamed, then the removal fails
  ck::Store store(root(), faulty);
  EXPECT_THROW(store.apply_retention(1), anchor::Error);
  auto l = plain.list();
  ASSERT_EQ(l.size(), 3u);  // step 3, the trash of step 2 (deleted newest first), step 1
  EXPECT_EQ(l[0].state, "committed");
  EXPECT_EQ(l[1].state, "trash");
  EXPECT_EQ(l[2].step, 1);
  EXPECT_EQ(plain.restore_newest()->step, 3);
  EXPECT_EQ(plain.remove_stale_temps().size(), 1u);
}

TEST_F(StoreTest, ListShowsStates) {
  ck::Store store(root());
  store.save(make_request(2, 10));
  store.save(make_request(3, 10));
  std::filesystem::remove(root() + "/step-00000003/COMMITTED");
  std::filesystem::create_directory(root() + "/step-00000004.tmp-zz");
  auto l = store.list();
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].state, "temporary");
  EXPECT_EQ(l[1].state, "uncommitted");
  EXPECT_EQ(l[2].state, "committed");
  EXPECT_TRUE(l[2].ok);
  EXPECT_GT(l[2].bytes, 0u);
}

// Issue 43.7: a step that retention removes between the listing and its verification is left out,
// not listed as invalid; one that is there and broken is still listed (the negative control).
TEST_F(StoreTest, AStepGoneWhileListedIsLeftOutNotInvalid) {
  ck::Store store(root());
  store.save(make_request(2, 10));
  const std::string gone = root() + "/step-00000005";  // listed a moment ago, removed since
  EXPECT_FALSE(store.verify_listed(gone).has_value());
  EXPECT_EQ(store.verify(gone).state, "invalid") << "what list said of it before";
  std::filesystem::create_directory(gone);  // there, and not a checkpoint
  const auto v = store.verify_listed(gone);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->ok);
  EXPECT_EQ(store.verify_listed(root() + "/step-00000002")->state, "committed");
}

TEST_F(StoreTest, FaultEnvParsing) {
  ck::Store store(root());
  ::setenv("ANCHOR_FAULT", "after_manifest:explode", 1);
  EXPECT_THROW(store.save(make_request(1, 10)), anchor::Error);
  ::setenv("ANCHOR_FAULT", "after_manifest@x:exit", 1);
  EXPECT_THROW(store.save(make_request(1, 10)), anchor::Error);
  ::setenv("ANCHOR_FAULT", "after_manifest@7:exit", 1);  // another step: no effect
  EXPECT_NO_THROW(store.save(make_request(1, 10)));
  ::unsetenv("ANCHOR_FAULT");
}

// The env seam really ends the process at the named point: fork, save, check
// the exit status and what is on disk.
TEST_F(StoreTest, FaultEnvExitAndSigkillAtEachPoint) {
  for (const char* action : {"exit", "sigkill"}) {
    for (const char* at : {"begin", "after_mkdir", "after_file:model.safetensors", "after_file:optimizer.safetensors",
                           "after_file:state.json", "after_manifest", "after_committed", "after_dir_fsync",
                           "after_rename", "after_parent_fsync", "done"}) {
      SCOPED_TRACE(std::string(at) + ":" + action);
      std::filesystem::remove_all(root());
      ck::Store store(root());
      store.save(make_request(2, 100));
      pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::setenv("ANCHOR_FAULT", (std::string(at) + "@4:" + action).c_str(), 1);
        try {
          ck::Store(root()).save(make_request(4, 100));
        } catch (...) {
          ::_exit(20);
        }
        ::_exit(21);
      }
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      if (std::string(action) == "exit") {
        ASSERT_TRUE(WIFEXITED(status));
        EXPECT_EQ(WEXITSTATUS(status), ck::kFaultExitCode);
      } else {
        ASSERT_TRUE(WIFSIGNALED(status));
        EXPECT_EQ(WTERMSIG(status), SIGKILL);
      }
      auto l = store.restore_newest();
      ASSERT_TRUE(l);
      const bool committed = std::string(at).rfind("after_rename", 0) == 0 || std::string(at) == "after_parent_fsync" ||
                             std::string(at) == "done";
      EXPECT_EQ(l->step, committed ? 4 : 2);
      store.remove_stale_temps();
      auto r = store.save(make_request(4, 100));  // the next save of that step works
      EXPECT_TRUE(store.verify(r.dir).ok);
    }
  }
}

}  // namespace

// Files written by other processes (the other ranks of a distributed save,
// docs/checkpoints.md): announce gets the temp dir, collect returns their
// digests; they are listed in the manifest and verified on restore.
namespace {

class StoreRemoteTest : public CheckpointDir {};

ck::RemoteFile write_remote(const std::string& dir, const std::string& name, float v) {
  static std::vector<float> data(64);
  std::fill(data.begin(), data.end(), v);
  auto d = ck::write_safetensors(afs::real_fs(), dir + "/" + name,
                                 {{"shard", ck::DType::F32, {64}, data.data(), data.size() * 4}});
  return {name, d, std::nullopt};
}

TEST_F(StoreRemoteTest, RemoteFilesAreListedAndVerified) {
  ck::Store store(root());
  auto req = make_request(3, 100);
  std::string tmp;
  req.remote.announce = [&](const std::string& t) { tmp = t; };
  req.remote.collect = [&] { return std::vector<ck::RemoteFile>{write_remote(tmp, "opt-rank1.safetensors", 1.5f)}; };
  std::vector<std::string> points;
  auto res = store.save(req, [&](std::string_view p) { points.emplace_back(p); });
  EXPECT_NE(std::find(points.begin(), points.end(), "after_remote_files"), points.end());
  auto manifest = nlohmann::json::parse(slurp(std::filesystem::path(res.dir) / "manifest.json"));
  ASSERT_EQ(manifest["files"].size(), 4u);
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded.has_value());
  const auto& f = loaded->files.at("opt-rank1.safetensors");
  ASSERT_NE(f.find("shard"), nullptr);
  EXPECT_EQ(reinterpret_cast<const float*>(f.data(*f.find("shard")))[5], 1.5f);
}

// A rank that never reports (collect throws: the timeout naming it) or
// reports a wrong size: no COMMITTED, no temp dir left, the previous
// checkpoint intact.
TEST_F(StoreRemoteTest, AFailedCollectLeavesNoCommit) {
  ck::Store store(root());
  store.save(make_request(1, 100));
  auto req = make_request(2, 100);
  std::string tmp;
  req.remote.announce = [&](const std::string& t) { tmp = t; };
  req.remote.collect = [&]() -> std::vector<ck::RemoteFile> {
    write_remote(tmp, "opt-rank1.safetensors", 2.0f);
    throw anchor::Error(anchor::ErrorKind::kRuntime, "rank 1 did not answer (dead or hung)");
  };
  EXPECT_THROW(store.save(req), anchor::Error);
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_FALSE(std::filesystem::exists(root() + "/step-00000002"));

  req.remote.collect = [&] {
    auto f = write_remote(tmp, "opt-rank1.safetensors", 2.0f);
    f.digest.size += 1;  // a writer that reported what it did not write
    return std::vector<ck::RemoteFile>{f};
  };
  try {
    store.save(req);
    FAIL() << "a wrong size was accepted";
  } catch (const anchor::Error& e) {
    EXPECT_TRUE(contains(e.what(), "its writer reported")) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(root() + "/step-00000002"));
  auto loaded = store.restore_newest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 1);
}

}  // namespace

// --- issue 14: bytes that are not UTF-8, FIFOs, unreadable entries, fault typos

namespace {

namespace ck = anchor::checkpoint;
using anchor::test::CheckpointDir;
using anchor::test::make_request;

class StoreHardeningTest : public CheckpointDir {};

// "" when every text can go into JSON (nlohmann's dump throws on a byte that
// is not UTF-8: what made the pilot's fallback exit 1), else the first that cannot.
std::string json_cannot_hold(const std::vector<std::string>& texts) {
  for (const auto& t : texts) {
    try {
      (void)nlohmann::json(t).dump();
    } catch (const nlohmann::json::exception&) {
      return t;
    }
  }
  return "";
}

// Sets the first byte of `needle` in the file's header to 0xff.
void poison_header(const std::string& path, const std::string& needle) {
  std::string bytes = anchor::fs::read_file(path);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << needle;
  ASSERT_LT(at, 8 + 200u);  // inside the header
  bytes[at] = '\xff';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A newer step whose model.safetensors header holds a byte that is not UTF-8
// is skipped with a reason that JSON can hold, and the older step is restored.
TEST_F(StoreHardeningTest, HeaderWithInvalidUtf8IsSkippedWithAPrintableReason) {
  ck::Store store(root());
  store.save(make_request(2, 100));
  const auto dir4 = store.save(make_request(4, 100)).dir;
  poison_header(dir4 + "/model.safetensors", "\"kind\"");
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->step, 2);
  ASSERT_EQ(l->skipped.size(), 1u);
  EXPECT_EQ(json_cannot_hold({l->skipped[0].reason}), "");
  EXPECT_NE(l->skipped[0].reason.find("header is not valid JSON"), std::string::npos) << l->skipped[0].reason;
  EXPECT_NE(l->skipped[0].reason.find("\\xff"), std::string::npos) << l->skipped[0].reason;
  auto v = store.verify(dir4);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(json_cannot_hold(v.problems), "");
  for (const auto& row : store.list()) EXPECT_EQ(json_cannot_hold(row.problems), "");
}

// A checkpoint root whose path holds a byte that is not UTF-8: the problems
// that name a path stay valid UTF-8 (the path shown with \xNN).
TEST_F(StoreHardeningTest, RootPathWithInvalidUtf8GivesPrintableProblems) {
  const std::string odd = (dir_ / "ck\xff").string();
  ck::Store store(odd);
  store.save(make_request(2, 100));
  const auto dir4 = store.save(make_request(4, 100)).dir;
  std::filesystem::resize_file(dir4 + "/model.safetensors", 20);  // truncated: the message names the file's path
  auto v = store.verify(dir4);
  ASSERT_FALSE(v.ok);
  EXPECT_EQ(json_cannot_hold(v.problems), "");
  bool named = false;
  for (const auto& p : v.problems)
    named = named || p.find("ck\\xff/step-00000004/model.safetensors") != std::string::npos;
  EXPECT_TRUE(named) << joined(v.problems);
  auto l = store.restore_newest();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->step, 2);
  EXPECT_EQ(json_cannot_hold({l->skipped.at(0).reason}), "");
}

// A FIFO in place of each file anchor reads in a step directory: verify,
// list and restore answer at once (a blocking open would wait forever), name
// the FIFO, and restore falls back to the older step. Each call runs in a
// child with a deadline, so a regression fails instead of hanging.
// A manifest.json or state.json nested a million levels deep (2 MB) made
// verify, list and the restore's fallback overflow the stack (nlohmann's dump
// and comparison recurse). It is a problem like any malformed file; the
// restore falls back to the older step. Run in a child: the old code crashed.
TEST_F(StoreHardeningTest, DeeplyNestedJsonIsAProblemNotACrash) {
  for (const char* name : {"manifest.json", "state.json"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(root());
    ck::Store store(root());
    store.save(make_request(2, 100));
    const auto dir4 = store.save(make_request(4, 100)).dir;
    {
      std::ofstream f(dir4 + "/" + name, std::ios::trunc);
      f << "{\"files\": " << std::string(1000000, '[') << std::string(1000000, ']') << "}";
    }
    if (std::string(name) == "state.json") {
      // Listed with its new size and digest (and COMMITTED to match), so that
      // the store gets as far as parsing it.
      auto m = nlohmann::json::parse(anchor::fs::read_file(dir4 + "/manifest.json"));
      for (auto& f : m["files"])
        if (f["path"] == "state.json") {
          const auto d = anchor::sha256_file(dir4 + "/state.json");
          f["size"] = d.size;
          f["sha256"] = d.sha256;
        }
      spit(dir4 + "/manifest.json", m.dump());
      spit(dir4 + "/COMMITTED", anchor::sha256_file(dir4 + "/manifest.json").sha256 + "\n");
    }
    auto r = anchor::test::in_child(
        [&] {
          const auto v = store.verify(dir4);
          const auto l = store.restore_newest();
          return joined(v.problems) + "\nrestored step " + (l ? std::to_string(l->step) : std::string("none"));
        },
        60);
    ASSERT_FALSE(r.timed_out);
    EXPECT_NE(r.text.find("nest deeper than 64 levels"), std::string::npos) << r.text.substr(0, 2000);
    EXPECT_NE(r.text.find("restored step 2"), std::string::npos) << r.text.substr(0, 2000);
  }
}

// A sparse terabyte in place of COMMITTED, manifest.json or a listed file was
// read whole (std::bad_alloc escaped as an "internal" error, or the OOM
// killer came). Sizes are checked first: each is a problem, the restore falls
// back to the older step.
TEST_F(StoreHardeningTest, OversizedFilesAreProblemsNotAllocations) {
  constexpr std::uintmax_t kTerabyte = 1ull << 40;
  for (const char* name : {"COMMITTED", "manifest.json", "model.safetensors"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(root());
    ck::Store store(root());
    store.save(make_request(2, 100));
    const auto dir4 = store.save(make_request(4, 100)).dir;
    std::error_code ec;
    std::filesystem::resize_file(dir4 + "/" + name, kTerabyte, ec);
    if (ec) GTEST_SKIP() << "this file system cannot hold a sparse 1 TB file: " << ec.message();
    auto r = anchor::test::in_child(
        [&] {
          const auto v = store.verify(dir4);
          const auto l = store.restore_newest();
          return joined(v.problems) + "\nrestored step " + (l ? std::to_string(l->step) : std::string("none"));
        },
        30);
    ASSERT_FALSE(r.timed_out);
    EXPECT_FALSE(r.threw) << r.text;
    const std::string want = std::string(name) == "model.safetensors"
                                 ? "model.safetensors: size is 1099511627776 bytes, manifest.json says"
                                 : std::string(name) + ": 1099511627776 bytes, more than the 67108864";
    EXPECT_NE(r.text.find(want), std::string::npos) << r.text;
    EXPECT_NE(r.text.find("restored step 2"), std::string::npos) << r.text;
  }
}

TEST_F(StoreHardeningTest, FifoInPlaceOfAFileIsRefusedPromptly) {
  for (const char* name : {"model.safetensors", "manifest.json", "COMMITTED", "state.json"}) {
    SCOPED_TRACE(name);
    std::filesystem::remove_all(root());
    ck::Store store(root());
    store.save(make_request(2, 100));
    const auto dir4 = store.save(make_request(4, 100)).dir;
    std::filesystem::remove(dir4 + "/" + name);
    ASSERT_EQ(::mkfifo((dir4 + "/" + name).c_str(), 0644), 0);

    auto v = anchor::test::in_child([&] { return joined(store.verify(dir4).problems); }, 10);
    ASSERT_FALSE(v.timed_out) << "verify blocked on a FIFO " << name;
    EXPECT_NE(v.text.find(std::string(name) + ": cannot be read: read " + dir4 + "/" + name +
                          ": is a FIFO (named pipe), not a regular file"),
              std::string::npos)
        << v.text;
    auto l = anchor::test::in_child(
        [&] {
          std::string rows;
          for (const auto& r : store.list()) rows += std::to_string(r.step) + " " + r.state + "\n";
          return rows;
        },
        10);
    ASSERT_FALSE(l.timed_out) << "list blocked on a FIFO " << name;
    EXPECT_EQ(l.text, "4 invalid\n2 committed\n");
    auto r = anchor::test::in_child([&] { return std::to_string(store.restore_newest()->step); }, 10);
    ASSERT_FALSE(r.timed_out) << "restore blocked on a FIFO " << name;
    EXPECT_EQ(r.text, "2");
  }
}

// An entry that cannot even be examined is not "the save did not finish":
// a COMMITTED that is a symbolic link loop (ELOOP, also as root) is named
// with its errno, and the directory is invalid, not uncommitted.
TEST_F(StoreHardeningTest, UnexaminableCommittedSaysWhatHappened) {
  ck::Store store(root());
  store.save(make_request(2, 100));
  const auto dir4 = store.save(make_request(4, 100)).dir;
  std::filesystem::remove(dir4 + "/COMMITTED");
  std::filesystem::create_symlink("COMMITTED", dir4 + "/COMMITTED");  // points at itself
  auto v = store.verify(dir4);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.state, "invalid");
  EXPECT_NE(joined(v.problems).find("ELOOP"), std::string::npos) << joined(v.problems);
  EXPECT_EQ(joined(v.problems).find("save did not finish"), std::string::npos) << joined(v.problems);
  EXPECT_EQ(store.restore_newest()->step, 2);
}

// A step directory this user cannot read (chmod 000; as root, checked in a
// child that has become `nobody`, since root reads it anyway) is listed as
// unreadable with EACCES, not as a save that did not finish.
TEST_F(StoreHardeningTest, UnreadableDirectoryIsListedAsUnreadable) {
  ck::Store store(root());
  store.save(make_request(2, 100));
  const auto dir4 = store.save(make_request(4, 100)).dir;
  ASSERT_EQ(::chmod(dir4.c_str(), 0), 0);
  auto r = anchor::test::in_child(
      [&] {
        if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return std::string("setuid failed");
        std::string rows;
        for (const auto& v : store.list()) rows += std::to_string(v.step) + " " + v.state + ": " + joined(v.problems);
        return rows;
      },
      10);
  ::chmod(dir4.c_str(), 0755);
  ASSERT_FALSE(r.timed_out);
  ASSERT_NE(r.text, "setuid failed");
  EXPECT_NE(r.text.find("4 unreadable: cannot list " + dir4 + ": Permission denied (EACCES)"), std::string::npos)
      << r.text;
  EXPECT_EQ(r.text.find("save did not finish"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("2 committed"), std::string::npos) << r.text;
}

// A mistyped ANCHOR_FAULT point never fires, so a fault test would pass
// without its fault: refused at the start of the save, listing the points.
TEST_F(StoreHardeningTest, UnknownFaultPointIsAUsageError) {
  ck::Store store(root());
  for (const char* value : {"after_manifst:exit", "after_file:nope.safetensors@2:sigkill", "after_remote_files:exit"}) {
    SCOPED_TRACE(value);
    ::setenv("ANCHOR_FAULT", value, 1);
    try {
      store.save(make_request(2, 10));
      ADD_FAILURE() << "saved with ANCHOR_FAULT=" << value;
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kUsage);
      EXPECT_NE(std::string(e.what()).find("unknown point"), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("after_file:model.safetensors, after_file:optimizer.safetensors, after_file:state.json"),
                std::string::npos)
          << e.hint();
    }
    EXPECT_FALSE(std::filesystem::exists(root() + "/step-00000002"));
  }
  // Negative control: a known point for another step saves normally.
  ::setenv("ANCHOR_FAULT", "after_file:optimizer.safetensors@9:exit", 1);
  EXPECT_NO_THROW(store.save(make_request(2, 10)));
  ::unsetenv("ANCHOR_FAULT");
}

}  // namespace
