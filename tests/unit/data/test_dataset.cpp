#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "anchor/common/fs.hpp"
#include "anchor/common/process.hpp"
#include "anchor/data/dataset.hpp"
#include "anchor/error.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace anchor::data;
namespace fsys = std::filesystem;

class DataTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write_raw(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  static std::string header(std::int32_t magic, std::int32_t version, std::int32_t count) {
    std::int32_t h[256] = {};
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    return std::string(reinterpret_cast<const char*>(h), sizeof h);
  }
  void expect_shard_error(const std::string& file, const std::string& fragment, int vocab = 50257) {
    try {
      Shard::open(path(file), Format::kLlmc, vocab);
      FAIL() << "expected an error for " << file;
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(path(file)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  anchor::testing::TempDir tmp_{"data"};
  const std::filesystem::path& dir_ = tmp_.path();
};

TEST_F(DataTest, LlmcShardRoundTrip) {
  std::vector<std::uint16_t> tokens = {1, 2, 3, 50256, 7};
  write_llmc_shard(path("a.bin"), tokens);
  auto s = Shard::open(path("a.bin"), Format::kLlmc, 50257);
  ASSERT_EQ(s->size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ((*s)[i], tokens[i]);
}

TEST_F(DataTest, MalformedShardsNameTheFile) {
  write_raw("magic.bin", header(12345, 1, 0));
  expect_shard_error("magic.bin", "bad magic 12345");
  write_raw("short.bin", std::string(100, '\0'));
  expect_shard_error("short.bin", "short file");
  write_raw("count.bin", header(kLlmcMagic, 1, 10) + std::string(4, '\0'));
  expect_shard_error("count.bin", "token count beyond the file");
  write_raw("version.bin", header(kLlmcMagic, 7, 0));
  expect_shard_error("version.bin", "unsupported version 7");
  write_llmc_shard(path("vocab.bin"), {1, 2, 300});
  expect_shard_error("vocab.bin", "token 300 at index 2 is >= model.vocab_size 256", 256);
}

TEST_F(DataTest, TextIsBytes) {
  write_raw("t.txt", std::string("ab\xff", 3));
  auto s = Shard::open(path("t.txt"), Format::kText, 256);
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0], 'a');
  EXPECT_EQ((*s)[2], 255);
  std::vector<std::uint16_t> out(3);
  s->copy(0, 3, out.data());
  EXPECT_EQ(out, (std::vector<std::uint16_t>{'a', 'b', 255}));  // widened, never sign-extended
  write_raw("empty.txt", "");
  EXPECT_EQ(Shard::open(path("empty.txt"), Format::kText, 256)->size(), 0u);
}

TEST_F(DataTest, WindowsAreNonOverlappingWithShiftedTargets) {
  std::vector<std::uint16_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[static_cast<size_t>(i)] = static_cast<std::uint16_t>(i);
  write_llmc_shard(path("a.bin"), tokens);
  WindowSet w({Shard::open(path("a.bin"), Format::kLlmc, 256)}, 8);
  EXPECT_EQ(w.size(), 12u);  // offsets 0, 8, ..., 88 (88 + 9 <= 100)
  std::vector<std::uint16_t> buf(9);
  w.copy_window(3, buf.data());
  EXPECT_EQ(buf.front(), 24);
  EXPECT_EQ(buf.back(), 32);
}

// Windows are found from per-shard counts: the same windows, in the same
// order, as listing every offset of every shard (shards too short for one
// window, or empty, included), and a slice is a range of them.
TEST_F(DataTest, WindowsAcrossShardsMatchListingEveryOffset) {
  // 16 and 17 (a multiple of seq_len, and one more) at both ends: n / seq_len would count one window too many.
  const std::vector<std::size_t> sizes = {16, 100, 3, 0, 9, 10, 57, 17};
  std::vector<std::shared_ptr<const Shard>> shards;
  std::vector<std::vector<std::uint16_t>> expected;  // every window, in file order
  const std::size_t seq = 8;
  for (std::size_t f = 0; f < sizes.size(); ++f) {
    std::string bytes(sizes[f], '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((f * 40 + i) % 251);
    write_raw("s" + std::to_string(f) + ".txt", bytes);
    shards.push_back(Shard::open(path("s" + std::to_string(f) + ".txt"), Format::kText, 256));
    for (std::size_t off = 0; off + seq + 1 <= bytes.size(); off += seq)
      expected.emplace_back(reinterpret_cast<const unsigned char*>(bytes.data()) + off,
                            reinterpret_cast<const unsigned char*>(bytes.data()) + off + seq + 1);
  }
  WindowSet w(shards, static_cast<int>(seq));
  ASSERT_EQ(w.size(), expected.size());
  ASSERT_EQ(w.size(), 1u + 12 + 0 + 0 + 1 + 1 + 7 + 2);
  std::vector<std::uint16_t> buf(seq + 1);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w.copy_window(i, buf.data());
    EXPECT_EQ(buf, expected[i]) << "window " << i;
  }
  const WindowSet tail = w.slice(11, 14).slice(1, 3);  // windows 12 and 13
  EXPECT_THROW(w.slice(3, 2), std::out_of_range);
  EXPECT_THROW(w.slice(0, w.size() + 1), std::out_of_range);
  ASSERT_EQ(tail.size(), 2u);
  tail.copy_window(1, buf.data());
  EXPECT_EQ(buf, expected[13]);
  EXPECT_THROW(tail.copy_window(2, buf.data()), std::out_of_range);
  // Control: a neighbouring window is different data.
  w.copy_window(12, buf.data());
  EXPECT_NE(buf, expected[13]);
}

// What the header promises: a shard cut short while mapped ends the process
// with SIGBUS (not a wrong window), and that exit is named for what it likely was.
TEST_F(DataTest, AShardCutShortWhileMappedEndsTheProcessWithSigbus) {
  write_raw("cut.txt", std::string(1 << 16, 'x'));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    WindowSet w({Shard::open(path("cut.txt"), Format::kText, 256)}, 64);
    if (::truncate(path("cut.txt").c_str(), 0) != 0) ::_exit(10);
    std::vector<std::uint16_t> buf(65);
    w.copy_window(w.size() - 1, buf.data());
    ::_exit(buf[0] == 'x' ? 11 : 12);  // not reached: the page is gone
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGBUS);
  EXPECT_NE(anchor::proc::describe_exit(128 + SIGBUS).find("data shard"), std::string::npos);
}

TEST(Sampler, IsAPureFunctionAndAPermutationPerEpoch) {
  Sampler a(42, 50), b(42, 50), other(43, 50);
  std::set<size_t> seen;
  bool differs = false;
  for (std::uint64_t g = 0; g < 50; ++g) {
    seen.insert(a.window(g));
    differs |= a.window(g) != other.window(g);
  }
  EXPECT_EQ(seen.size(), 50u) << "epoch 0 must visit every window once";
  EXPECT_TRUE(differs) << "another seed must give another order (negative control)";
  // Query b out of order (as a resumed run does): same answers.
  for (std::uint64_t g : {120ull, 3ull, 77ull, 49ull, 50ull}) EXPECT_EQ(a.window(g), b.window(g)) << g;
  // Epoch 1 is a different permutation of the same windows.
  bool epoch_differs = false;
  for (std::uint64_t g = 0; g < 50; ++g) epoch_differs |= a.window(g) != a.window(g + 50);
  EXPECT_TRUE(epoch_differs);
}

TEST(Sampler, GlobalBatchIsTheSameWindowsWhateverTheWorldSize) {
  // One rank with accum 4 vs two ranks with accum 2 vs four ranks with accum 1.
  auto global_set = [](int world, int accum) {
    std::multiset<std::uint64_t> s;
    for (int r = 0; r < world; ++r)
      for (int m = 0; m < accum; ++m)
        for (int b = 0; b < 2; ++b) s.insert(global_sample_index(5, m, r, b, 2, accum, world));
    return s;
  };
  EXPECT_EQ(global_set(1, 4), global_set(2, 2));
  EXPECT_EQ(global_set(1, 4), global_set(4, 1));
  EXPECT_NE(global_set(1, 4), [] {
    std::multiset<std::uint64_t> s;
    for (int b = 0; b < 8; ++b) s.insert(global_sample_index(6, 0, 0, b, 8, 1, 1));
    return s;
  }()) << "another step must use other samples";
}

TEST_F(DataTest, ValidationSplitAndErrors) {
  std::vector<std::uint16_t> tokens(1000, 1);
  write_llmc_shard(path("a.bin"), tokens);
  DataSpec spec;
  spec.format = Format::kLlmc;
  spec.train_files = {path("a.bin")};
  spec.seq_len = 9;  // 111 windows: offsets 0, 9, ..., 990
  spec.val_fraction = 0.1;
  Dataset d(spec);
  EXPECT_EQ(d.train().size() + d.val().size(), 111u);
  EXPECT_EQ(d.val().size(), 11u);
  spec.val_fraction = 0.0;
  EXPECT_THROW(Dataset{spec}, anchor::Error);
}

}  // namespace
