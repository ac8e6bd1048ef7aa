// Test runner. Besides running Catch2, the binary doubles as the child process for
// tests that must run in a fresh process (a seccomp filter cannot be removed once
// installed): SPANPROF_TEST_CHILD=<scenario> runs that scenario instead.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"
#include "support/child_process.hpp"

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv(spanprof_test::child_env)) return spanprof_test::run_child_scenario(scenario);
  return Catch::Session().run(argc, argv);
}
