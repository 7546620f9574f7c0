// The round table's two backends behind one face: each row of round_table_test.cpp drives a job
// through this interface and runs once per backend. The built-in is its RoundMachine in process
// with a fake clock; etcd is a real etcd (/usr/bin/etcd, started once per test process) holding
// the state, each node with its own lease, key and answers, every change a compare-and-set.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/rendezvous/messages.hpp"
#include "trainrun/rendezvous/options.hpp"

namespace trainrun::rendezvous::table {

// What a join says of the node rank it wants, beside its name: its --node-rank (-1: none), and
// whether it is the node the endpoint names.
struct Wish {
  int node_rank = -1;
  bool at_endpoint = false;
};

// Nodes are numbered from 1; node n advertises 10.0.0.n, pid 1000+n, master port 30000+n unless
// a join gives another. A node that was assigned a rank says so when it joins again, as its
// agent does (last_rank).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string endpoint() const = 0;

  virtual void join(int node, const std::string& host, int nproc = 1,
                    std::optional<int> master_port = std::nullopt, Wish wish = {}) = 0;
  // A worker failed on `node`, in the round it was last assigned (or `round`).
  virtual void fail(int node, const FailureReport& failure,
                    const std::vector<WorkerFailure>& failures = {}, int not_relayed = 0,
                    std::optional<std::uint64_t> round = std::nullopt) = 0;
  // Node `node` found the job cannot run (its preflight) in the round it was assigned.
  virtual void abort(int node, const std::string& reason) = 0;
  virtual void done(int node) = 0;
  // After its halt: what failed on `node`.
  virtual void ended(int node, const std::vector<WorkerFailure>& failures, int not_relayed) = 0;
  // The node is gone (its connection closed, or its lease expired) for `why`.
  virtual void lose(int node, const std::string& why) = 0;
  // Time passes; every node not lost or stopped stays in touch.
  virtual void advance(Clock::duration d) = 0;

  // What the node was last told.
  virtual std::optional<Assignment> assignment(int node) const = 0;
  virtual std::optional<Restart> restart(int node) const = 0;
  virtual bool halted(int node) const = 0;
  virtual std::optional<Stop> stop(int node) const = 0;
  // Why its last join was refused, if it was.
  virtual std::optional<std::string> refused(int node) const = 0;
};

std::unique_ptr<Backend> builtin_backend(const RoundOptions& options);
// Empty, with a warning, where /usr/bin/etcd is not installed or does not start.
std::unique_ptr<Backend> etcd_backend(const RoundOptions& options);

}  // namespace trainrun::rendezvous::table
