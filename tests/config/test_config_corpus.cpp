// Public DeepSpeed configs (tests/config/wild/, sources in SOURCES.tsv) read as
// users bring them: each runs, runs with notes on the keys EXPECTED.tsv names,
// or is refused naming the feature, the key or "auto" (docs/config_policy.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "stratum/config/config.h"
#include "stratum/core/error.h"

namespace {

const std::string kWild = std::string(STRATUM_SOURCE_DIR) + "/tests/config/wild";

struct Expectation {
  std::string outcome;               // run | notes | refused
  std::vector<std::string> details;  // notes: key paths; refused: text every problem list must contain
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::map<std::string, Expectation> expectations() {
  std::map<std::string, Expectation> out;
  std::ifstream in(kWild + "/EXPECTED.tsv");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto cols = split(line, '\t');
    if (cols.size() < 2) continue;
    out[cols[0]] = Expectation{cols[1], cols.size() > 2 ? split(cols[2], '|') : std::vector<std::string>{}};
  }
  return out;
}

}  // namespace

TEST(ConfigCorpus, EveryPublicConfigRunsOrIsRefusedAsExpected) {
  const auto expected = expectations();
  ASSERT_GE(expected.size(), 60u) << kWild << "/EXPECTED.tsv";
  size_t files = 0;
  std::map<std::string, int> counts;
  for (const auto& entry : std::filesystem::directory_iterator(kWild)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    const std::string name = entry.path().filename().string();
    auto it = expected.find(name);
    if (it == expected.end()) {
      ADD_FAILURE() << name << ": not in EXPECTED.tsv";
      continue;
    }
    const Expectation& want = it->second;
    ++counts[want.outcome];
    std::vector<std::string> notes;
    std::string problems;
    try {
      notes = stratum::Config::from_file(entry.path().string()).notes;
    } catch (const stratum::ConfigError& e) {
      problems = e.what();
      notes = e.notes();
    }
    if (want.outcome == "refused") {
      EXPECT_FALSE(problems.empty()) << name << ": accepted, expected refused";
      for (const auto& s : want.details) EXPECT_NE(problems.find(s), std::string::npos) << name << ": no '" << s << "' in\n" << problems;
      continue;
    }
    EXPECT_TRUE(problems.empty()) << name << ": expected to " << want.outcome << ", refused:\n" << problems;
    if (want.outcome == "run") {
      EXPECT_TRUE(notes.empty()) << name << ": expected no notes, got " << notes.size() << ": " << (notes.empty() ? "" : notes[0]);
      continue;
    }
    ASSERT_EQ(want.outcome, "notes") << name;
    EXPECT_EQ(notes.size(), want.details.size()) << name;
    for (const auto& key : want.details) {
      const bool found = std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.rfind(key + ": ", 0) == 0; });
      EXPECT_TRUE(found) << name << ": no note on " << key;
    }
  }
  EXPECT_EQ(files, expected.size()) << "EXPECTED.tsv lists files that are not in " << kWild;
  std::cout << "corpus: " << files << " configs: " << counts["run"] << " run, " << counts["notes"] << " run with notes, "
            << counts["refused"] << " refused\n";
}

TEST(ConfigCorpus, EveryConfigHasItsSource) {
  std::ifstream in(kWild + "/SOURCES.tsv");
  std::map<std::string, std::string> sources;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    const auto cols = split(line, '\t');
    ASSERT_GE(cols.size(), 4u) << line;
    EXPECT_EQ(cols[3].size(), 40u) << cols[0] << ": the commit is 40 hex digits";
    sources[cols[0]] = cols[1];
  }
  for (const auto& entry : std::filesystem::directory_iterator(kWild))
    if (entry.path().extension() == ".json")
      EXPECT_TRUE(sources.count(entry.path().filename().string())) << entry.path() << ": no line in SOURCES.tsv";
}
