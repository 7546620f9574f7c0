#include "trainrun/launch/preflight/preflight_probe.hpp"

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/system_error.hpp>
#include <istream>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/listen.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// The greeting is one short line; anything longer is not one.
constexpr std::size_t kMaxGreeting = 256;

LinkOutcome outcome_of(const error_code& ec) {
  if (ec == asio::error::connection_refused) return LinkOutcome::refused;
  if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable)
    return LinkOutcome::unreachable;
  if (ec == asio::error::timed_out) return LinkOutcome::timed_out;
  return LinkOutcome::other;
}

}  // namespace

PreflightListener::PreflightListener(asio::io_context& io, std::string id)
    : acceptor_(io), id_(std::move(id)) {
  // Both families where the kernel allows, else IPv4; the longest listen queue, as group rank 0
  // is checked by every node at once.
  if (const error_code ec = listen_on_every_address(acceptor_, 0, false))
    throw boost::system::system_error(ec, "listen");
  port_ = acceptor_.local_endpoint().port();
  accept();
}

PreflightListener::~PreflightListener() {
  error_code ec;
  acceptor_.close(ec);
}

void PreflightListener::accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      auto text = std::make_shared<std::string>(preflight_greeting(id_, unix_time()));
      asio::async_write(*s, asio::buffer(*text), [s, text](error_code, std::size_t) {
        error_code ignored;
        s->shutdown(tcp::socket::shutdown_both, ignored);
        s->close(ignored);
      });
    }
    accept();
  });
}

class LinkProbe : public std::enable_shared_from_this<LinkProbe> {
 public:
  LinkProbe(asio::io_context& io, LinkCheck link, std::function<void(LinkCheck)> done)
      : resolver_(io), socket_(io), timer_(io), link_(std::move(link)), done_(std::move(done)) {}

  void start(std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    timer_.expires_after(timeout);
    timer_.async_wait([self, timeout](error_code ec) {
      if (ec) return;
      self->finish(LinkOutcome::timed_out,
                   fmt::format("{} s{}", timeout.count() / 1000.0,
                               self->connected_ ? ", connected but no greeting" : ""));
    });
    resolver_.async_resolve(
        link_.target, std::to_string(link_.peer.offer.port),
        [self](error_code ec, tcp::resolver::results_type results) {
          if (self->over_) return;
          if (ec) return self->finish(LinkOutcome::resolve, ec.message());
          asio::async_connect(self->socket_, results, [self](error_code ec, const tcp::endpoint&) {
            if (self->over_) return;
            if (ec) return self->finish(outcome_of(ec), ec.message());
            self->connected_ = true;
            self->sent_ = unix_time();
            asio::async_read_until(self->socket_, self->input_, '\n',
                                   [self](error_code ec, std::size_t) { self->greeted(ec); });
          });
        });
  }

  void cancel() {
    over_ = true;
    stop();
  }

 private:
  void greeted(const error_code& ec) {
    if (over_) return;
    if (ec) return finish(LinkOutcome::wrong_peer, "no greeting: " + ec.message());
    std::istream in(&input_);
    std::string line;
    std::getline(in, line);
    const auto greeting = parse_preflight_greeting(line);
    if (!greeting || greeting->id != link_.peer.offer.id)
      return finish(LinkOutcome::wrong_peer, "");
    link_.clock_offset_s = clock_offset(greeting->time, sent_, unix_time());
    finish(LinkOutcome::ok, "");
  }

  void finish(LinkOutcome outcome, std::string detail) {
    if (over_) return;
    over_ = true;
    stop();
    link_.outcome = outcome;
    link_.detail = std::move(detail);
    done_(std::move(link_));
  }

  void stop() {
    error_code ignored;
    resolver_.cancel();
    timer_.cancel();
    socket_.close(ignored);
  }

  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::streambuf input_{kMaxGreeting};
  LinkCheck link_;
  std::function<void(LinkCheck)> done_;
  bool over_ = false;
  bool connected_ = false;
  double sent_ = 0;
};

std::shared_ptr<LinkProbe> probe_link(asio::io_context& io, LinkCheck link,
                                      std::chrono::milliseconds timeout,
                                      std::function<void(LinkCheck)> done) {
  auto probe = std::make_shared<LinkProbe>(io, std::move(link), std::move(done));
  probe->start(timeout);
  return probe;
}

void cancel(LinkProbe& probe) { probe.cancel(); }

class NameLookup : public std::enable_shared_from_this<NameLookup> {
 public:
  using Done = std::function<void(std::vector<std::string>, std::string)>;
  NameLookup(asio::io_context& io, Done done) : resolver_(io), done_(std::move(done)) {}

  void start(const std::string& name) {
    auto self = shared_from_this();
    resolver_.async_resolve(name, "", [self](error_code ec, tcp::resolver::results_type results) {
      if (self->over_) return;
      self->over_ = true;
      std::vector<std::string> addresses;
      if (!ec)
        for (const auto& entry : results)
          addresses.push_back(entry.endpoint().address().to_string());
      self->done_(std::move(addresses), ec ? ec.message() : "");
    });
  }
  void cancel() {
    over_ = true;
    resolver_.cancel();
  }

 private:
  tcp::resolver resolver_;
  Done done_;
  bool over_ = false;
};

std::shared_ptr<NameLookup> resolve_name(asio::io_context& io, const std::string& name,
                                         NameLookup::Done done) {
  auto lookup = std::make_shared<NameLookup>(io, std::move(done));
  lookup->start(name);
  return lookup;
}

void cancel(NameLookup& lookup) { lookup.cancel(); }

}  // namespace trainrun::launch
