#pragma once

#include <map>
#include <optional>
#include <string>

#include "trainrun/launch/core/rendezvous_conf.hpp"

namespace trainrun::launch {

// The environment variable that may carry the shared token. The launcher reads it and never
// passes it on: workers do not see it (merge_environment leaves it out).
inline constexpr const char* kTokenVariable = "TRAINRUN_RDZV_TOKEN";

// The shared rendezvous token: the one a --hosts launcher handed over, else the contents of the token file (trailing whitespace removed),
// else the environment variable TRAINRUN_RDZV_TOKEN, else none. Throws UsageError (exit 2) with
// one line naming the file when it cannot be opened, is not a regular file (a directory, a FIFO:
// never waited on), is readable by group or others (unless any_mode), is too large, or holds an
// empty token; and when TRAINRUN_RDZV_TOKEN is set but empty or blank.
std::optional<std::string> load_token(const TokenSource& source,
                                      const std::map<std::string, std::string>& env);

}  // namespace trainrun::launch
