#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// Where one stream (stdout or stderr) of one worker goes.
enum class StreamRoute {
  inherit,  // straight to trainrun's own stream: no copying
  file,     // through a pipe: to the log file (to the console if the file cannot be written)
  tee,      // through a pipe: to the log file and, prefixed, to the console
  console,  // through a pipe: to the console unchanged, the last lines kept for the summary
};

struct StreamPlan {
  StreamRoute route = StreamRoute::inherit;
  std::string file;  // log file path for file and tee
  // tee only, with --duplicate-std*-filters: console lines containing one of `filters` are also
  // appended, prefixed, to `duplicate_file` (shared by the attempt's workers).
  std::string duplicate_file;
  std::vector<std::string> filters;
};

struct OutputPlan {
  StreamPlan out;
  StreamPlan err;
};

// Decides the routes of one worker's streams from --redirects, --tee and --local-ranks-filter.
// A rank outside the filter never reaches the console, so its output goes to its log files.
// Tee'd streams matched by --duplicate-std*-filters are duplicated into
// <attempt dir>/filtered_std{out,err}.log, the attempt dir being `rank_dir`'s parent.
OutputPlan plan_output(const LaunchConfig& config, int local_rank, const std::string& rank_dir);

// A stream that would go straight to trainrun's own goes through a pipe, to the console
// unchanged, so that the failure summary can show its last lines (see docs/cli.md#output-and-logs
// for when the agent asks for it).
void capture_inherited(StreamPlan& plan);

// The console prefix: --log-line-prefix-template (or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE) with
// ${role_name}, ${rank}, ${local_rank} and ${hostname} (also $name; $$ is $; other names stay as
// written), or "[<role><local_rank>]:".
std::string line_prefix(const std::optional<std::string>& templ, const std::string& role, int rank,
                        int local_rank, const std::string& hostname = "");

}  // namespace trainrun::launch
