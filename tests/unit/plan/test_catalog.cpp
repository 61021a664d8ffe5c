// The device catalog: the shipped file and the strict loader's errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "anchor/common/process.hpp"

#include <string>

#include "anchor/plan/catalog.hpp"

namespace {

using namespace anchor::plan;

const std::string kDevice =
    "  - name: X1\n"
    "    platform: cuda\n"
    "    memory_gb: 80\n"
    "    bf16_tflops: 312\n"
    "    memory_bandwidth_tbps: 2.0\n"
    "    interconnect: {name: NVLink, gb_per_s: 600}\n"
    "    price_per_gpu_hour: {term_7_day: 2.0, term_30_day: 1.5}\n";

std::vector<std::string> problems_of(const std::string& yaml) {
  try {
    load_catalog_string(yaml, "cat.yaml");
  } catch (const CatalogError& e) {
    std::vector<std::string> out;
    for (const auto& p : e.problems()) out.push_back(p.format());
    EXPECT_EQ(e.kind(), anchor::ErrorKind::kConfig);
    return out;
  }
  ADD_FAILURE() << "expected CatalogError for:\n" << yaml;
  return {};
}

TEST(Catalog, ShippedCatalogHasTheFourDevicesWithSpecSheetFigures) {
  Catalog c = load_catalog(std::string(ANCHOR_SOURCE_DIR) + "/configs/catalog.yaml");
  ASSERT_EQ(c.devices.size(), 4u);
  const Device* a100 = c.find("A100-80GB");
  const Device* h100 = c.find("H100-80GB-SXM");
  const Device* h200 = c.find("H200-141GB");
  const Device* mi = c.find("MI300X-192GB");
  ASSERT_TRUE(a100 && h100 && h200 && mi);
  EXPECT_EQ(a100->bf16_tflops, 312);
  EXPECT_EQ(a100->memory_bandwidth_tbps, 2.0);
  EXPECT_EQ(a100->interconnect_gbps, 600);
  EXPECT_EQ(h100->bf16_tflops, 989);
  EXPECT_EQ(h100->memory_bandwidth_tbps, 3.35);
  EXPECT_EQ(h200->memory_gb, 141);
  EXPECT_EQ(h200->memory_bandwidth_tbps, 4.8);
  EXPECT_EQ(mi->memory_gb, 192);
  EXPECT_EQ(mi->bf16_tflops, 1307);
  EXPECT_EQ(mi->platform, "rocm");
  EXPECT_EQ(mi->interconnect_gbps, 896);
  // The published all-reduce bus bandwidths (cited in the file), and a network for each.
  EXPECT_EQ(a100->allreduce_busbw_gbps, 200);
  EXPECT_EQ(h100->allreduce_busbw_gbps, 480);
  EXPECT_EQ(h200->allreduce_busbw_gbps, 475);
  EXPECT_EQ(mi->allreduce_busbw_gbps, 0);  // none found: 0.4 x the link
  EXPECT_EQ(a100->network_gbps, 25);
  EXPECT_EQ(h100->network_gbps, 50);
  for (const auto& d : c.devices) {
    EXPECT_GT(d.price_on_demand, d.price_7_day) << d.name;  // the example prices: no commitment costs more per hour
    EXPECT_GT(d.price_7_day, 0) << d.name;
    EXPECT_GT(d.price_30_day, 0) << d.name;
  }
  EXPECT_EQ(c.find("TPU"), nullptr);
}

TEST(Catalog, MinimalCatalogLoads) {
  Catalog c = load_catalog_string("devices:\n" + kDevice, "cat.yaml");
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].memory_bytes(), 80e9);
  EXPECT_EQ(c.devices[0].price_30_day, 1.5);
  EXPECT_EQ(c.devices[0].currency, "USD");
}

TEST(Catalog, UnknownKeyIsReportedWithItsLine) {
  auto p = problems_of("devices:\n" + kDevice + "    memroy_gb: 40\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("cat.yaml:9:5: devices[0].memroy_gb: unknown key 'memroy_gb'", 0), 0u) << p[0];
  auto top = problems_of("devcies: []\ndevices:\n" + kDevice);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].rfind("cat.yaml:1:1: devcies: unknown key", 0), 0u) << top[0];
}

TEST(Catalog, MissingFieldIsNamed) {
  std::string y = "devices:\n" + kDevice;
  y.erase(y.find("    bf16_tflops: 312\n"), std::string("    bf16_tflops: 312\n").size());
  auto p = problems_of(y);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("devices[0].bf16_tflops: missing"), std::string::npos) << p[0];
}

TEST(Catalog, BadNumbersAreRejectedWithTheirLine) {
  std::string y = "devices:\n" + kDevice;
  y.replace(y.find("memory_gb: 80"), 13, "memory_gb: 80GB");
  auto p = problems_of(y);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("cat.yaml:4:16: devices[0].memory_gb: '80GB' is not a number", 0), 0u) << p[0];

  std::string neg = "devices:\n" + kDevice;
  neg.replace(neg.find("term_7_day: 2.0"), 15, "term_7_day: -1");
  auto q = problems_of(neg);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_NE(q[0].find("price_per_gpu_hour.term_7_day: -1 is not > 0"), std::string::npos) << q[0];

  // on_demand is optional (a catalog written before it loads, without one), and checked when given.
  EXPECT_EQ(load_catalog_string("devices:\n" + kDevice, "cat.yaml").devices.at(0).price_on_demand, 0);
  std::string od = "devices:\n" + kDevice;
  od.replace(od.find("{term_7_day"), 1, "{on_demand: 2.5, ");
  EXPECT_EQ(load_catalog_string(od, "cat.yaml").devices.at(0).price_on_demand, 2.5);
  od.replace(od.find("on_demand: 2.5"), 14, "on_demand: 0");
  auto r = problems_of(od);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r[0].find("price_per_gpu_hour.on_demand: 0 is not > 0"), std::string::npos) << r[0];
}

TEST(Catalog, EveryProblemIsCollectedAndDuplicatesAndPlatformsChecked) {
  std::string second = kDevice;
  second.replace(second.find("platform: cuda"), 14, "platform: tpu");
  auto p = problems_of("devices:\n" + kDevice + second + "    color: red\n");
  // duplicate name X1, platform tpu, unknown key color: three problems together.
  ASSERT_EQ(p.size(), 3u);
  std::string all;
  for (const auto& s : p) all += s + "\n";
  EXPECT_NE(all.find("duplicate device name 'X1' (first on line 2)"), std::string::npos) << all;
  EXPECT_NE(all.find("'tpu' is not one of: cuda, rocm"), std::string::npos) << all;
  EXPECT_NE(all.find("unknown key 'color'"), std::string::npos) << all;
  // The message lists them too (main prints what()).
  try {
    load_catalog_string("devices:\n" + kDevice + second, "cat.yaml");
    FAIL();
  } catch (const CatalogError& e) {
    EXPECT_NE(std::string(e.what()).find("catalog cat.yaml has 2 problems"), std::string::npos);
    EXPECT_NE(e.hint().find("docs/plan.md"), std::string::npos);
  }
}

TEST(Catalog, SyntaxErrorsAndWrongShapes) {
  EXPECT_EQ(problems_of("devices: [\n").size(), 1u);
  EXPECT_EQ(problems_of("- a\n- b\n").size(), 1u);
  EXPECT_EQ(problems_of("devices: []\n").size(), 1u);
  EXPECT_EQ(problems_of("currency: USD\n").size(), 1u);
  EXPECT_THROW(load_catalog("/nonexistent/catalog.yaml"), anchor::Error);
}

TEST(Catalog, FindCatalogResolvesBudgetCatalogAgainstTheConfigDirectory) {
  const std::string configs = std::string(ANCHOR_SOURCE_DIR) + "/configs";
  auto cfg =
      anchor::config::load_string("data: {train: [x.txt]}\nbudget: {catalog: catalog.yaml}\n", "c.yaml", {}, configs);
  EXPECT_EQ(find_catalog(cfg), configs + "/catalog.yaml");
  EXPECT_EQ(find_catalog(cfg, "/explicit.yaml"), "/explicit.yaml");
  // Negative control: a budget.catalog that does not exist is not picked.
  auto missing = anchor::config::load_string("data: {train: [x.txt]}\nbudget: {catalog: nope.yaml}\n", "c.yaml", {},
                                             "/nonexistent-dir");
  // Then ./configs/catalog.yaml, then <dir of this binary>/../share/anchor/catalog.yaml, then an error
  // naming every place tried.
  const std::string exe = anchor::proc::self_exe();
  const std::string beside = exe.substr(0, exe.rfind('/')) + "/../share/anchor/catalog.yaml";
  if (std::filesystem::is_regular_file("configs/catalog.yaml")) {
    EXPECT_EQ(find_catalog(missing), "configs/catalog.yaml");
  } else if (std::filesystem::is_regular_file(beside)) {
    EXPECT_EQ(find_catalog(missing), beside);
  } else {
    try {
      find_catalog(missing);
      ADD_FAILURE() << "no catalog exists, yet one was found";
    } catch (const anchor::Error& e) {
      EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/nope.yaml"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(beside), std::string::npos) << e.what();
    }
  }
}

}  // namespace
