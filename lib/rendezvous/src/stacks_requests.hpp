#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// A client's open asks for the other nodes' stacks through the host (trainrun --stacks): each
// answered once, on the io_context: when the host ends it, after `bound` where the host never
// does, or when the connection ends.
class StacksRequests {
 public:
  explicit StacksRequests(boost::asio::io_context& io) : io_(io) {}
  ~StacksRequests() { abandon(); }
  StacksRequests(const StacksRequests&) = delete;
  StacksRequests& operator=(const StacksRequests&) = delete;

  // A new request; its id, for the StacksRequest sent to the host.
  std::uint64_t open(StacksDone done, Clock::duration bound);
  // One node's answer, kept for the end.
  void answer(const StacksAnswer& answer);
  // The host ended the request: `done` with the answers kept.
  void finish(std::uint64_t id, const std::vector<StacksMissing>& missing,
              const std::string& error);
  // The connection ended: every open request is answered with an error. Posted, not called:
  // this runs in destructors too, where calling back could reach freed state.
  void abandon();

 private:
  struct Request {
    StacksDone done;
    std::vector<std::string> answers;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  boost::asio::io_context& io_;
  std::map<std::uint64_t, Request> requests_;
  std::uint64_t next_id_ = 1;
  // A timer that had already fired when this was destroyed still runs its function.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace trainrun::rendezvous
