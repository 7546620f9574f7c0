#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainrun::launch {

// The agent's end of the --preload template's socket (warm_start.hpp): a request sent whole with
// its descriptors, and each of the template's messages (a tag byte, a little-endian 32-bit size,
// a text) read as an event on the loop, never waited for: the bytes are taken as they come, and
// the loop goes on meanwhile (the job's store, the rendezvous).
class TemplateSocket {
 public:
  using Message = std::pair<char, std::string>;
  // nullopt: the template closed its end, sent what is no message, or said nothing in time.
  using Then = std::function<void(std::optional<Message>)>;

  // `fd` is ours from now on, closed with this.
  TemplateSocket(boost::asio::io_context& io, int fd);
  ~TemplateSocket();
  TemplateSocket(const TemplateSocket&) = delete;
  TemplateSocket& operator=(const TemplateSocket&) = delete;

  // Sends `data`, its first byte with `fds` (SCM_RIGHTS); false when the template is gone. The
  // template reads a request as soon as it is idle (it is, between replies), so a request larger
  // than the socket's buffer waits only for that read.
  bool send(const std::string& data, const std::vector<int>& fds);
  // Reads the next message: `then` runs once, later on the loop, with it or with nullopt (after
  // `limit`, where there is one). Never runs once this is destroyed.
  void next(Then then, std::optional<std::chrono::milliseconds> limit = std::nullopt);
  // Whether an idle template sent something or closed its end (it ended): a look, not a wait.
  bool stirred() const;

 private:
  void wait();
  void readable();
  void finish(std::optional<Message> message);

  int fd_;
  boost::asio::posix::stream_descriptor watch_;
  boost::asio::steady_timer timer_;
  std::string got_;  // the message's bytes so far
  Then then_;
  // Handlers hold it weakly: one whose completion was queued before this went finds it gone.
  std::shared_ptr<int> alive_ = std::make_shared<int>();
  unsigned serial_ = 0;  // each next(): a wait or a limit of an earlier one is dropped
};

}  // namespace trainrun::launch
