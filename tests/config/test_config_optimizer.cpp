// The optimizer section's Lamb and bias_correction: DeepSpeed's keys and
// defaults (FusedLamb: max_coeff 10, min_coeff 0.01, eps 1e-8, bias_correction
// true), their range checks, the keys Lamb does not have, and the resolved
// JSON parsing back to the same config.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

using stratum::Config;
using stratum::ConfigError;
using namespace stratum::config;

namespace {

Config parse(const std::string& text) { return Config::from_string(text, "test.json"); }

Config with_optimizer(const std::string& optimizer) {
  return parse(R"({"train_batch_size": 8, "optimizer": )" + optimizer + "}");
}

// Every problem of an invalid optimizer section, one string.
std::string problems_of(const std::string& optimizer) {
  try {
    with_optimizer(optimizer);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ConfigOptimizer, LambGetsFusedLambsDefaults) {
  Config c = with_optimizer(R"({"type": "Lamb"})");
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->type, OptimizerType::Lamb);
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer->beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer->beta2, 0.999);
  EXPECT_DOUBLE_EQ(c.optimizer->eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.optimizer->weight_decay, 0.0);
  EXPECT_TRUE(c.optimizer->bias_correction);
  EXPECT_DOUBLE_EQ(c.optimizer->max_coeff, 10.0);
  EXPECT_DOUBLE_EQ(c.optimizer->min_coeff, 0.01);
  EXPECT_EQ(with_optimizer(R"({"type": "lamb"})").optimizer->type, OptimizerType::Lamb) << "case-insensitive";
}

TEST(ConfigOptimizer, LambReadsEveryFusedLambKey) {
  Config c = with_optimizer(R"({"type": "Lamb", "params": {"lr": 0.002, "betas": [0.8, 0.99], "eps": 1e-6,
      "weight_decay": 0.01, "bias_correction": false, "max_coeff": 5.0, "min_coeff": 0.1, "max_grad_norm": 0.0,
      "eps_inside_sqrt": false, "amsgrad": false}})");
  const OptimizerConfig& o = *c.optimizer;
  EXPECT_DOUBLE_EQ(o.lr, 0.002);
  EXPECT_DOUBLE_EQ(o.beta1, 0.8);
  EXPECT_DOUBLE_EQ(o.beta2, 0.99);
  EXPECT_DOUBLE_EQ(o.eps, 1e-6);
  EXPECT_DOUBLE_EQ(o.weight_decay, 0.01);
  EXPECT_FALSE(o.bias_correction);
  EXPECT_DOUBLE_EQ(o.max_coeff, 5.0);
  EXPECT_DOUBLE_EQ(o.min_coeff, 0.1);
  // min_coeff == max_coeff: a fixed trust ratio.
  EXPECT_DOUBLE_EQ(with_optimizer(R"({"type": "Lamb", "params": {"max_coeff": 1, "min_coeff": 1}})").optimizer->min_coeff,
                   1.0);
}

TEST(ConfigOptimizer, AdamTakesBiasCorrection) {
  for (const char* type : {"Adam", "AdamW"}) {
    EXPECT_TRUE(with_optimizer(std::string(R"({"type": ")") + type + R"("})").optimizer->bias_correction) << type;
    EXPECT_FALSE(with_optimizer(std::string(R"({"type": ")") + type + R"(", "params": {"bias_correction": false}})")
                     .optimizer->bias_correction)
        << type;
  }
}

TEST(ConfigOptimizer, BadLambParamsAreNamed) {
  struct Case {
    const char* optimizer;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {R"({"type": "Lamb", "params": {"max_coeff": 2.0, "min_coeff": 3.0}})",
       {"optimizer.params.min_coeff: is 3.0, greater than max_coeff (2.0)"}},
      {R"({"type": "Lamb", "params": {"max_coeff": 0}})", {"optimizer.params.max_coeff: expected a number > 0"}},
      {R"({"type": "Lamb", "params": {"min_coeff": -0.5}})", {"optimizer.params.min_coeff: expected a number > 0"}},
      {R"({"type": "Lamb", "params": {"eps_inside_sqrt": true}})", {"optimizer.params.eps_inside_sqrt", "not supported"}},
      {R"({"type": "Lamb", "params": {"amsgrad": true}})", {"optimizer.params.amsgrad", "not supported"}},
      {R"({"type": "Lamb", "params": {"max_grad_norm": 1.0}})",
       {"optimizer.params.max_grad_norm: Stratum clips by the top-level \"gradient_clipping\""}},
      {R"({"type": "Lamb", "params": {"adam_w_mode": true}})", {"optimizer.params.adam_w_mode: an Adam option"}},
      {R"({"type": "Lamb", "params": {"bias_correction": "yes"}})", {"optimizer.params.bias_correction: expected true or false"}},
      {R"({"type": "Lamb", "params": {"max_cof": 2}})", {"optimizer.params.max_cof: unknown key (did you mean 'max_coeff'?)"}},
      {R"({"type": "Adam", "params": {"max_coeff": 2}})", {"optimizer.params.max_coeff: unknown key"}},
      {R"({"type": "Adam", "params": {"max_grad_norm": 0.0}})", {"optimizer.params.max_grad_norm"}},
      {R"({"type": "Lamm"})", {"unknown optimizer \"Lamm\"; expected Adam, AdamW or Lamb", "did you mean 'Lamb'"}},
      {R"({"params": {}})", {"optimizer.type: missing; expected \"Adam\", \"AdamW\" or \"Lamb\""}},
  };
  for (const Case& c : cases) {
    const std::string what = problems_of(c.optimizer);
    EXPECT_FALSE(what.empty()) << "accepted: " << c.optimizer;
    for (const auto& s : c.expected) EXPECT_NE(what.find(s), std::string::npos) << "missing '" << s << "' in:\n" << what;
  }
}

TEST(ConfigOptimizer, ResolvedJsonRoundTrips) {
  for (const char* optimizer : {R"({"type": "Lamb", "params": {"lr": 1e-4, "max_coeff": 4.0, "min_coeff": 0.2,
                                    "bias_correction": false, "weight_decay": 0.01}})",
                                R"({"type": "Adam", "params": {"bias_correction": false, "adam_w_mode": false}})"}) {
    Config c = with_optimizer(optimizer);
    nlohmann::json resolved = stratum::to_json(c, 2);
    Config again = Config::from_json(resolved, "resolved");
    EXPECT_EQ(stratum::to_json(again, 2), resolved) << optimizer;
    EXPECT_EQ(resolved["optimizer"]["params"]["bias_correction"], false);
  }
  const nlohmann::json lamb = stratum::to_json(with_optimizer(R"({"type": "Lamb"})"), 2)["optimizer"];
  EXPECT_EQ(lamb["type"], "Lamb");
  EXPECT_EQ(lamb["params"]["max_coeff"], 10.0);
  EXPECT_EQ(lamb["params"]["min_coeff"], 0.01);
  EXPECT_FALSE(lamb["params"].contains("adam_w_mode")) << "not a Lamb key";
}
