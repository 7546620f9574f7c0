#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/base/process.hpp"

namespace trainrun::launch {

// A worker's SpawnRequest as the --preload template carries it out (python/trainrun_request.py's
// decode_request): a JSON object, and the descriptors that travel with it (SCM_RIGHTS), in the
// order the object names them: each standard stream passed ("fd"), the cgroup's directory, the
// diagnosis channel (the kept descriptor). The caller sends the exec report's write end last.
// A text of the request (argv, environment, working directory) is a JSON string, or the array
// of its bytes where they are not UTF-8 (JSON holds only Unicode; an argument need not be).
struct ForkRequest {
  std::string json;
  std::vector<int> fds;
};

// `open_streams`: which of our standard streams are open, for a stream the worker inherits (it
// gets ours, or none where ours is closed). nullopt for what the template cannot carry out: a
// stream asked for as a pipe.
std::optional<ForkRequest> fork_request(const SpawnRequest& request,
                                        const std::array<bool, 3>& open_streams);

}  // namespace trainrun::launch
