// Test runner. Besides running Catch2, the binary doubles as the child process for
// tests that must run in a fresh process (a seccomp filter cannot be removed once
// installed): SPANPROF_TEST_CHILD=<scenario> runs that scenario instead.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"
#include "support/child_process.hpp"

#include <unistd.h>

// LeakSanitizer checks a process when it exits. In a child that a test scenario
// forked, what the parent's other threads owned is unreachable by construction
// (those threads do not exist in the child), so the check is left to the process
// that was started: a scenario's own process is still checked.
namespace {
const pid_t started_as = ::getpid();
}
extern "C" int __lsan_is_turned_off() { return ::getpid() != started_as ? 1 : 0; }

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(spanprof_test::child_env)) return spanprof_test::run_child_scenario(scenario);
  return Catch::Session().run(argc, argv);
}
