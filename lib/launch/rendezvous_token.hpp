#pragma once

#include <map>
#include <optional>
#include <string>

namespace trainrun::launch {

// The shared rendezvous token: the contents of --rdzv-conf token_file=PATH (trailing whitespace
// removed), else the environment variable TRAINRUN_RDZV_TOKEN, else none. Throws
// UsageError (exit 2) when the file cannot be read or the token is empty.
std::optional<std::string> load_token(const std::optional<std::string>& token_file,
                                      const std::map<std::string, std::string>& env);

}  // namespace trainrun::launch
