#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/launch/preflight/preflight_checks.hpp"

namespace trainrun::launch {

// The agent's preflight port: listens on an ephemeral port (the range the process group's own
// listeners come from) for the job's life, and answers every connection with its greeting (its
// offer's id and its wall clock), then closes. Never blocks the loop.
class PreflightListener {
 public:
  // Throws boost::system::system_error when no port can be opened.
  PreflightListener(boost::asio::io_context& io, std::string id);
  ~PreflightListener();
  int port() const { return port_; }

 private:
  void accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  std::string id_;
  int port_ = 0;
};

// Connects to `link.target`:link_port(link) and reads the greeting, all within `timeout`; `done`
// gets `link` with its outcome and the peer's clock offset. `reply`, when not empty, is written
// back once the greeting is read (the line that names this node to group rank 0 on MASTER_PORT).
// A link to MASTER_PORT is tried again while refused: group rank 0 opens it when its own
// assignment comes, which may be a moment after ours. Cancelled with the returned handle (done is
// not called).
class LinkProbe;
std::shared_ptr<LinkProbe> probe_link(boost::asio::io_context& io, LinkCheck link,
                                      std::chrono::milliseconds timeout,
                                      std::function<void(LinkCheck)> done, std::string reply = {});
void cancel(LinkProbe& probe);

// Group rank 0's side of the MASTER_PORT check: listens on `port` beside the port held for the
// workers (SO_REUSEADDR, as their store does), answers each connection with the greeting of
// `id` and reads back the line that names the node. `done` gets how many distinct nodes did,
// once `expected` have or at `timeout`, and why the port could not be listened on ("" when it
// could); the port is closed before, so the workers' store can take it. Cancelled with the
// returned handle (done is not called).
class MasterPortWait;
std::shared_ptr<MasterPortWait> wait_for_master_checks(
    boost::asio::io_context& io, int port, std::string id, int expected,
    std::chrono::milliseconds timeout, std::function<void(int checked, std::string problem)> done);
void cancel(MasterPortWait& wait);

// MASTER_ADDR resolved here, without blocking the loop: the literal addresses, or why none.
class NameLookup;
std::shared_ptr<NameLookup> resolve_name(
    boost::asio::io_context& io, const std::string& name,
    std::function<void(std::vector<std::string> addresses, std::string problem)> done);
void cancel(NameLookup& lookup);

}  // namespace trainrun::launch
