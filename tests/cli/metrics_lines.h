// The records of a `dpcore train --metrics` JSONL file, for the whole-process tests.
#pragma once

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"

namespace dpcore::testing {

// The records of a --metrics JSONL file, one per line.
inline std::vector<nlohmann::json> metrics_lines(const std::string& path) {
  std::istringstream lines(slurp(path));
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace dpcore::testing
