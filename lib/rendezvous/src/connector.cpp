#include "connector.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/connect.hpp>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/endpoint.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

Stop unreachable_stop(const std::string& endpoint, Clock::duration deadline, int connections,
                      const std::string& tried) {
  // Every distinct failure, not only the last: a refusal followed by failed handshakes says the
  // host started and something else went wrong.
  if (connections == 0) {
    return Stop{StopCause::join_timeout,
                fmt::format("rendezvous endpoint {} not reachable after {:.0f} s ({})", endpoint,
                            in_seconds(deadline), tried),
                Refusal::unreachable};
  }
  return Stop{
      StopCause::join_timeout,
      fmt::format("rendezvous endpoint {}: no handshake completed in {:.0f} s ({}; {})", endpoint,
                  in_seconds(deadline), count_of(connections, "connection"), tried),
      Refusal::no_handshake};
}

Connector::Connector(asio::io_context& io, ClientOptions options, Connected on_connected,
                     GaveUp on_gave_up)
    : io_(io),
      options_(std::move(options)),
      on_connected_(std::move(on_connected)),
      on_gave_up_(std::move(on_gave_up)),
      resolver_(io),
      timer_(io),
      backoff_(options_.retry.backoff, options_.deadline) {}

std::string Connector::endpoint() const { return to_string(options_.endpoint); }

void Connector::start() {
  started_at_ = Clock::now();
  backoff_.start(started_at_);
  attempt();
}

void Connector::attempt() {
  active_ = true;
  attempt_timed_out_ = false;
  std::weak_ptr<Connector> weak = shared_from_this();
  timer_.expires_after(options_.connection.attempt_timeout);
  timer_.async_wait([weak](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || !self->active_) return;
    self->attempt_timed_out_ = true;
    self->resolver_.cancel();
    if (self->socket_) self->socket_->close();
  });
  resolver_.async_resolve(
      options_.endpoint.host, std::to_string(options_.endpoint.port),
      [weak](error_code ec, tcp::resolver::results_type results) {
        auto self = weak.lock();
        if (!self || !self->active_) return;
        if (ec) {
          return self->retry(
              self->attempt_timed_out_
                  ? fmt::format("resolving {} took longer than {:.0f} s",
                                self->options_.endpoint.host,
                                in_seconds(self->options_.connection.attempt_timeout))
                  : fmt::format("cannot resolve {}: {}", self->options_.endpoint.host,
                                ec.message()));
        }
        self->socket_ = std::make_unique<tcp::socket>(self->io_);
        asio::async_connect(*self->socket_, results, [weak](error_code ec2, const tcp::endpoint&) {
          auto self2 = weak.lock();
          if (!self2 || !self2->active_) return;
          if (ec2) return self2->on_connect_failed(ec2);
          self2->timer_.cancel();
          self2->active_ = false;
          ++self2->connections_;
          tcp::socket socket = std::move(*self2->socket_);
          self2->socket_.reset();
          self2->on_connected_(std::move(socket));
        });
      });
}

void Connector::on_connect_failed(const error_code& ec) {
  if (attempt_timed_out_) {
    return retry(fmt::format("no answer to connecting within {:.0f} s",
                             in_seconds(options_.connection.attempt_timeout)));
  }
  // Refused while this machine cannot bind the port: whatever holds it does not listen, so no
  // trainrun agent hosts the endpoint. The grace covers a hosting agent caught between its bind
  // and its listen.
  if (ec == asio::error::connection_refused && options_.local_port_held) {
    Clock::time_point judge_at =
        started_at_ + std::min(options_.connection.refused_grace, options_.deadline);
    if (Clock::now() < judge_at) return retry(ec.message(), judge_at);
    if (std::optional<std::string> bind_error = options_.local_port_held()) {
      return give_up(Stop{StopCause::rejected,
                          fmt::format("rendezvous endpoint {}: the port is in use by another "
                                      "process that is not a trainrun rendezvous host (bind: {}; "
                                      "connect: {})",
                                      endpoint(), *bind_error, ec.message()),
                          Refusal::port_held});
    }
  }
  retry(ec.message());
}

void Connector::retry(const std::string& why, std::optional<Clock::time_point> by) {
  timer_.cancel();
  socket_.reset();
  auto now = Clock::now();
  std::optional<Clock::duration> wait = backoff_.failed(why, now);
  if (!wait) {
    return give_up(
        unreachable_stop(endpoint(), options_.deadline, connections_, backoff_.summary()));
  }
  if (!last_retry_log_ || now - *last_retry_log_ >= options_.retry.log_interval) {
    if (options_.log) {
      // Said where it matters: a node that cannot reach a loopback endpoint may be on another
      // machine than the host it means (every node on one machine reaches it).
      const std::string loopback =
          is_loopback_host(options_.endpoint.host)
              ? fmt::format(
                    "; {} is a loopback address: only an agent on this machine can host "
                    "it, give nodes on other machines an address they reach",
                    options_.endpoint.host)
              : "";
      options_.log(fmt::format("rendezvous endpoint {} not reachable yet ({}), retrying{}",
                               endpoint(), why, loopback));
    }
    last_retry_log_ = now;
  }
  if (by) wait = std::max(Clock::duration::zero(), std::min(*wait, *by - now));
  active_ = true;
  timer_.expires_after(*wait);
  timer_.async_wait([weak = std::weak_ptr<Connector>(shared_from_this())](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || !self->active_) return;
    self->attempt();
  });
}

void Connector::give_up(const Stop& stop) {
  cancel();
  on_gave_up_(stop);
}

void Connector::cancel() {
  active_ = false;
  timer_.cancel();
  resolver_.cancel();
  if (socket_) {
    error_code ignored;
    socket_->close(ignored);
  }
}

}  // namespace trainrun::rendezvous
