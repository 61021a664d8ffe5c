// Python interop: /usr/bin/python3 with only the standard library reads a
// checkpoint the C++ store wrote, and C++ reads a safetensors file Python wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "anchor/checkpoint/store.hpp"
#include "anchor/common/process.hpp"
#include "anchor/error.hpp"
#include "support/checkpoint_fixture.hpp"

namespace {

namespace ck = anchor::checkpoint;
const std::string kPython = "/usr/bin/python3";
const std::string kInterop = std::string(ANCHOR_SOURCE_DIR) + "/tests/interop/";

class Interop : public anchor::test::CheckpointDir {};

TEST_F(Interop, PythonStdlibReadsCppCheckpoint) {
  ck::Store store(root());
  const std::int64_t n = 5000;
  auto dir = store.save(anchor::test::make_request(7, n)).dir;
  nlohmann::json values = nlohmann::json::object();
  for (std::int64_t i : {std::int64_t(0), std::int64_t(1), std::int64_t(996), n - 1})
    values[std::to_string(i)] = anchor::test::tensor_value(7, i);
  auto write_expect = [&](const nlohmann::json& v) {
    nlohmann::json e = {
        {"file", "model.safetensors"}, {"tensor", "w"}, {"dtype", "F32"}, {"shape", {n}}, {"values", v}};
    std::ofstream(dir_ / "expect.json") << e.dump();
  };
  write_expect(values);
  auto r = anchor::proc::run_capture({kPython, kInterop + "read_checkpoint.py", dir, (dir_ / "expect.json").string()});
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "ok step=7 files=3 per_tensor=2 tensors_checked=4\n");

  // Negative controls: a wrong expected value, and a flipped data byte.
  auto wrong = values;
  wrong["1"] = 12345.0;
  write_expect(wrong);
  r = anchor::proc::run_capture({kPython, kInterop + "read_checkpoint.py", dir, (dir_ / "expect.json").string()});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("w[1] = "), std::string::npos) << r.out;
  write_expect(values);
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  r = anchor::proc::run_capture({kPython, kInterop + "read_checkpoint.py", dir, (dir_ / "expect.json").string()});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("model.safetensors: tensor w sha256 differs"), std::string::npos) << r.out;
}

TEST_F(Interop, CppReadsPythonStdlibSafetensors) {
  const std::string path = (dir_ / "py.safetensors").string();
  auto r = anchor::proc::run_capture({kPython, kInterop + "write_safetensors.py", path});
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = ck::SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("writer"), "python-stdlib");
  ASSERT_EQ(f.entries().size(), 4u);
  const auto* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, ck::DType::F32);
  EXPECT_EQ(a->shape, (std::vector<std::int64_t>{2, 3}));
  float av[6];
  std::memcpy(av, f.data(*a), sizeof av);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(av[i], 0.5f * i - 1) << i;
  std::int64_t bv[4];
  std::memcpy(bv, f.data(*f.find("b")), sizeof bv);
  EXPECT_EQ(bv[0], -3);
  EXPECT_EQ(bv[3], std::int64_t(1) << 40);
  const auto* c = f.find("c");
  EXPECT_EQ(f.data(*c)[4], 255);
  EXPECT_EQ(f.find("e")->begin, f.find("e")->end);
  // Negative control: the strict reader rejects the same file with one byte more.
  std::ofstream(path, std::ios::app | std::ios::binary) << 'x';
  EXPECT_THROW(ck::SafetensorsFile::open(path), anchor::Error);
}

}  // namespace
