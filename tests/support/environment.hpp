// Sets environment variables for one test and puts every variable spanprof reads
// back as it was afterwards. On construction all of them are cleared, so a test
// sees only what it sets, whatever the shell running the suite exports.
#pragma once

#include <spanprof/detail/runtime/settings.hpp>

#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <map>
#include <optional>
#include <string>

namespace spanprof_test {

class ScopedEnvironment {
 public:
  ScopedEnvironment() {
    for (const auto& setting : spanprof::detail::settings)
      if (setting.variable != nullptr) save_and_clear(setting.variable);
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }
  // Clears, then sets these (a null value leaves the variable unset).
  ScopedEnvironment(std::initializer_list<std::pair<const char*, const char*>> values) : ScopedEnvironment() {
    for (const auto& [name, value] : values)
      if (value) set(name, value);
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

  void set(const std::string& name, const std::string& value) {
    save_and_clear(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save_and_clear(name);
  }

 private:
  void save_and_clear(const std::string& name) {
    if (saved_.count(name) == 0) {
      const char* value = std::getenv(name.c_str());
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
    }
    ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace spanprof_test
