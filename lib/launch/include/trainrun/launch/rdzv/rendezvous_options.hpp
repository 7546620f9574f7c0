#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "trainrun/launch/core/rendezvous_conf.hpp"
#include "trainrun/launch/rdzv/rendezvous_token.hpp"
#include "trainrun/rendezvous/handler.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::launch {

struct LaunchConfig;

// The one set of rules for --rdzv-conf KEY=VALUE entries, applied once, when the command line is
// parsed (parse_rdzv_conf): the result is LaunchConfig::rdzv_conf. Keys: join_timeout,
// last_call_timeout, heartbeat_timeout, keep_alive_interval (seconds from 0.01 to 1e7),
// keep_alive_max_attempt (heartbeat_timeout as a count of keep-alives), is_host (1 or 0),
// token_file, token_file_mode (private or any; only with token_file), rdzv_port (1..65535), and,
// accepted for torchrun compatibility and unused, close_timeout, timeout (seconds
// >= 0) and read_timeout. Other keys are refused, so that a typo does not pass silently. Throws
// UsageError with a one-line reason naming the key.
RendezvousConf check_rdzv_conf(const std::map<std::string, std::string>& entries);

// --rdzv-backend: static, c10d, etcd and etcd-v2 (the same backend: trainrun speaks etcd's v3
// API for both); other names are unknown. `what` names the value as given
// ("--rdzv-backend=etcd"). Throws UsageError.
RendezvousBackend parse_rdzv_backend(const std::string& name, const std::string& what);

// One node with the static backend needs nobody's agreement: no rendezvous at all.
bool uses_rendezvous(const LaunchConfig& config);

// What rendezvous_options() checks of the command line alone (the static backend's fixed node
// count, the node rank, the ports, the endpoint), applied when the command line is parsed so that
// a job that cannot run is refused before anything starts. Nothing for a job without a
// rendezvous. A token (token_file, or TRAINRUN_RDZV_TOKEN in `env`) with the etcd backend, which
// has no use for it, is refused too. Throws UsageError.
void check_rendezvous_layout(const LaunchConfig& config,
                             const std::map<std::string, std::string>& env);

// The rendezvous options of this job, from a parsed command line: its values combined and the
// shared token read (--rdzv-conf token_file=PATH, else TRAINRUN_RDZV_TOKEN).
//
// The static backend's server listens on --master-addr at rdzv_port, by default MASTER_PORT + 1:
// MASTER_PORT itself belongs to worker RANK 0's store.
//
// Throws UsageError (exit 2) with a one-line reason naming the option, for values that do not
// fit together (a static job without a fixed node count, a missing endpoint) or an unreadable
// token file.
// The built-in backend's options; etcd's handler takes the RendezvousOptions within.
rendezvous::TcpRendezvousOptions rendezvous_options(const LaunchConfig& config,
                                                    const std::map<std::string, std::string>& env);

// The handler of the configured backend (etcd's or the built-in TCP one) on `io`, not started.
// `log` gets the rendezvous' lines for the console.
std::unique_ptr<rendezvous::RendezvousHandler> make_rendezvous(
    boost::asio::io_context& io, const LaunchConfig& config,
    const rendezvous::TcpRendezvousOptions& options, const rendezvous::LogFunction& log);

// What the user acts on when the rendezvous stopped this node (`stop.refusal`: its run id, its
// token, its node rank, the endpoint), in the launcher's options; empty when there is nothing to
// change. The rendezvous library says what happened and names no option: the hints are here.
std::string rendezvous_hint(const rendezvous::Stop& stop);
// `stop` with its hint after its reason ("...; check --rdzv-id").
rendezvous::Stop with_hint(rendezvous::Stop stop);
// What to do when this node must host the rendezvous and its port is taken (HostingError).
std::string hosting_hint(const LaunchConfig& config);

}  // namespace trainrun::launch
