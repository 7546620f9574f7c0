#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrun/launch/preflight/preflight_checks.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::launch {

// What one node's preflight needs once its round has formed.
struct PreflightJob {
  PreflightNode me;
  rendezvous::Assignment assignment;  // the peers to check, MASTER_ADDR
  rendezvous::PreflightOffer mine;
  PreflightMode mode = PreflightMode::on;
  std::string log_dir;  // checked writable
  std::chrono::milliseconds timeout{5000};
};

// One node's preflight on the agent's loop, every check at once: MASTER_ADDR resolved here, a
// connection to each peer's preflight port (group rank 0 by MASTER_ADDR, the ring neighbours
// by their advertised address) and to MASTER_ADDR:MASTER_PORT, the offers compared, the log
// directory written. Group rank 0 listens on MASTER_PORT until every node that checks it has
// (within twice the timeout: theirs runs out first, and their line names the link). `done` gets
// every finding, errors and warnings; cancel() drops it (a restart, a stop).
class PreflightRun : public std::enable_shared_from_this<PreflightRun> {
 public:
  using Done = std::function<void(std::vector<PreflightFinding>)>;
  static std::shared_ptr<PreflightRun> start(boost::asio::io_context& io, PreflightJob job,
                                             Done done);
  PreflightRun(boost::asio::io_context& io, PreflightJob job, Done done);
  void cancel();

 private:
  void begin();
  void one_done();

  boost::asio::io_context& io_;
  PreflightJob job_;
  Done done_;
  std::vector<std::shared_ptr<class LinkProbe>> probes_;
  std::shared_ptr<class NameLookup> lookup_;
  std::shared_ptr<class MasterPortWait> master_wait_;
  std::optional<PreflightFinding> master_port_;  // group rank 0's side of the MASTER_PORT check
  std::vector<LinkCheck> links_;
  std::vector<std::string> master_resolved_;
  std::string master_problem_;
  int pending_ = 0;
  bool over_ = false;
};

// Whether `dir` takes a file: a finding when it does not.
std::optional<PreflightFinding> log_dir_finding(const std::string& host, const std::string& dir);

}  // namespace trainrun::launch
