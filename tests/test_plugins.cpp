// One process, several shared objects that profile: a host that starts spanprof at
// 1 kHz with its own uploader, and a plugin built -fvisibility=hidden that opens a
// guard (support/plugin_host.cpp, support/profiling_plugin.cpp).
#include "support/catch.hpp"
#include "support/command.hpp"

#include <string>

#if defined(SPANPROF_TEST_PLUGIN_HOST_COMPILED) && defined(SPANPROF_TEST_PLUGIN_HOST_HEADER_ONLY)

namespace {
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
const std::string another_copy = "another copy of spanprof's runtime runs in this process";
}  // namespace

TEST_CASE("a dlopen'ed plugin linking the compiled library as a shared library profiles with the host's options",
          "[plugins]") {
  const auto result = spanprof_test::capture_command(std::string(SPANPROF_TEST_PLUGIN_HOST_COMPILED) + " " +
                                                     SPANPROF_TEST_PROFILING_PLUGIN_COMPILED);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // The host's uploader got the plugin's span, sampled at the host's 1 kHz.
  CHECK(result.output.find("plugin profiles at the host: 1, period 1000000 ns") != std::string::npos);
  CHECK(count(result.output, another_copy) == 0);
}

TEST_CASE("a header-only plugin in an executable that exports nothing says once that it runs its own runtime",
          "[plugins]") {
  const std::string directory = "spanprof-test-plugin-profiles";
  const auto result = spanprof_test::capture_command("rm -rf " + directory + " && SPANPROF_OUTPUT_DIR=" + directory +
                                                     " " + SPANPROF_TEST_PLUGIN_HOST_HEADER_ONLY + " " +
                                                     SPANPROF_TEST_PROFILING_PLUGIN_HEADER_ONLY);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  // Its own runtime: the host's uploader never sees the span, and one line says why.
  CHECK(result.output.find("plugin profiles at the host: 0") != std::string::npos);
  CHECK(count(result.output, another_copy) == 1);
  CHECK(count(result.output, "spanprof::spanprof_compiled as a shared library") == 1);
  spanprof_test::capture_command("rm -rf " + directory);
}

TEST_CASE("a header-only plugin in an executable that exports its symbols (-rdynamic) shares the host's runtime",
          "[plugins]") {
  const auto result = spanprof_test::capture_command(std::string(SPANPROF_TEST_PLUGIN_HOST_EXPORTED) + " " +
                                                     SPANPROF_TEST_PROFILING_PLUGIN_HEADER_ONLY);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  CHECK(result.output.find("plugin profiles at the host: 1, period 1000000 ns") != std::string::npos);
  CHECK(count(result.output, another_copy) == 0);
}

#endif
