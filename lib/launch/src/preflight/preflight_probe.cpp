#include "trainrun/launch/preflight/preflight_probe.hpp"

#include <fmt/format.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/system_error.hpp>
#include <istream>
#include <set>

#include "trainrun/base/system.hpp"
#include "trainrun/launch/core/listen.hpp"
#include "trainrun/rendezvous/backoff.hpp"

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
  LinkProbe(asio::io_context& io, LinkCheck link, std::function<void(LinkCheck)> done,
            std::string reply, std::chrono::milliseconds timeout)
      : resolver_(io),
        socket_(io),
        timer_(io),
        retry_timer_(io),
        link_(std::move(link)),
        done_(std::move(done)),
        reply_(std::move(reply)),
        backoff_(kRetryRefused, timeout) {}

  void start(std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    timer_.expires_after(timeout);
    timer_.async_wait([self, timeout](error_code ec) {
      if (ec) return;
      const std::string bound = fmt::format("{} s", timeout.count() / 1000.0);
      if (self->refused_)
        return self->finish(LinkOutcome::refused, bound + ", " + self->backoff_.summary());
      self->finish(LinkOutcome::timed_out,
                   bound + (self->connected_ ? ", connected but no greeting" : ""));
    });
    resolver_.async_resolve(link_.target, std::to_string(link_port(link_)),
                            [self](error_code ec, tcp::resolver::results_type results) {
                              if (self->over_) return;
                              if (ec) return self->finish(LinkOutcome::resolve, ec.message());
                              self->endpoints_ = std::move(results);
                              self->connect();
                            });
  }

  void cancel() {
    over_ = true;
    stop();
  }

 private:
  // Retries of a refused MASTER_PORT: soon, as group rank 0 is about to open it.
  static constexpr rendezvous::BackoffOptions kRetryRefused{std::chrono::milliseconds(50),
                                                            std::chrono::seconds(1), 2, 0.5};

  void connect() {
    auto self = shared_from_this();
    asio::async_connect(socket_, endpoints_, [self](error_code ec, const tcp::endpoint&) {
      if (self->over_) return;
      if (ec == asio::error::connection_refused && self->link_.master_port) {
        self->refused_ = true;
        if (auto wait = self->backoff_.failed(ec.message(), rendezvous::Clock::now())) {
          self->retry_timer_.expires_after(*wait);
          self->retry_timer_.async_wait([self](error_code ec) {
            if (!ec && !self->over_) self->connect();
          });
          return;
        }
        return self->finish(LinkOutcome::refused, self->backoff_.summary());
      }
      if (ec) return self->finish(outcome_of(ec), ec.message());
      self->refused_ = false;
      self->connected_ = true;
      self->sent_ = unix_time();
      asio::async_read_until(self->socket_, self->input_, '\n',
                             [self](error_code ec, std::size_t) { self->greeted(ec); });
    });
  }

  void greeted(const error_code& ec) {
    if (over_) return;
    if (ec) return finish(LinkOutcome::wrong_peer, "no greeting: " + ec.message());
    std::istream in(&input_);
    std::string line;
    std::getline(in, line);
    const auto greeting = parse_preflight_greeting(line);
    if (!greeting || greeting->id != link_.peer.offer.id)
      return finish(LinkOutcome::wrong_peer, "");
    // Read once per peer: the MASTER_PORT check leaves it to the preflight port's answer.
    if (!link_.master_port) link_.clock_offset_s = clock_offset(greeting->time, sent_, unix_time());
    if (reply_.empty()) return finish(LinkOutcome::ok, "");
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(reply_), [self](error_code ec, std::size_t) {
      if (self->over_) return;
      if (ec) return self->finish(LinkOutcome::other, "the reply: " + ec.message());
      self->finish(LinkOutcome::ok, "");
    });
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
    retry_timer_.cancel();
    socket_.close(ignored);
  }

  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::steady_timer retry_timer_;
  tcp::resolver::results_type endpoints_;
  asio::streambuf input_{kMaxGreeting};
  LinkCheck link_;
  std::function<void(LinkCheck)> done_;
  std::string reply_;
  rendezvous::Backoff backoff_;
  bool over_ = false;
  bool connected_ = false;
  bool refused_ = false;  // the last attempt was refused
  double sent_ = 0;
};

std::shared_ptr<LinkProbe> probe_link(asio::io_context& io, LinkCheck link,
                                      std::chrono::milliseconds timeout,
                                      std::function<void(LinkCheck)> done, std::string reply) {
  auto probe =
      std::make_shared<LinkProbe>(io, std::move(link), std::move(done), std::move(reply), timeout);
  probe->start(timeout);
  return probe;
}

void cancel(LinkProbe& probe) { probe.cancel(); }

class MasterPortWait : public std::enable_shared_from_this<MasterPortWait> {
 public:
  using Done = std::function<void(int, std::string)>;
  MasterPortWait(asio::io_context& io, std::string id, int expected, Done done)
      : io_(io),
        acceptor_(io),
        timer_(io),
        id_(std::move(id)),
        expected_(static_cast<std::size_t>(expected)),
        done_(std::move(done)) {}

  void start(int port, std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    // SO_REUSEADDR: the port is bound, not listening, by the agent that holds it for the workers.
    if (const error_code ec =
            listen_on_every_address(acceptor_, static_cast<unsigned short>(port), true)) {
      // Not from inside the caller's start.
      asio::post(io_, [self, why = ec.message()] { self->finish(why); });
      return;
    }
    timer_.expires_after(timeout);
    timer_.async_wait([self](error_code ec) {
      if (!ec) self->finish("");
    });
    accept();
  }

  void cancel() {
    over_ = true;
    stop();
  }

 private:
  struct Checker {
    explicit Checker(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    std::string greeting;
    asio::streambuf input{kMaxGreeting};
  };

  void accept() {
    auto self = shared_from_this();
    acceptor_.async_accept([self](error_code ec, tcp::socket socket) {
      if (self->over_ || ec == asio::error::operation_aborted) return;
      if (!ec) self->greet(std::make_shared<Checker>(std::move(socket)));
      self->accept();
    });
  }

  void greet(std::shared_ptr<Checker> c) {
    auto self = shared_from_this();
    checkers_.push_back(c);
    c->greeting = preflight_greeting(id_, unix_time());
    asio::async_write(c->socket, asio::buffer(c->greeting), [self, c](error_code ec, std::size_t) {
      if (self->over_ || ec) return;
      asio::async_read_until(c->socket, c->input, '\n', [self, c](error_code ec, std::size_t) {
        if (self->over_ || ec) return;
        std::istream in(&c->input);
        std::string line;
        std::getline(in, line);
        error_code ignored;
        c->socket.close(ignored);
        if (const auto node = parse_preflight_greeting(line)) self->checked_.insert(node->id);
        if (self->checked_.size() >= self->expected_) self->finish("");
      });
    });
  }

  void finish(std::string problem) {
    if (over_) return;
    over_ = true;
    stop();
    done_(static_cast<int>(checked_.size()), std::move(problem));
  }

  void stop() {
    error_code ignored;
    acceptor_.close(ignored);
    timer_.cancel();
    for (auto& c : checkers_) c->socket.close(ignored);
    checkers_.clear();
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  asio::steady_timer timer_;
  std::string id_;
  std::size_t expected_;
  Done done_;
  std::vector<std::shared_ptr<Checker>> checkers_;
  std::set<std::string> checked_;  // the ids of the nodes that checked the port
  bool over_ = false;
};

std::shared_ptr<MasterPortWait> wait_for_master_checks(asio::io_context& io, int port,
                                                       std::string id, int expected,
                                                       std::chrono::milliseconds timeout,
                                                       std::function<void(int, std::string)> done) {
  auto wait = std::make_shared<MasterPortWait>(io, std::move(id), expected, std::move(done));
  wait->start(port, timeout);
  return wait;
}

void cancel(MasterPortWait& wait) { wait.cancel(); }

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
