#include "trainrun/base/numbers.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace trainrun {

namespace {

bool plain(std::string_view text) {
  return !text.empty() && !std::isspace(static_cast<unsigned char>(text.front()));
}

}  // namespace

std::optional<long long> parse_integer(std::string_view text) {
  if (!plain(text)) return std::nullopt;
  const std::string s(text);
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  if (!plain(text)) return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace trainrun
