#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "anchor/checkpoint/safetensors.hpp"
#include "anchor/common/fs.hpp"
#include "anchor/common/sha256.hpp"
#include "anchor/error.hpp"

namespace {

namespace ck = anchor::checkpoint;
using ck::DType;
using ck::SafetensorsFile;

// A file from a raw header text and data bytes (no padding unless given).
std::string raw(const std::string& header, const std::string& data = {}, std::uint64_t len_override = ~0ull) {
  std::string out(8, '\0');
  std::uint64_t n = len_override == ~0ull ? header.size() : len_override;
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Parses and returns the exact error message ("" when it parses).
std::string reject(const std::string& bytes) {
  try {
    SafetensorsFile::parse(bytes, "t.safetensors");
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kVerification);
    return e.what();
  }
  return "";
}

TEST(DType, NamesSizesRoundTrip) {
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16,
                  DType::I8, DType::U8, DType::BOOL}) {
    auto back = ck::dtype_from_name(ck::dtype_name(d));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(ck::dtype_size(DType::F64), 8u);
  EXPECT_EQ(ck::dtype_size(DType::BF16), 2u);
  EXPECT_EQ(ck::dtype_size(DType::BOOL), 1u);
  EXPECT_FALSE(ck::dtype_from_name("F8").has_value());
  EXPECT_FALSE(ck::dtype_from_name("f32").has_value());
}

class SafetensorsIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("anchor-st-" + std::to_string(::getpid()) + "-" + anchor::fs::random_suffix());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsIo, RoundTripSortedContiguousPadded) {
  std::vector<float> a(6);
  std::iota(a.begin(), a.end(), 1.5f);
  std::vector<std::int64_t> b = {-1, 7, 1ll << 40};
  std::uint8_t flag = 1;
  std::vector<ck::TensorRef> ts = {
      {"zeta", DType::F32, {2, 3}, a.data(), a.size() * 4},
      {"alpha", DType::I64, {3}, b.data(), b.size() * 8},
      {"empty", DType::F16, {0, 4}, nullptr, 0},
      {"scalar", DType::BOOL, {}, &flag, 1},
  };
  auto path = (dir_ / "x.safetensors").string();
  auto d = ck::write_safetensors(anchor::fs::real_fs(), path, ts, {{"format", "pt"}, {"k", "v"}});
  EXPECT_EQ(d.sha256, anchor::sha256_file(path).sha256);
  EXPECT_EQ(d.size, std::filesystem::file_size(path));
  EXPECT_EQ(ck::serialize_safetensors(ts, {{"format", "pt"}, {"k", "v"}}), anchor::fs::read_file(path));

  anchor::FileDigest rd;
  auto f = SafetensorsFile::open(path, &rd);
  EXPECT_EQ(rd.sha256, d.sha256);
  EXPECT_EQ(f.header_size() % 8, 0u);
  ASSERT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.entries()[0].name, "alpha");  // sorted by name
  EXPECT_EQ(f.entries()[0].begin, 0u);      // contiguous in name order
  EXPECT_EQ(f.entries()[1].name, "empty");
  EXPECT_EQ(f.entries()[1].begin, 24u);
  EXPECT_EQ(f.entries()[2].name, "scalar");
  EXPECT_EQ(f.entries()[3].name, "zeta");
  EXPECT_EQ(f.entries()[3].begin, 25u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto* z = f.find("zeta");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(f.data(*z), a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.data(*f.find("alpha")), b.data(), 24), 0);
  EXPECT_EQ(f.find("nope"), nullptr);
  // Data of the first tensor starts 8-aligned in the file.
  EXPECT_EQ((8 + f.header_size()) % 8, 0u);
  // Negative control: a different value gives different bytes.
  a[0] = 0;
  EXPECT_NE(ck::serialize_safetensors(ts, {{"format", "pt"}, {"k", "v"}}), anchor::fs::read_file(path));
}

TEST_F(SafetensorsIo, WriterRefusesExistingFileAndBadRequests) {
  float x = 1;
  auto path = (dir_ / "y.safetensors").string();
  ck::write_safetensors(anchor::fs::real_fs(), path, {{"x", DType::F32, {1}, &x, 4}});
  EXPECT_THROW(ck::write_safetensors(anchor::fs::real_fs(), path, {{"x", DType::F32, {1}, &x, 4}}),
               anchor::Error);  // O_EXCL
  auto p2 = (dir_ / "z.safetensors").string();
  auto msg = [&](std::vector<ck::TensorRef> t) {
    try {
      ck::write_safetensors(anchor::fs::real_fs(), p2, t);
    } catch (const anchor::Error& e) {
      EXPECT_EQ(e.kind(), anchor::ErrorKind::kUsage);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(msg({{"x", DType::F32, {2}, &x, 4}}),
            "safetensors write: tensor 'x' F32 [2] needs 8 bytes, got 4");
  EXPECT_EQ(msg({{"x", DType::F32, {1}, &x, 4}, {"x", DType::F32, {1}, &x, 4}}),
            "safetensors write: duplicate tensor name 'x'");
  EXPECT_EQ(msg({{"__metadata__", DType::F32, {1}, &x, 4}}),
            "safetensors write: '__metadata__' is reserved, not a tensor name");
  EXPECT_EQ(msg({{"x", DType::F32, {-1}, &x, 4}}), "safetensors write: tensor 'x' has an invalid shape [-1]");
  EXPECT_FALSE(std::filesystem::exists(p2));  // nothing touched the disk
}

TEST_F(SafetensorsIo, WriteFailureUnlinksPartialFile) {
  std::vector<char> big(3 << 20, 'x');
  anchor::fs::FaultInjectingFs faulty;
  faulty.fail_on(anchor::fs::Op::kWrite, 2, ENOSPC);
  auto path = (dir_ / "w.safetensors").string();
  try {
    ck::write_safetensors(faulty, path, {{"b", DType::U8, {(std::int64_t)big.size()}, big.data(), big.size()}});
    FAIL() << "no error";
  } catch (const anchor::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ENOSPC"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(SafetensorsIo, OpenMissingFileIsIoError) {
  try {
    SafetensorsFile::open((dir_ / "nope.safetensors").string());
    FAIL();
  } catch (const anchor::Error& e) {
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("nope.safetensors"), std::string::npos);
  }
}

// --- every validation rule, with its exact message -------------------------

const std::string kT = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST(SafetensorsStrict, ValidMinimalFileParses) {
  EXPECT_EQ(reject(raw("{" + kT + "}", std::string(8, 'a'))), "");
  // Negative control for the helper: an empty header parses as no tensors.
  EXPECT_EQ(reject(raw("{}")), "");
  // Unpadded and space-padded headers are both accepted on read.
  EXPECT_EQ(reject(raw("{" + kT + "}   ", std::string(8, 'a'))), "");
}

TEST(SafetensorsStrict, TruncatedHeaderLength) {
  EXPECT_EQ(reject(std::string(5, '\0')),
            "t.safetensors: truncated header length: file is 5 bytes, shorter than the 8-byte header length");
  EXPECT_EQ(reject(""),
            "t.safetensors: truncated header length: file is 0 bytes, shorter than the 8-byte header length");
}

TEST(SafetensorsStrict, HeaderLengthPastEndOfFile) {
  EXPECT_EQ(reject(raw("{}", "", 100)),
            "t.safetensors: header length past end of file: header length 100 needs 108 bytes but the file is 10 bytes");
}

TEST(SafetensorsStrict, OversizedHeader) {
  EXPECT_EQ(reject(raw("{}", "", (100ull << 20) + 1)),
            "t.safetensors: header too large: header length 104857601 exceeds the limit of 104857600 bytes");
  EXPECT_EQ(reject(raw("{}", "", ~0ull - 1)),
            "t.safetensors: header too large: header length 18446744073709551614 exceeds the limit of 104857600 bytes");
}

TEST(SafetensorsStrict, NotJsonNotObject) {
  std::string m = reject(raw("{\"t\":"));
  EXPECT_EQ(m.rfind("t.safetensors: header is not valid JSON: ", 0), 0u) << m;
  EXPECT_EQ(reject(raw("[1,2]")), "t.safetensors: header is not a JSON object: found a JSON array");
  m = reject(raw("{}\xff"));
  EXPECT_EQ(m.rfind("t.safetensors: header is not valid JSON: ", 0), 0u) << m;
}

TEST(SafetensorsStrict, DuplicateKeys) {
  EXPECT_EQ(reject(raw("{" + kT + "," + kT + "}", std::string(8, 'a'))),
            "t.safetensors: duplicate key: 't' appears twice at the top level");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: duplicate key: 'dtype' appears twice inside 't'");
  EXPECT_EQ(reject(raw(R"({"__metadata__":{"a":"1","a":"2"}})")),
            "t.safetensors: duplicate key: 'a' appears twice inside '__metadata__'");
}

TEST(SafetensorsStrict, MetadataMustBeStrings) {
  EXPECT_EQ(reject(raw(R"({"__metadata__":{"a":1}})")),
            "t.safetensors: __metadata__ is not an object of strings: value of 'a' is a JSON number, expected a string");
  EXPECT_EQ(reject(raw(R"({"__metadata__":["a"]})")),
            "t.safetensors: __metadata__ is not an object of strings: found a JSON array");
  EXPECT_EQ(reject(raw(R"({"__metadata__":{"a":null}})")),
            "t.safetensors: __metadata__ is not an object of strings: value of 'a' is a JSON null, expected a string");
}

TEST(SafetensorsStrict, UnknownDtype) {
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", "ab")),
            "t.safetensors: unknown dtype: tensor 't' has dtype 'F8' (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":4,"shape":[2],"data_offsets":[0,2]}})", "ab")),
            "t.safetensors: unknown dtype: tensor 't' dtype is a JSON number");
}

TEST(SafetensorsStrict, BadEntries) {
  EXPECT_EQ(reject(raw(R"({"t":[1]})")),
            "t.safetensors: bad tensor entry: tensor 't' is a JSON array, expected an object");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[2]}})")),
            "t.safetensors: bad tensor entry: tensor 't' has no 'data_offsets'");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", std::string(8, 'a'))),
            "t.safetensors: bad tensor entry: tensor 't' has unknown field 'x' (expected dtype, shape, data_offsets)");
}

TEST(SafetensorsStrict, ShapeMustBeNonNegativeInts) {
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: bad shape: tensor 't' shape [-2] is not a list of non-negative integers");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: bad shape: tensor 't' shape [2.0] is not a list of non-negative integers");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: bad shape: tensor 't' shape is a JSON string");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: shape/byte-length mismatch: tensor 't' shape [4294967296, 4294967296] overflows");
}

TEST(SafetensorsStrict, DataOffsetsForm) {
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})")),
            "t.safetensors: bad data_offsets: tensor 't' data_offsets [0] is not [begin, end] of non-negative integers");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})")),
            "t.safetensors: bad data_offsets: tensor 't' data_offsets [-1,7] is not [begin, end] of non-negative integers");
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})")),
            "t.safetensors: bad data_offsets: tensor 't' begin 8 > end 0");
}

TEST(SafetensorsStrict, ShapeByteLengthMismatch) {
  EXPECT_EQ(reject(raw(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'a'))),
            "t.safetensors: shape/byte-length mismatch: tensor 't' F32 [3] needs 12 bytes, data_offsets [0, 8] hold 8");
}

TEST(SafetensorsStrict, OverlapGapAndLength) {
  const std::string a = R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  EXPECT_EQ(reject(raw("{" + a + R"(,"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", "123456")),
            "t.safetensors: overlapping data_offsets: tensor 'b' begins at 2 but tensor 'a' ends at 4");
  EXPECT_EQ(reject(raw("{" + a + R"(,"b":{"dtype":"U8","shape":[4],"data_offsets":[5,9]}})", "123456789")),
            "t.safetensors: gap in data_offsets: tensor 'b' begins at 5, expected 4 (end of tensor 'a')");
  EXPECT_EQ(reject(raw(R"({"b":{"dtype":"U8","shape":[4],"data_offsets":[1,5]}})", "12345")),
            "t.safetensors: gap in data_offsets: tensor 'b' begins at 1, expected 0 (start of data)");
  // Trailing bytes after the last tensor, and a file cut short inside the data.
  EXPECT_EQ(reject(raw("{" + a + "}", "12345")),
            "t.safetensors: file length mismatch: expected 8 + 53 header + 4 data = 65 bytes, file is 66 bytes");
  EXPECT_EQ(reject(raw("{" + a + "}", "123")),
            "t.safetensors: file length mismatch: expected 8 + 53 header + 4 data = 65 bytes, file is 64 bytes");
  // Two zero-length tensors at one offset are fine.
  EXPECT_EQ(reject(raw(R"({"x":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"y":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})")), "");
}

TEST(SafetensorsStrict, EveryTruncationOfAValidFileIsRejected) {
  float v[3] = {1, 2, 3};
  std::string good = ck::serialize_safetensors({{"v", DType::F32, {3}, v, 12}}, {{"a", "b"}});
  ASSERT_EQ(reject(good), "");
  for (std::size_t n = 0; n < good.size(); ++n)
    EXPECT_NE(reject(good.substr(0, n)), "") << "truncated to " << n;
  EXPECT_NE(reject(good + "x"), "");
}

}  // namespace
