// threads::pool_wait_env / pool_wait_json (anchor/common/threads.hpp): what a
// built-in worker's thread pools are told about waiting, and that a user's
// own setting stands. Whether a worker really starts with them is
// tests/e2e/test_pilot.cpp's Pilot.PoolWaitIsRecordedAndAUsersChoiceStands.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "anchor/common/threads.hpp"

namespace {

using anchor::threads::pool_wait_env;
using anchor::threads::pool_wait_json;

constexpr const char* kVars[] = {"GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"};

// Unsets the three variables for the test and puts back what was there.
class PoolWaitEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* s = std::getenv(v);
      saved_[v] = s ? std::optional<std::string>(s) : std::nullopt;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(PoolWaitEnv, NothingSetGivesBothPoolsAShortWait) {
  const std::map<std::string, std::string> want = {{"GOMP_SPINCOUNT", "10000"}, {"OPENBLAS_THREAD_TIMEOUT", "4"}};
  EXPECT_EQ(pool_wait_env(), want);
}

TEST_F(PoolWaitEnv, EitherOpenMpVariableLeavesOpenMpAlone) {
  ::setenv("OMP_WAIT_POLICY", "ACTIVE", 1);
  auto env = pool_wait_env();
  EXPECT_EQ(env.count("GOMP_SPINCOUNT"), 0U);
  EXPECT_EQ(env.count("OMP_WAIT_POLICY"), 0U);
  EXPECT_EQ(env.at("OPENBLAS_THREAD_TIMEOUT"), "4");  // the other pool's still set

  ::unsetenv("OMP_WAIT_POLICY");
  ::setenv("GOMP_SPINCOUNT", "300000", 1);
  env = pool_wait_env();
  EXPECT_EQ(env.count("GOMP_SPINCOUNT"), 0U);
  EXPECT_EQ(env.count("OMP_WAIT_POLICY"), 0U);
}

TEST_F(PoolWaitEnv, AUsersOpenBlasTimeoutStands) {
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "28", 1);
  const auto env = pool_wait_env();
  EXPECT_EQ(env.count("OPENBLAS_THREAD_TIMEOUT"), 0U);
  EXPECT_EQ(env.at("GOMP_SPINCOUNT"), "10000");
}

TEST_F(PoolWaitEnv, TheRecordSaysWhatIsSetAndNullForTheRest) {
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "not\xffutf8", 1);  // whatever the environment holds stays valid JSON
  const auto j = pool_wait_json();
  EXPECT_EQ(j.at("GOMP_SPINCOUNT"), "10000");
  EXPECT_TRUE(j.at("OMP_WAIT_POLICY").is_null());
  EXPECT_EQ(j.at("OPENBLAS_THREAD_TIMEOUT"), "not\\xffutf8");
  EXPECT_NO_THROW((void)j.dump());
}

}  // namespace
