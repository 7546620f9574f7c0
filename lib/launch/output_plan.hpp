#pragma once

#include <optional>
#include <string>

#include "config.hpp"

namespace trainrun::launch {

// Where one stream (stdout or stderr) of one worker goes.
enum class StreamRoute {
  inherit,  // straight to trainrun's own stream: no copying
  file,     // straight to the log file
  tee,      // through a pipe: to the log file and, prefixed, to the console
};

struct StreamPlan {
  StreamRoute route = StreamRoute::inherit;
  std::string file;  // log file path for file and tee
};

struct OutputPlan {
  StreamPlan out;
  StreamPlan err;
};

// Decides the routes of one worker's streams from --redirects, --tee and --local-ranks-filter.
// A rank outside the filter never reaches the console, so its output goes to its log files.
OutputPlan plan_output(const LaunchConfig& config, int local_rank, const std::string& rank_dir);

// The console prefix: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${role_name}, ${rank} and
// ${local_rank} (also $name; $$ is $; other names stay as written), or "[<role><local_rank>]:".
std::string line_prefix(const std::optional<std::string>& templ, const std::string& role, int rank,
                        int local_rank);

}  // namespace trainrun::launch
