#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/hosts/host_list.hpp"
#include "trainrun/launch/hosts/hosts_options.hpp"

namespace trainrun::launch {

// The environment file read on the launching machine and forwarded to every host, as DeepSpeed's
// .deepspeed_env: NAME=VALUE lines, `#` comments, blank lines.
inline constexpr const char* kEnvFileName = ".trainrun_env";

// The first line a remote agent writes to its standard output once it has its token and options:
// until then a failure of its ssh is a failure to start the job.
inline constexpr const char* kReadyLine = "trainrun-agent-ready";

// After the handover, the launcher writes to each agent's standard input an empty line every
// kHeartbeatSeconds, and `stop N` to stop the job with signal N (the one the launcher received).
// An agent that reads nothing for kLauncherTimeoutSeconds has lost its launcher (a partition
// hides that from ssh and sshd alike) and stops its job, as when its standard input closes.
inline constexpr int kHeartbeatSeconds = 10;
inline constexpr int kLauncherTimeoutSeconds = 30;

// `stop N`, newline-terminated: what the launcher writes to stop an agent with signal N.
std::string stop_line(int signal);

// What a line the launcher wrote asks for: the signal of a `stop N`, else nothing (a heartbeat).
std::optional<int> stop_signal_of(const std::string& line);

// `text` quoted for a POSIX shell: the remote command ssh hands to the login shell.
std::string shell_quote(const std::string& text);

// The ssh command line that starts `host`'s agent: the user's ssh words first (ssh keeps the
// first value of an option), then trainrun's own defaults.
std::vector<std::string> ssh_command(const std::vector<std::string>& ssh, const std::string& host,
                                     const std::string& remote_command);

// The remote agent's arguments, after `trainrun --remote-agent=VERSION`: its node's layout (node
// rank in host order, the first host as the rendezvous), its worker count, the console prefix
// naming host and rank, then the user's options and entrypoint.
std::vector<std::string> agent_arguments(const HostsOptions& options,
                                         const std::vector<PlannedHost>& hosts, size_t index);

// `cd DIR && exec TRAINRUN --remote-agent=VERSION ARGS...`, quoted.
std::string remote_command(const std::string& cwd, const std::string& trainrun,
                           const std::string& version, const std::vector<std::string>& args);

// The host part of an ssh destination ("user@node0" -> "node0"): the rendezvous address.
std::string host_address(const std::string& destination);

// An env file's variables; errors name the file and line (UsageError).
std::map<std::string, std::string> parse_env_file(const std::string& text, const std::string& path);

// The variables every agent gets: the env files' (in order, later ones win), then -x entries,
// NAME alone taking the launching machine's value. Refuses an unset NAME, a bad name and the
// rendezvous token's variable (the job's token travels on ssh's standard input only).
std::map<std::string, std::string> forwarded_environment(
    const std::vector<std::map<std::string, std::string>>& files,
    const std::vector<std::string>& forward, const std::map<std::string, std::string>& env);

// What the launcher hands each agent on ssh's standard input, as one line: the job's token and
// the environment to set. The remote side reads it back (UsageError on anything else).
struct Handover {
  std::string token;
  std::map<std::string, std::string> env;
  std::string python;  // the launcher's handed_python(); "" for none
};
std::string encode_handover(const Handover& handover);
Handover decode_handover(const std::string& line);

// A worker's console line as the remote agents prefix it, "[HOST:RANK]:TEXT": its rank and text.
std::optional<std::pair<int, std::string>> split_worker_line(const std::string& line,
                                                             const std::string& host);

}  // namespace trainrun::launch
