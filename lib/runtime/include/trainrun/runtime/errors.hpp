#pragma once

#include <stdexcept>

namespace trainrun::runtime {

// Bad configuration or launcher environment: the message names the setting, the value and the
// rule, so a user can fix it without reading the source.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A failure while running: a store, process group, collective or storage operation went wrong.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainrun::runtime
