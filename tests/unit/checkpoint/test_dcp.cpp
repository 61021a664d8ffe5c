// A torch.distributed.checkpoint directory checked without torch, its
// `.metadata` read as data (checkpoint/pickle.hpp, checkpoint/dcp.hpp). The
// fixture, tests/unit/checkpoint/dcp/, is a real DCP save written by the
// locked torch 2.x (tests/support/make_dcp_fixture.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "anchor/checkpoint/dcp.hpp"
#include "anchor/common/fs.hpp"
#include "checkpoint/pickle.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace std::string_literals;
namespace ck = anchor::checkpoint;
namespace pk = anchor::checkpoint::pickle;
namespace stdfs = std::filesystem;
using Kind = pk::Value::Kind;

const std::string kFixture = std::string(ANCHOR_SOURCE_DIR) + "/tests/unit/checkpoint/dcp";

std::string metadata() { return anchor::fs::read_file(kFixture + "/.metadata"); }

// A copy of the fixture to break.
std::string copy_fixture(const anchor::testing::TempDir& tmp) {
  std::string dir = tmp.str("step_3");
  stdfs::copy(kFixture, dir);
  return dir;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

bool has_problem(const ck::DcpVerification& v, const std::string& part) {
  for (const auto& p : v.problems)
    if (p.find(part) != std::string::npos) return true;
  return false;
}

TEST(Pickle, ReadsScalarsContainersAndTheMemo) {
  // pickle.dumps({'a': t, 'b': [None, True, 'x', b'y'], 'c': t, 'd': -32768, 'e': 1.5, 'f': 2**40}, protocol=4)
  // with t = (1, -2, 300, 70000): 'c' is a memo reference to 'a''s tuple.
  const std::string p =
      "\x80\x04\x95\x55\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x28\x4b\x01\x4a\xfe\xff\xff"
      "\xff\x4d\x2c\x01\x4a\x70\x11\x01\x00\x74\x94\x8c\x01\x62\x94\x5d\x94\x28\x4e\x88\x8c\x01\x78\x94\x43"
      "\x01\x79\x94\x65\x8c\x01\x63\x94\x68\x02\x8c\x01\x64\x94\x4a\x00\x80\xff\xff\x8c\x01\x65\x94\x47\x3f"
      "\xf8\x00\x00\x00\x00\x00\x00\x8c\x01\x66\x94\x8a\x06\x00\x00\x00\x00\x00\x01\x75\x2e"s;
  const auto root = pk::load(p);
  ASSERT_TRUE(root->is(Kind::kDict));
  const auto a = root->field("a");
  ASSERT_TRUE(a && a->is(Kind::kTuple));
  ASSERT_EQ(a->items.size(), 4u);
  EXPECT_EQ(a->items[1]->i, -2);
  EXPECT_EQ(a->items[2]->i, 300);
  EXPECT_EQ(a->items[3]->i, 70000);
  const auto b = root->field("b");
  ASSERT_TRUE(b && b->is(Kind::kList));
  ASSERT_EQ(b->items.size(), 4u);
  EXPECT_TRUE(b->items[0]->is(Kind::kNone));
  EXPECT_EQ(b->items[1]->i, 1);
  EXPECT_EQ(b->items[2]->s, "x");
  EXPECT_TRUE(b->items[3]->is(Kind::kBytes));
  EXPECT_EQ(root->field("c"), a);  // the memo shares the value, as Python's does
  EXPECT_EQ(root->field("d")->i, -32768);
  EXPECT_DOUBLE_EQ(root->field("e")->f, 1.5);
  EXPECT_EQ(root->field("f")->i, std::int64_t(1) << 40);  // LONG1
}

TEST(Pickle, ASelfHoldingListIsReadNotWalked) {
  // ']' then DUP and APPEND: a list that holds itself, as Python's memo allows; read, not looped over.
  const auto root = pk::load("\x80\x04]2a."s);
  ASSERT_TRUE(root->is(Kind::kList));
  ASSERT_EQ(root->items.size(), 1u);
  EXPECT_EQ(root->items[0].get(), root.get());
  root->items.clear();  // the cycle, broken so the test leaks nothing
}

TEST(Pickle, AClassIsANameNeverCalled) {
  // os.system('true') as a pickle's REDUCE: read as an object of the global os.system, nothing run.
  const std::string p = "\x80\x02\x63\x6f\x73\x0a\x73\x79\x73\x74\x65\x6d\x0a\x8c\x04\x74\x72\x75\x65\x85\x52\x2e"s;
  const auto root = pk::load(p);
  EXPECT_TRUE(root->instance_of("os", "system"));
  ASSERT_EQ(root->items.size(), 1u);
  EXPECT_EQ(root->items[0]->s, "true");
}

TEST(Pickle, RefusesWhatItCannotReadAsData) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\x80\x04\x4e"s, "ends without STOP"},
      {"\x80\x04\x4e\x2e\x4e"s, "bytes after STOP"},
      {"\x80\x04\x4e\x4e\x2e"s, "values left"},
      {"\x80\x04\x50\x31\x0a\x2e"s, "opcode 0x50"},
      {"\x80\x04\x82\x01\x2e"s, "opcode 0x82"},
      {"\x80\x04\x97\x2e"s, "opcode 0x97"},
      {"\x80\x04\x8c\xff\x61\x62\x63\x2e"s, "runs past the end"},
      {"\x80\x04\x68\x05\x2e"s, "memo entry 5 was never stored"},
      {"\x80\x04\x4e\x8a\x09\x01\x02\x03\x04\x05\x06\x07\x08\x09\x2e"s, "wider than 64 bits"},
      {"\x80\x04\x4e\x61\x2e"s, "takes a value the stack does not hold"},
      {"\x80\x04\x4e\x74\x2e"s, "needs a MARK"},
      {"\x80\x04\x4b\x01\x4b\x02\x62\x2e"s, "BUILD on a value that is no object"},
      {"\x80\x04\x7d\x4b\x01\x75\x2e"s, "needs a MARK"},
      {"\x80\x04\x7d\x28\x4b\x01\x75\x2e"s, "odd number"},
  };
  for (const auto& [p, why] : cases) {
    try {
      pk::load(p);
      ADD_FAILURE() << "read: " << why;
    } catch (const pk::Invalid& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(Pickle, AValueBudgetBoundsWhatASmallFileCanClaim) {
  // A list, then 1000 times BININT1 1 and APPEND: 1001 values; the budget stops the reader short of them.
  std::string p = "\x80\x04]"s;
  for (int i = 0; i < 1000; ++i)
    p += "K\x01"
         "a"s;
  p += ".";
  EXPECT_NO_THROW(pk::load(p, 2000));
  EXPECT_THROW(pk::load(p, 500), pk::Invalid);
}

TEST(Pickle, EveryMutationOfARealMetadataIsReadOrRefused) {
  // Flipped, dropped and repeated bytes of the fixture's .metadata: each is read or refused with
  // Invalid; nothing else escapes (ASan/UBSan builds turn a stray read into a failure).
  const std::string good = metadata();
  std::mt19937 rng(7);
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string m = good;
    const auto at = rng() % m.size();
    switch (i % 3) {
      case 0: m[at] = static_cast<char>(rng()); break;
      case 1: m.erase(at, 1 + rng() % 8); break;
      default: m.insert(at, m.substr(at, 1 + rng() % 8)); break;
    }
    try {
      pk::load(m, 100000);
    } catch (const pk::Invalid&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 10000);  // most mutations break the pickle; the test can see that they do
}

TEST(Dcp, TheFixtureHoldsTogether) {
  const auto v = ck::verify_dcp(kFixture);
  EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems.front());
  EXPECT_EQ(v.entries, 6u);  // model.w, model.b, step, extra.lr, extra.name, extra.seen
  EXPECT_EQ(v.items, 6u);
  ASSERT_EQ(v.files.size(), 1u);
  EXPECT_EQ(v.files[0].name, "__0_0.distcp");
  EXPECT_EQ(v.files[0].extent, v.files[0].bytes);
  EXPECT_TRUE(ck::is_dcp_dir(kFixture));
  EXPECT_EQ(v.summary().rfind("1 shard file, 6 entries in 6 items, ", 0), 0u) << v.summary();
}

TEST(Dcp, EachWayASaveBreaksIsNamed) {
  anchor::testing::TempDir tmp("dcp");
  const std::string dir = copy_fixture(tmp);
  const std::string shard = dir + "/__0_0.distcp";
  const auto size = stdfs::file_size(shard);

  stdfs::resize_file(shard, size - 1);  // cut short
  auto v = ck::verify_dcp(dir);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(has_problem(v, "__0_0.distcp holds " + std::to_string(size - 1) + " bytes, but '")) << v.problems[0];
  EXPECT_TRUE(has_problem(v, "the file was cut short"));

  stdfs::remove(shard);  // missing
  v = ck::verify_dcp(dir);
  EXPECT_TRUE(has_problem(v, "__0_0.distcp is missing: .metadata places 6 items in it")) << v.problems[0];

  stdfs::create_symlink("/dev/zero", shard);  // not a regular file: not followed
  v = ck::verify_dcp(dir);
  EXPECT_TRUE(has_problem(v, "is a symbolic link")) << v.problems[0];

  stdfs::remove(shard);
  stdfs::copy_file(kFixture + "/__0_0.distcp", shard);
  stdfs::remove(dir + "/.metadata");  // a save killed before DCP wrote its last file
  EXPECT_TRUE(ck::is_dcp_dir(dir));   // recognised by its shard
  v = ck::verify_dcp(dir);
  EXPECT_TRUE(has_problem(v, ".metadata is missing: DCP writes it last, so the save did not finish"));

  write(dir + "/.metadata", metadata().substr(0, 200));  // torn
  v = ck::verify_dcp(dir);
  EXPECT_TRUE(has_problem(v, ".metadata is not a pickle anchor can read at byte")) << v.problems[0];

  write(dir + "/.metadata", "\x80\x04}\x94.");  // a pickle, not DCP's Metadata
  v = ck::verify_dcp(dir);
  EXPECT_TRUE(has_problem(v, "does not hold a torch.distributed.checkpoint Metadata object"));
}

TEST(Dcp, AShardPathThatLeavesTheDirectoryIsRefused) {
  anchor::testing::TempDir tmp("dcp");
  const std::string dir = copy_fixture(tmp);
  std::string m = metadata();
  // Same length, so every other byte of the pickle stays valid: "__0_0.distcp" -> "../0_.distcp".
  const auto at = m.find("__0_0.distcp");
  ASSERT_NE(at, std::string::npos);
  m.replace(at, 12, "../0_.distcp");
  write(dir + "/.metadata", m);
  const auto v = ck::verify_dcp(dir);
  EXPECT_FALSE(v.ok);
  EXPECT_TRUE(has_problem(v, "stored in ../0_.distcp, a path outside the checkpoint directory")) << v.problems[0];
}

TEST(Dcp, AnAnchorStepDirIsNotDcp) {
  anchor::testing::TempDir tmp("dcp");
  const std::string dir = copy_fixture(tmp);
  write(dir + "/manifest.json", "{}");
  EXPECT_FALSE(ck::is_dcp_dir(dir));
  EXPECT_FALSE(ck::is_dcp_dir(tmp.str()));
}

}  // namespace
