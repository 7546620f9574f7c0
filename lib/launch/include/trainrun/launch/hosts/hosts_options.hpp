#pragma once

#include <string>
#include <vector>

namespace trainrun::launch {

// A job started from one terminal on many hosts (--hosts or --hostfile): what the command line
// said, checked but not yet read from the machine (the host file, the variables to forward).
// The launching trainrun starts one agent per host over ssh (hosts_launcher.hpp).
struct HostsOptions {
  std::string hosts;                       // --hosts as given
  std::string hostfile;                    // --hostfile
  std::string include;                     // --include, DeepSpeed's HOST[:I,J]@...
  std::string exclude;                     // --exclude
  std::vector<std::string> ssh = {"ssh"};  // --ssh or TRAINRUN_SSH, split at blanks
  std::vector<std::string> forward_env;    // -x NAME or NAME=VALUE, in order
  bool dedup = false;                      // --dedup
  // What every agent gets of the command line: its options without the launcher's own, then the
  // entrypoint and its arguments as given.
  std::vector<std::string> agent_options;
  std::vector<std::string> entry;
  std::string workers = "1";  // --nproc-per-node as given, for hosts without a slot count
  bool master_addr_given = false;
  bool output_given = false;  // --tee or --redirects given: the user chose the routes
  bool prefix_given = false;  // --log-line-prefix-template given
  double shutdown_timeout = 30.0;
};

}  // namespace trainrun::launch
