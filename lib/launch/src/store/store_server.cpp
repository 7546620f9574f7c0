#include "trainrun/launch/store/store_server.hpp"

#include <fmt/format.h>

#include <array>
#include <boost/asio/write.hpp>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/listen.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// A client that does not read its replies stops being read once this much waits for it.
constexpr std::size_t kPauseBytes = 16 * 1024 * 1024;
// Lines about malformed requests said in a job; a port scanner cannot flood the terminal.
constexpr int kMalformedShown = 10;

std::string peer_of(const tcp::socket& s) {
  boost::system::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  if (ec) return "a client";
  auto address = ep.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) address = address.to_v6().to_v4();
  return fmt::format("{}:{}", address.to_string(), ep.port());
}

}  // namespace

class StoreServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(StoreServer& server, StoreClient id, tcp::socket socket)
      : server_(server),
        id_(id),
        socket_(std::move(socket)),
        peer_(peer_of(socket_)),
        decoder_(server.limits_) {}

  void start() {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    read();
  }

  void send(const std::string& bytes) {
    pending_ += bytes;
    write();
  }

  void close() {
    closed_ = true;
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  const std::string& peer() const { return peer_; }
  StoreClient id() const { return id_; }

 private:
  void read() {
    if (closed_ || reading_) return;
    if (pending_.size() + writing_.size() > kPauseBytes) return;  // resumed once written
    reading_ = true;
    socket_.async_read_some(asio::buffer(in_), [self = shared_from_this()](
                                                   boost::system::error_code ec, std::size_t n) {
      self->reading_ = false;
      if (self->closed_) return;
      if (ec) return self->server_.drop(self->id_);
      self->decoder_.feed(self->in_.data(), n);
      try {
        while (auto request = self->decoder_.next()) {
          self->server_.take(self->id_, *request);
          if (self->closed_) return;
        }
      } catch (const StoreError& e) {
        return self->server_.refuse(*self, e);
      }
      self->read();
    });
  }

  void write() {
    if (closed_ || !writing_.empty() || pending_.empty()) return;
    writing_.swap(pending_);
    asio::async_write(socket_, asio::buffer(writing_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        self->writing_.clear();
                        if (self->closed_) return;
                        if (ec) return self->server_.drop(self->id_);
                        self->write();
                        self->read();
                      });
  }

  StoreServer& server_;
  StoreClient id_;
  tcp::socket socket_;
  std::string peer_;
  StoreRequestDecoder decoder_;
  std::array<char, 64 * 1024> in_{};
  std::string pending_;  // replies not yet handed to the socket
  std::string writing_;  // the write in flight
  bool reading_ = false;
  bool closed_ = false;
};

StoreServer::StoreServer(asio::io_context& io, Say say, const StoreLimits& limits)
    : say_(std::move(say)), limits_(limits), data_(limits), acceptor_(io) {}

StoreServer::~StoreServer() { close(); }

void StoreServer::open(int port) {
  if (acceptor_.is_open()) return;
  // As torch's server: every IPv6 and IPv4 address where the host has IPv6, else every IPv4 one.
  boost::system::error_code ec =
      listen_on_every_address(acceptor_, static_cast<unsigned short>(port), true);
  if (ec)
    throw SetupError(
        fmt::format("the workers' c10d store cannot listen on port {}: {}", port, ec.message()));
  port_ = acceptor_.local_endpoint(ec).port();
  accept();
}

void StoreServer::stop_accepting() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void StoreServer::close() {
  stop_accepting();
  auto connections = std::move(connections_);
  connections_.clear();
  for (auto& [id, c] : connections) {
    data_.forget(id);
    c->close();
  }
}

void StoreServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (connections_.size() >= limits_.max_connections) {
        if (!connections_bound_said_)
          say_(fmt::format("c10d store: refused a connection from {}: it serves at most {} "
                           "connections at once",
                           peer_of(socket), limits_.max_connections),
               Level::warning);
        connections_bound_said_ = true;
        boost::system::error_code ignored;
        socket.close(ignored);
      } else {
        const StoreClient id = next_client_++;
        auto c = std::make_shared<Connection>(*this, id, std::move(socket));
        connections_.emplace(id, c);
        c->start();
      }
    }
    accept();
  });
}

void StoreServer::take(StoreClient client, const StoreRequest& request) {
  for (const StoreReply& reply : data_.handle(client, request)) {
    auto it = connections_.find(reply.client);
    if (it != connections_.end()) it->second->send(reply.bytes);
  }
}

void StoreServer::refuse(Connection& c, const StoreError& e) {
  const std::string line =
      fmt::format("c10d store: closed the connection from {}: {}", c.peer(), e.what());
  if (e.fault() != StoreFault::malformed) {
    if (bounds_said_.insert(e.fault()).second) say_(line, Level::warning);
  } else if (malformed_said_ < kMalformedShown) {
    ++malformed_said_;
    say_(line + (malformed_said_ == kMalformedShown ? " (further such lines are not shown)" : ""),
         Level::warning);
  }
  drop(c.id());  // `c` is kept alive by the read handler that called here
}

void StoreServer::drop(StoreClient client) {
  auto it = connections_.find(client);
  if (it == connections_.end()) return;
  auto c = it->second;
  connections_.erase(it);
  data_.forget(client);
  c->close();
}

}  // namespace trainrun::launch
