#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrun/launch/core/launch_config.hpp"
#include "trainrun/rendezvous/preflight_offer.hpp"

namespace trainrun::launch {

// The preflight's verdicts, as pure functions of what the agent saw (docs/multinode.md): each
// says what failed, between which nodes, in which direction, and what to change.
struct PreflightFinding {
  bool error = true;  // false: a warning, the job goes on
  std::string line;
};

// This node, as the preflight names it.
struct PreflightNode {
  std::string host;
  int group_rank = 0;
  std::string addr;  // its advertised address
};

// How a connection to a peer's preflight port ended.
enum class LinkOutcome {
  ok,           // connected, and the peer answered with its offer's id
  timed_out,    // no answer to the connection (or to the greeting) within the bound
  refused,      // the connection was refused
  unreachable,  // no route, network or host unreachable
  resolve,      // the address did not resolve here
  wrong_peer,   // something answered, not that node's agent
  other,
};

// One link this node checked: to `peer` at `target` (its advertised address, or MASTER_ADDR for
// group rank 0), on its preflight port, or on MASTER_PORT (`master_port`, group rank 0 only).
struct LinkCheck {
  rendezvous::PreflightPeer peer;
  std::string target;
  bool via_master_addr = false;
  int master_port = 0;  // not 0: the link to MASTER_ADDR:MASTER_PORT, where the workers' store
                        // will listen
  LinkOutcome outcome = LinkOutcome::other;
  std::string detail;                    // the system's words ("Connection refused")
  std::optional<double> clock_offset_s;  // the peer's wall clock minus ours, when it answered
};

// The bound on the clock offset between two nodes over which the preflight warns.
inline constexpr double kPreflightClockBound = 1.0;

// The line a preflight listener answers with: "trainrun-preflight ID UNIX_TIME\n"; and parsed
// back (nothing when it is not one).
std::string preflight_greeting(const std::string& id, double now);
struct PreflightGreeting {
  std::string id;
  double time = 0;
};
std::optional<PreflightGreeting> parse_preflight_greeting(std::string_view line);

// The clock offset of a peer that stamped `peer_time` between our `sent` and `received` (the
// middle of the exchange; off by at most half the round trip).
double clock_offset(double peer_time, double sent, double received);

// Same trainrun, same entrypoint (name and content), same Python and torch as each peer: a
// difference is an error, or a warning in PreflightMode::warn.
std::vector<PreflightFinding> consistency_findings(
    const PreflightNode& me, const rendezvous::PreflightOffer& mine,
    const std::vector<rendezvous::PreflightPeer>& peers, PreflightMode mode);

// Whether `address` (a literal) is a loopback address: 127.0.0.0/8, ::1, ::ffff:127.x.
bool is_loopback_address(std::string_view address);

// MASTER_ADDR as this node resolved it (`resolved`: literal addresses; `problem`: why it did not
// resolve): an error when it does not resolve, or when it resolves to a loopback address here
// while group rank 0 runs in another network stack (`master_network` differs from ours).
std::optional<PreflightFinding> master_addr_finding(const PreflightNode& me,
                                                    const std::string& master_addr,
                                                    const std::vector<std::string>& resolved,
                                                    const std::string& problem,
                                                    bool master_elsewhere);

// A link that failed: both nodes, the direction, the address and port, and the likely fix.
// `port_range`: this machine's ephemeral range ("32768-60999"), for the firewall hint.
std::optional<PreflightFinding> link_finding(const PreflightNode& me, const LinkCheck& link,
                                             const std::string& port_range);

// The port a link connects to: MASTER_PORT, or the peer's preflight port.
int link_port(const LinkCheck& link);

// Group rank 0's side of the MASTER_PORT check: `expected` other nodes were to connect to
// `master_addr`:`port` within `waited_s`, `checked` did. `problem`: why this node could not
// listen there (then none could check it). An error when the port was not reached by every node.
std::optional<PreflightFinding> master_port_finding(const PreflightNode& me,
                                                    const std::string& master_addr, int port,
                                                    int expected, int checked, double waited_s,
                                                    const std::string& problem);

// A warning when the peer's clock is off ours by more than kPreflightClockBound.
std::optional<PreflightFinding> clock_finding(const PreflightNode& me, const LinkCheck& link);

// The reason a node that failed its preflight gives when it leaves the job: every error, in
// one line.
std::string preflight_failure(const PreflightNode& me,
                              const std::vector<PreflightFinding>& findings);

}  // namespace trainrun::launch
