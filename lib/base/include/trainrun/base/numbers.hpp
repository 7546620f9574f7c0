#pragma once

#include <optional>
#include <string_view>

namespace trainrun {

// The strict number syntax every option and protocol field uses: the whole text, no blanks, an
// optional leading sign (as Python's int() takes "+2"). Callers check the range and word the error
// for their option.

// A base-10 integer that fits in a long long; nothing for anything else.
std::optional<long long> parse_integer(std::string_view text);

// A finite decimal number ("1", "0.5", "1e3"); nothing for anything else, "nan" and "inf" too.
std::optional<double> parse_number(std::string_view text);

}  // namespace trainrun
