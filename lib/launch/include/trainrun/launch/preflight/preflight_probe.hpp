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

// Connects to `link.target`:`link.peer.offer.port` and reads the greeting, all within
// `timeout`; `done` gets `link` with its outcome and the peer's clock offset. `resolved` gets
// the addresses the target resolved to. Cancelled with the returned handle (done is not called).
class LinkProbe;
std::shared_ptr<LinkProbe> probe_link(boost::asio::io_context& io, LinkCheck link,
                                      std::chrono::milliseconds timeout,
                                      std::function<void(LinkCheck)> done);
void cancel(LinkProbe& probe);

// MASTER_ADDR resolved here, without blocking the loop: the literal addresses, or why none.
class NameLookup;
std::shared_ptr<NameLookup> resolve_name(
    boost::asio::io_context& io, const std::string& name,
    std::function<void(std::vector<std::string> addresses, std::string problem)> done);
void cancel(NameLookup& lookup);

}  // namespace trainrun::launch
