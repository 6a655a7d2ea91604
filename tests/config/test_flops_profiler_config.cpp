// The flops_profiler section: DeepSpeed's keys and defaults, every bad value
// named by its key, and the resolved config printing it back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using stratum::ConfigError;

TEST(FlopsProfilerConfig, DeepSpeedDefaultsWhenAbsentOrEmpty) {
  for (const char* text : {R"({"train_batch_size": 8})", R"({"train_batch_size": 8, "flops_profiler": {}})",
                           R"({"train_batch_size": 8, "flops_profiler": {"output_file": null}})"}) {
    const Config c = Config::from_string(text);
    const auto& f = c.flops_profiler;
    EXPECT_FALSE(f.enabled) << text;
    EXPECT_DOUBLE_EQ(f.recompute_fwd_factor, 0.0);
    EXPECT_EQ(f.profile_step, 1);
    EXPECT_EQ(f.module_depth, -1);
    EXPECT_EQ(f.top_modules, 1);
    EXPECT_TRUE(f.detailed);
    EXPECT_EQ(f.output_file, "");
  }
}

TEST(FlopsProfilerConfig, EveryKeyIsRead) {
  const Config c = Config::from_string(R"({"train_batch_size": 8, "flops_profiler": {"enabled": true,
      "recompute_fwd_factor": 1.0, "profile_step": 5, "module_depth": 0, "top_modules": 3, "detailed": false,
      "output_file": "prof/out.txt"}})");
  const auto& f = c.flops_profiler;
  EXPECT_TRUE(f.enabled);
  EXPECT_DOUBLE_EQ(f.recompute_fwd_factor, 1.0);
  EXPECT_EQ(f.profile_step, 5);
  EXPECT_EQ(f.module_depth, 0);
  EXPECT_EQ(f.top_modules, 3);
  EXPECT_FALSE(f.detailed);
  EXPECT_EQ(f.output_file, "prof/out.txt");

  const nlohmann::json j = stratum::to_json(c);
  EXPECT_EQ(j["flops_profiler"]["enabled"], true);
  EXPECT_EQ(j["flops_profiler"]["profile_step"], 5);
  EXPECT_EQ(j["flops_profiler"]["output_file"], "prof/out.txt");
  const Config again = Config::from_json(j, "resolved");
  EXPECT_EQ(stratum::to_json(again), j);
  EXPECT_TRUE(stratum::to_json(Config::from_string(R"({"train_batch_size": 8})"))["flops_profiler"]["output_file"].is_null());
}

TEST(FlopsProfilerConfig, BadValuesAreNamedByTheirKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("recompute_fwd_factor": -0.5)", "flops_profiler.recompute_fwd_factor: expected a number in [0, 1], got -0.5"},
      {R"("recompute_fwd_factor": 2)", "flops_profiler.recompute_fwd_factor: expected a number in [0, 1], got 2"},
      {R"("profile_step": -1)", "flops_profiler.profile_step: expected an integer >= 0, got -1"},
      {R"("profile_step": 1.5)", "flops_profiler.profile_step: expected an integer, got 1.5"},
      {R"("module_depth": -2)", "flops_profiler.module_depth: expected an integer >= -1, got -2"},
      {R"("top_modules": 0)", "flops_profiler.top_modules: expected an integer >= 1, got 0"},
      {R"("enabled": "yes")", "flops_profiler.enabled: expected true or false"},
      {R"("detailed": 1)", "flops_profiler.detailed: expected true or false"},
      {R"("output_file": 3)", "flops_profiler.output_file: expected a string, got a number 3"},
      {R"("profile_stpe": 2)", "flops_profiler.profile_stpe: unknown key (did you mean 'profile_step'?)"},
      {R"("profile_step": "auto")", "flops_profiler.profile_step: \"auto\""},
  };
  for (const auto& [keys, message] : cases) {
    const std::string text = R"({"train_batch_size": 8, "flops_profiler": {)" + keys + "}}";
    try {
      Config::from_string(text, "bad.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "want \"" << message << "\" in:\n"
                                                                        << e.what();
    }
  }
  // Every problem at once; a section that is not an object.
  try {
    Config::from_string(R"({"train_batch_size": 8, "flops_profiler": {"top_modules": 0, "module_depth": -3}})");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 2u) << e.what();
  }
  EXPECT_THROW(Config::from_string(R"({"train_batch_size": 8, "flops_profiler": true})"), ConfigError);
}
