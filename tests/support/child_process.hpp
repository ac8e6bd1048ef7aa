// Scenarios that run in a child process: the test binary re-executes itself with
// SPANPROF_TEST_CHILD set, and the parent checks the exit code and output.
#pragma once

#include "command.hpp"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include <unistd.h>

namespace spanprof_test {

inline constexpr const char* child_env = "SPANPROF_TEST_CHILD";

inline std::map<std::string, std::function<int()>>& child_scenarios() {
  static std::map<std::string, std::function<int()>> scenarios;
  return scenarios;
}

struct ChildScenario {
  ChildScenario(const char* name, std::function<int()> body) { child_scenarios()[name] = std::move(body); }
};

inline int run_child_scenario(const std::string& name) {
  auto it = child_scenarios().find(name);
  if (it == child_scenarios().end()) {
    std::fprintf(stderr, "unknown child scenario %s\n", name.c_str());
    return 99;
  }
  return it->second();
}

// Runs this test binary again as scenario `name`; killed after `timeout_seconds`
// (if given), so that a deadlock fails the test (exit code 124 or 137).
inline CommandResult run_in_child(const std::string& name, int timeout_seconds = 0) {
  const std::string guard = timeout_seconds > 0 ? "timeout -k 5 " + std::to_string(timeout_seconds) + " " : "";
  return capture_command(std::string(child_env) + "=" + name + " " + guard + "/proc/" + std::to_string(::getpid()) +
                         "/exe");
}

}  // namespace spanprof_test
