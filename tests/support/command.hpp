// Runs a shell command and captures what it prints (stdout and stderr).
#ifndef SPANPROF_TESTS_SUPPORT_COMMAND_HPP_
#define SPANPROF_TESTS_SUPPORT_COMMAND_HPP_

#include <cstdio>
#include <string>

#include <sys/wait.h>

namespace spanprof_test {

struct CommandResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string output;
};

inline CommandResult capture_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != -1) result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace spanprof_test

#endif  // SPANPROF_TESTS_SUPPORT_COMMAND_HPP_
