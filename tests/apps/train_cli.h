#pragma once
// Running stratum-train and stratum-ckpt as a user does, for the app tests:
// two CPU ranks under stratum-run on the default corpus, a tiny model.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "../common/run_command.h"
#include "stratum/core/fs.h"

namespace stratum::test::train_cli {

using Result = stratum::test::CommandResult;

inline Result run(const std::string& cmd) { return stratum::test::run_command("timeout 300 " + cmd); }

inline const std::string kBin = STRATUM_BIN_DIR;

// Writes `text` to dir/name (a config); returns its path.
inline std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// `config`: a file of configs/, or an absolute path.
inline std::string train_cmd(const std::string& dir, int steps, const std::string& extra = "",
                      const std::string& config = "default.json") {
  const std::string config_path = config.rfind('/', 0) == 0 ? config : std::string(STRATUM_SOURCE_DIR) + "/configs/" + config;
  return kBin + "/stratum-run --num_procs 2 " + kBin + "/stratum-train --config " + config_path +
         " --model gpt2-tiny-bytes --set layers=2 --data default --cache-dir " + dir +
         "/cache --steps " + std::to_string(steps) + " --eval-every 10 --eval-batches 1 " +
         "--log-dir " + dir + "/log --save-dir " + dir + "/ckpt " + extra;
}

// step -> the value in column `column` of metrics.csv (columns: step, loss,
// eval_loss, ...), for the rows that have one.
inline std::map<int, double> metric(const std::string& csv, int column) {
  std::map<int, double> out;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string step, value;
    std::getline(ss, step, ',');
    for (int c = 1; c <= column; ++c)
      if (!std::getline(ss, value, ',')) value.clear();
    if (!value.empty()) out[std::stoi(step)] = std::stod(value);
  }
  return out;
}

// step -> loss from metrics.csv.
inline std::map<int, double> losses(const std::string& csv) { return metric(csv, 1); }

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = stratum::fs::make_temp_directory("stratum_train_"); }
  void TearDown() override { stratum::fs::remove_tree(dir_); }
  std::string dir_;
};

}  // namespace stratum::test::train_cli
