#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace trainrun::rendezvous {

// What an agent offers for the preflight, the checks every node runs once a round has formed
// and before its workers start (docs/protocol.md, "The preflight"): where the others can reach
// it on a port of the range the process group uses, and what it will run. It travels in the
// join's node descriptor (so in the etcd state too) as a versioned extension: a node that does
// not know `version` ignores the offer, an older node ignores the field.
inline constexpr int kPreflightVersion = 1;
// The longest version string (trainrun, Python, torch) and entrypoint name an offer carries.
inline constexpr std::size_t kMaxPreflightText = 128;

struct PreflightOffer {
  std::string id;          // 16 random hex digits: the listener answers with it, so a
                           // connection that reaches another program is told apart
  int port = 0;            // the agent's preflight listener (1..65535), an ephemeral port
  std::string trainrun;    // trainrun's version
  std::string entrypoint;  // the entrypoint as given, for messages
  std::string sha256;      // its content hash (64 hex digits), "" when it is no file (-m)
  std::string python;      // the workers' Python version, "" when they do not run Python
  std::string torch;       // the torch version that Python imports, "" when none
  std::string network;     // which network stack (machine and namespace) the agent runs in
                           // (16 hex digits): agents with the same one share a loopback
  bool master_check = false;  // checks MASTER_PORT from other nodes and, as group rank 0, lets
                              // it be checked (an older agent does neither)
  bool operator==(const PreflightOffer& o) const;
};

// A node that one node checks, as the round's assignment gives it.
struct PreflightPeer {
  int group_rank = 0;
  std::string host;
  std::string addr;  // its advertised address
  PreflightOffer offer;
};

// At most this many peers in one assignment (preflight_peer_ranks gives at most 3).
inline constexpr std::size_t kMaxPreflightPeers = 4;

// The group ranks node `group_rank` of `world` checks: group rank 0 (which hosts MASTER_ADDR's
// store) and its ring neighbours, each once, never itself. So a round of N nodes makes at most
// 3N connections, not N², and every node is checked by its two neighbours and checks rank 0.
std::vector<int> preflight_peer_ranks(int group_rank, int world);

}  // namespace trainrun::rendezvous
