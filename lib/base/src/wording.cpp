#include "trainrun/base/wording.hpp"

namespace trainrun {

std::string count_of(long long n, std::string_view singular, std::string_view plural) {
  std::string text = std::to_string(n) + " ";
  if (n == 1 || n == -1)
    text += singular;
  else if (plural.empty())
    text.append(singular).append("s");
  else
    text += plural;
  return text;
}

}  // namespace trainrun
