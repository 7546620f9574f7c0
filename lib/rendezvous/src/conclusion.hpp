#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// How a job that a failure ends (no restart left) concludes, whichever backend keeps the rounds:
// each node says what failed, and every node gets the same `stop`, its root cause by the one rule
// (failed_before). The round rules use these for both backends; the client and the etcd backend
// bound the lists they send or store with them.

// What a `failure` report says failed on its node: its list; a report without one (an agent that
// could not say more) has its root cause stand in.
Ended reported_failures(const Failure& report);

// A node's later word (`ended`, or a failure report) after what it said before: it counts, unless
// it has less where the node already said something (it was lost mid-sentence).
template <class Id>
void take_report(std::map<Id, Ended>& reports, const Id& id, Ended latest) {
  auto it = reports.find(id);
  if (it == reports.end())
    reports.emplace(id, std::move(latest));
  else if (!latest.failures.empty())
    it->second = std::move(latest);
}

// Why the job could not restart, for the stop's reason: empty where it allows no restarts.
std::string no_restarts_left(int max_restarts, int restart_count);

// The job's end once every node has said (or was lost, or the time is up): the failures of
// `reports` together, the root cause first, at most kMaxRelayedFailures (`not_relayed` counts the
// rest), the root cause's status as the exit code, `why` after the reason. `reports` must hold at
// least one failure.
Stop concluded_stop(const std::vector<Ended>& reports, const std::string& why);

template <class Id>
Stop concluded_stop(const std::map<Id, Ended>& reports, const std::string& why) {
  std::vector<Ended> all;
  all.reserve(reports.size());
  for (const auto& entry : reports) all.push_back(entry.second);
  return concluded_stop(all, why);
}

// Keeps the head of `failures` whose encoding fits in `max_bytes` (the first always stays) and
// counts the others in `not_relayed`: a list that must fit in one value of a store (etcd's
// request limit), whatever its text escapes to.
void fit_failures(std::vector<WorkerFailure>& failures, int& not_relayed, std::size_t max_bytes);

// A node's list as it travels in one frame (`failure`, `ended`, `stop`): within
// kMaxRelayedFailureBytes, the rest counted.
inline Ended relayed_failures(std::uint64_t round, std::vector<WorkerFailure> failures,
                              int not_relayed) {
  fit_failures(failures, not_relayed, kMaxRelayedFailureBytes);
  return Ended{round, std::move(failures), not_relayed};
}

}  // namespace trainrun::rendezvous
