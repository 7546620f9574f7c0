#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trainrun::launch {

// One host of --hosts or --hostfile, in the order given: that order is the node ranks'.
struct HostEntry {
  std::string name;
  std::optional<int> slots;  // workers on it; none: --nproc-per-node decides
  int line = 0;              // in the host file; 0 for --hosts
};

// --hosts=node0:4,node1:4 (a host alone takes --nproc-per-node). `named` is how the option was
// given ("--hosts=..."), for the one-line errors (UsageError): an empty list, a bad entry, slots
// of 0, a host listed twice.
std::vector<HostEntry> parse_host_option(const std::string& text, const std::string& named);

// A host file's text: DeepSpeed's and Open MPI's `HOST slots=N`, Open MPI's `HOST:N`, a bare
// `HOST`; `#` starts a comment; blank lines are skipped. Open MPI's max_slots=N is accepted and
// has no effect. Errors name `path` and the line number.
std::vector<HostEntry> parse_host_file(const std::string& text, const std::string& path);

// A host of the job after --include/--exclude: how many workers it runs (none: as
// --nproc-per-node says) and, when some of its slots were left out, the GPU indices it keeps (its
// workers' CUDA_VISIBLE_DEVICES).
struct PlannedHost {
  std::string name;
  std::optional<int> workers;
  std::vector<int> devices;  // empty: all of them
};

// DeepSpeed's resource filters: `HOST[:I,J,...]` entries joined by `@`. --include keeps only the
// hosts (and slots) named, --exclude drops them; a host with no slot left is dropped; the host
// list's order stays. Both given, an unknown host, a slot index out of range or on a host without
// a slot count, or no host left: UsageError.
std::vector<PlannedHost> filter_hosts(const std::vector<HostEntry>& hosts,
                                      const std::string& include, const std::string& exclude);

}  // namespace trainrun::launch
