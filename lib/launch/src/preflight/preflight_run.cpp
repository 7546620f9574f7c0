#include "trainrun/launch/preflight/preflight_run.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/launch/core/file_io.hpp"
#include "trainrun/launch/preflight/local_offer.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"

namespace trainrun::launch {

std::shared_ptr<PreflightRun> PreflightRun::start(boost::asio::io_context& io, PreflightJob job,
                                                  Done done) {
  auto run = std::make_shared<PreflightRun>(io, std::move(job), std::move(done));
  run->begin();
  return run;
}

PreflightRun::PreflightRun(boost::asio::io_context& io, PreflightJob job, Done done)
    : io_(io), job_(std::move(job)), done_(std::move(done)) {}

void PreflightRun::begin() {
  std::weak_ptr<PreflightRun> weak = shared_from_this();
  const auto& a = job_.assignment;
  // MASTER_PORT is checked where both ends know how (an older group rank 0 does not open it).
  const auto checks_master_port = [this](const rendezvous::PreflightPeer& peer) {
    return job_.mine.master_check && peer.group_rank == 0 && peer.offer.master_check;
  };
  const bool master_wait =
      job_.mine.master_check && job_.me.group_rank == 0 && a.master_port_checks > 0;
  const auto master_links =
      std::count_if(a.preflight.begin(), a.preflight.end(), checks_master_port);
  pending_ = 1 + static_cast<int>(a.preflight.size() + master_links) + (master_wait ? 1 : 0);
  if (master_wait) {
    const auto bound = 2 * job_.timeout;
    master_wait_ = wait_for_master_checks(
        io_, a.master_port, job_.mine.id, a.master_port_checks, bound,
        [weak, bound](int checked, std::string problem) {
          auto self = weak.lock();
          if (!self || self->over_) return;
          const auto& a = self->job_.assignment;
          self->master_port_ =
              master_port_finding(self->job_.me, a.master_addr, a.master_port, a.master_port_checks,
                                  checked, bound.count() / 1000.0, problem);
          self->one_done();
        });
  }
  lookup_ = resolve_name(io_, a.master_addr,
                         [weak](std::vector<std::string> addresses, std::string problem) {
                           auto self = weak.lock();
                           if (!self || self->over_) return;
                           self->master_resolved_ = std::move(addresses);
                           self->master_problem_ = std::move(problem);
                           self->one_done();
                         });
  for (const auto& peer : a.preflight) {
    LinkCheck link;
    link.peer = peer;
    // Group rank 0 is reached by MASTER_ADDR, as every worker reaches its store.
    link.via_master_addr = peer.group_rank == 0;
    link.target = link.via_master_addr ? a.master_addr : peer.addr;
    const auto done = [weak](LinkCheck checked) {
      auto self = weak.lock();
      if (!self || self->over_) return;
      self->links_.push_back(std::move(checked));
      self->one_done();
    };
    if (checks_master_port(peer)) {
      // Where every worker will reach the store; the reply names this node to group rank 0.
      LinkCheck master = link;
      master.master_port = a.master_port;
      probes_.push_back(probe_link(io_, std::move(master), job_.timeout, done,
                                   preflight_greeting(job_.mine.id, unix_time())));
    }
    probes_.push_back(probe_link(io_, std::move(link), job_.timeout, done));
  }
}

void PreflightRun::cancel() {
  over_ = true;
  for (auto& p : probes_) launch::cancel(*p);
  if (lookup_) launch::cancel(*lookup_);
  if (master_wait_) launch::cancel(*master_wait_);
}

void PreflightRun::one_done() {
  if (--pending_ > 0) return;
  over_ = true;
  std::vector<PreflightFinding> out =
      consistency_findings(job_.me, job_.mine, job_.assignment.preflight, job_.mode);
  bool master_elsewhere = false;
  for (const auto& p : job_.assignment.preflight)
    if (p.group_rank == 0 && p.offer.network != job_.mine.network) master_elsewhere = true;
  // Group rank 0 itself: MASTER_ADDR is its own, and the others run elsewhere.
  if (job_.me.group_rank == 0)
    for (const auto& p : job_.assignment.preflight)
      if (p.offer.network != job_.mine.network) master_elsewhere = true;
  if (auto f = master_addr_finding(job_.me, job_.assignment.master_addr, master_resolved_,
                                   master_problem_, master_elsewhere))
    out.push_back(std::move(*f));
  const std::string range = ephemeral_port_range();
  for (const auto& link : links_) {
    if (auto f = link_finding(job_.me, link, range)) out.push_back(std::move(*f));
    if (auto f = clock_finding(job_.me, link)) out.push_back(std::move(*f));
  }
  if (master_port_) out.push_back(std::move(*master_port_));
  if (auto f = log_dir_finding(job_.me.host, job_.log_dir)) out.push_back(std::move(*f));
  auto done = std::move(done_);
  done(std::move(out));
}

std::optional<PreflightFinding> log_dir_finding(const std::string& host, const std::string& dir) {
  const std::string probe = dir + "/.preflight-" + random_hex(8);
  try {
    write_file_atomically(probe, "trainrun preflight\n", /*durable=*/false);
  } catch (const std::exception& e) {
    return PreflightFinding{
        true, fmt::format("the log directory {} is not writable on {}: {}; the workers' logs and "
                          "error files go there: choose another with --log-dir",
                          escape_control(dir), escape_control(host), e.what())};
  }
  ::unlink(probe.c_str());
  return std::nullopt;
}

}  // namespace trainrun::launch
