#pragma once

#include <string>
#include <string_view>

namespace trainrun {

// "1 node", "2 nodes", "0 workers": a count and its noun, singular only for exactly one. `plural`
// defaults to the singular with an "s".
std::string count_of(long long n, std::string_view singular, std::string_view plural = {});

}  // namespace trainrun
