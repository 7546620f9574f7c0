#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/launch_config.hpp"

namespace trainrun::launch {

// The values of trainrun's options, each read by one pure function (fuzzed and unit-tested). Each
// throws UsageError naming `what`, the value as given ("--nnodes=0", "PET_NNODES=0").

// Throws UsageError(message): every parser of the command line and the configuration file fails
// through it.
[[noreturn]] void fail(const std::string& message);
// An option's dashed name: "nproc_per_node" and "nproc-per-node" are one option.
std::string dashed(std::string name);

// A whole number within int, by the strict syntax of trainrun::parse_integer; `rule` says what
// was expected.
int parse_int(const std::string& value, const std::string& what, const char* rule);
// Seconds from 0 to 1e9.
double parse_seconds(const std::string& value, const std::string& what);
// A flag's PET_* value: 1/true/True, 0/false/False or empty.
bool parse_flag_env(const std::string& value, const std::string& what);
// --nproc-per-node: a count, or cpu, gpu, xpu or auto (counted later, on the node).
WorkerCount parse_worker_count(const std::string& value, const std::string& what);
std::pair<int, int> parse_nnodes(const std::string& value, const std::string& what);
StdSpec parse_std_spec(const std::string& value, const std::string& what);
// --rdzv-conf KEY=VALUE,... as its entries (a key given twice keeps its last value), and checked
// by the one set of rules (check_rdzv_conf) into the typed value the job keeps.
std::map<std::string, std::string> rdzv_conf_entries(const std::string& value,
                                                     const std::string& what);
RendezvousConf parse_rdzv_conf(const std::string& value, const std::string& what);
std::vector<int> parse_rank_list(const std::string& value, const std::string& what);
int parse_signal_name(const std::string& name, const std::string& what);
// torchrun's --duplicate-std*-filters list: comma-separated, ",," is a literal comma. Empty
// items are dropped: an empty list duplicates nothing.
std::vector<std::string> parse_filter_list(const std::string& value);
// --preload: comma-separated dotted Python names (torch, torch.distributed); empty: none. A name
// that Python could not import by it (an empty item, a part that is not an identifier) is refused.
std::vector<std::string> parse_module_list(const std::string& value, const std::string& what);

// The text each parser above reads back as `value`: how the option table shows the defaults that
// LaunchConfig holds.
// The words of the values above, as their parsers read them (for the completion scripts).
std::vector<std::string> worker_count_words();    // cpu gpu xpu auto
std::vector<std::string> std_spec_words();        // 0 1 2 3
std::vector<std::string> handled_signal_names();  // SIGTERM SIGINT ...

std::string nnodes_text(int min_nodes, int max_nodes);  // always MIN:MAX, as torchrun shows it
std::string worker_count_text(const WorkerCount& count);
std::string seconds_text(double seconds);
std::string std_spec_text(const StdSpec& spec);
std::string rank_list_text(const std::vector<int>& ranks);
std::string signal_list_text(const std::vector<int>& signals);
// Each comma doubled; a filter that starts with a comma cannot follow another (torchrun's syntax).
std::string filter_list_text(const std::vector<std::string>& filters);
std::string module_list_text(const std::vector<std::string>& modules);

}  // namespace trainrun::launch
