#include "trainrun/rendezvous/listener.hpp"

#include <fcntl.h>

#include "trainrun/base/system.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
}  // namespace

Listener::Listener(asio::io_context& io, Accepted on_accepted, Failed on_failed)
    : acceptor_(io),
      retry_timer_(io),
      on_accepted_(std::move(on_accepted)),
      on_failed_(std::move(on_failed)) {}

void Listener::listen(const tcp::endpoint& endpoint) {
  acceptor_.open(endpoint.protocol());
  int fd = acceptor_.native_handle();
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  acceptor_.set_option(tcp::acceptor::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(trainrun::kListenBacklog);
  accept_next();
}

void Listener::listen(tcp::acceptor acceptor) {
  acceptor_ = std::move(acceptor);
  int fd = acceptor_.native_handle();
  ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
  accept_next();
}

void Listener::accept_next() {
  acceptor_.async_accept([self = shared_from_this()](error_code ec, tcp::socket socket) {
    if (self->closed_) return;
    if (ec) {
      // EMFILE and friends: back off briefly instead of spinning on a failing accept.
      if (self->on_failed_) self->on_failed_(ec);
      if (self->closed_) return;
      self->retry_timer_.expires_after(kAcceptRetry);
      self->retry_timer_.async_wait([self](error_code e) {
        if (!e && !self->closed_) self->accept_next();
      });
      return;
    }
    self->on_accepted_(std::move(socket));
    self->accept_next();
  });
}

void Listener::close() {
  closed_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
}

}  // namespace trainrun::rendezvous
