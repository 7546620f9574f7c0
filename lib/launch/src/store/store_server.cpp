#include "trainrun/launch/store/store_server.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include "trainrun/launch/core/errors.hpp"
#include "trainrun/launch/core/listen.hpp"

namespace trainrun::launch {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Lines about malformed requests said in a job; a port scanner cannot flood the terminal.
constexpr int kMalformedShown = 10;
// Freed by closed connections, this much goes back to the system at once.
constexpr std::size_t kReturnedBytes = 4 * 1024 * 1024;
// Connections from addresses not admitted: one line per interval (the first always), as the
// rendezvous says its refusals.
constexpr auto kRefusalLogInterval = std::chrono::seconds(10);
constexpr const char* kNotANode = "not a node of this job";

std::string peer_text(const tcp::endpoint& ep) {
  const auto address = comparable_address(ep.address());
  return fmt::format(address.is_v6() ? "[{}]:{}" : "{}:{}", address.to_string(), ep.port());
}

std::string peer_of(const tcp::socket& s) {
  boost::system::error_code ec;
  const auto ep = s.remote_endpoint(ec);
  return ec ? "a client" : peer_text(ep);
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
    socket_.non_blocking(true, ec);
    read();
  }

  void send(std::string bytes) {
    if (closed_) return;
    if (pending_.empty())
      pending_ = std::move(bytes);
    else
      pending_ += bytes;
    write();
    charge();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    server_.data_.budget().resize(held_, 0);
    decoder_ = StoreRequestDecoder();
    pending_ = std::string();
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  const std::string& peer() const { return peer_; }
  StoreClient id() const { return id_; }

 private:
  std::size_t unsent() const { return pending_.size() + writing_.size(); }
  // A client that does not read its replies is neither served nor read until it does.
  bool paused() const { return unsent() >= server_.limits_.max_unsent_bytes; }

  // The whole requests that have come, while the client reads its replies; then more bytes.
  void serve() {
    try {
      while (!closed_ && !paused()) {
        std::optional<StoreRequest> request = decoder_.next();
        if (!charge()) return;
        if (!request) break;
        if (!served_) first_request();
        server_.take(id_, std::move(*request));
      }
    } catch (const StoreError& e) {
      return server_.refuse(*this, e);
    }
    read();
  }

  void first_request() {
    served_ = true;
    if (!server_.first_request_) return;
    boost::system::error_code peer_ec, local_ec;
    const auto peer = socket_.remote_endpoint(peer_ec);
    const auto local = socket_.local_endpoint(local_ec);
    if (!peer_ec && !local_ec) server_.first_request_(peer, local);
  }

  // Reads what has come. A request is read into the connection's own small buffer: asio tries
  // the read at once and otherwise waits for the socket without touching the loop's epoll set
  // (a wait for readability alone re-arms it, an epoll_ctl for every request). A request longer
  // than that buffer: at most the server's one buffer more at once, into it; the rest at the next
  // read, after the store has charged what came.
  void read() {
    if (closed_ || reading_ || paused()) return;
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(small_),
        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          if (!ec) {
            self->decoder_.feed(self->small_.data(), n);
            if (n == self->small_.size()) {
              n = self->socket_.read_some(asio::buffer(self->server_.in_), ec);
              if (ec == asio::error::would_block)
                ec = {};
              else if (!ec)
                self->decoder_.feed(self->server_.in_.data(), n);
            }
          }
          if (ec) return self->server_.drop(self->id_);
          self->serve();
        });
  }

  void write() {
    if (closed_ || !writing_.empty() || pending_.empty()) return;
    // Most replies fit the socket's buffer: handed to it here (the socket does not block), with
    // no completion handler queued on the loop for each.
    const bool was_paused = paused();
    boost::system::error_code ec;
    const std::size_t n = socket_.write_some(asio::buffer(pending_), ec);
    if (!ec && n == pending_.size()) {
      pending_ = std::string();  // its memory goes back now, not at the next reply
      // A client that had too much unsent is served again, from the loop (not from within the
      // request whose reply this may be).
      if (was_paused)
        asio::post(socket_.get_executor(), [self = shared_from_this()] { self->serve(); });
      return;
    }
    if (!ec) pending_.erase(0, n);
    // The rest when the socket takes it; an error, other than would-block, is the handler's.
    writing_.swap(pending_);
    asio::async_write(socket_, asio::buffer(writing_),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        // Its memory goes back now, not at the next reply.
                        self->writing_ = std::string();
                        if (self->closed_) return;
                        if (ec) return self->server_.drop(self->id_);
                        self->charge();
                        self->write();
                        self->serve();
                      });
  }

  // What this connection holds, charged to the store's one budget. Past the bound, the
  // connection is closed: false.
  bool charge() {
    if (closed_) return false;
    auto& budget = server_.data_.budget();
    const std::size_t now =
        decoder_.held() + pending_.capacity() + (writing_.empty() ? 0 : writing_.capacity());
    if (budget.resize(held_, now)) return true;
    server_.refuse(*this, held_bound_error(budget.used() - held_ + now, budget.limit()));
    return false;
  }

  StoreServer& server_;
  StoreClient id_;
  tcp::socket socket_;
  std::string peer_;
  StoreRequestDecoder decoder_;
  std::array<char, 512> small_{};  // a request's bytes as they come (the server's in_ beyond)
  std::string pending_;   // replies not yet handed to the socket
  std::string writing_;   // the write in flight
  std::size_t held_ = 0;  // charged to the budget
  bool reading_ = false;
  bool closed_ = false;
  bool served_ = false;  // its first request has come
};

StoreServer::StoreServer(asio::io_context& io, Say say, const StoreLimits& limits,
                         FirstRequest first_request)
    : io_(io),
      say_(std::move(say)),
      first_request_(std::move(first_request)),
      limits_(limits),
      data_(limits),
      refusals_(kRefusalLogInterval),
      refusal_timer_(io) {}

StoreServer::~StoreServer() { close(); }

void StoreServer::open(int port) {
  if (listener_) return;
  // As torch's server: every IPv6 and IPv4 address where the host has IPv6, else every IPv4 one.
  tcp::acceptor acceptor(io_);
  boost::system::error_code ec =
      listen_on_every_address(acceptor, static_cast<unsigned short>(port), true);
  if (ec)
    throw SetupError(
        fmt::format("the workers' c10d store cannot listen on port {}: {}", port, ec.message()));
  port_ = acceptor.local_endpoint(ec).port();
  listener_ = std::make_shared<rendezvous::Listener>(
      io_, [this](tcp::socket socket) { admit(std::move(socket)); },
      [this](const boost::system::error_code& e) { accept_failed(e); });
  listener_->listen(std::move(acceptor));
}

void StoreServer::admit_only(StoreAdmission admission) {
  admission_ = std::move(admission);
  const std::string& why = admission_.open_why();
  if (why.empty() || why == open_said_) return;
  open_said_ = why;
  say_(fmt::format("c10d store: admits connections from every address: {}", why), Level::warning);
}

void StoreServer::stop_accepting() {
  if (!listener_) return;
  listener_->close();
  listener_.reset();
}

void StoreServer::close() {
  stop_accepting();
  release_refusals();
  const std::size_t before = data_.budget().used();
  auto connections = std::move(connections_);
  connections_.clear();
  for (auto& [id, c] : connections) {
    data_.forget(id);
    c->close();
  }
  freed(before);
}

void StoreServer::clear() {
  const std::size_t before = data_.budget().used();
  data_.clear();
  freed(before);
}

void StoreServer::freed(std::size_t before) {
  const std::size_t now = data_.budget().used();
  if (before > now) freed_ += before - now;
  if (freed_ < kReturnedBytes) return;
  freed_ = 0;
  // The allocator keeps what a flood of waits or requests freed for a peak that may not come
  // again; the agent gives it back.
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

void StoreServer::admit(tcp::socket socket) {
  boost::system::error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // gone already: nothing to serve, nobody to name
  if (!admission_.admits(peer.address())) return refuse_stranger(std::move(socket), peer);
  if (connections_.size() >= limits_.max_connections) {
    if (!connections_bound_said_)
      say_(fmt::format("c10d store: refused a connection from {}: it serves at most {} "
                       "connections at once",
                       peer_of(socket), limits_.max_connections),
           Level::warning);
    connections_bound_said_ = true;
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  const StoreClient id = next_client_++;
  auto c = std::make_shared<Connection>(*this, id, std::move(socket));
  connections_.emplace(id, c);
  c->start();
}

void StoreServer::refuse_stranger(tcp::socket socket, const tcp::endpoint& peer) {
  ++refused_;
  boost::system::error_code ignored;
  socket.close(ignored);
  const bool was_holding = refusals_.holding();
  if (refusals_.admit(kNotANode, std::chrono::steady_clock::now())) {
    say_(fmt::format("c10d store: refused a connection from {}: {} ({})", peer_text(peer),
                     kNotANode, admission_.admitted()),
         Level::warning);
    return;
  }
  if (was_holding) return;
  refusal_timer_.expires_at(*refusals_.due());
  refusal_timer_.async_wait([this](boost::system::error_code e) {
    if (!e) release_refusals();
  });
}

void StoreServer::release_refusals() {
  refusal_timer_.cancel();
  if (auto line = refusals_.release(std::chrono::steady_clock::now()))
    say_("c10d store: " + *line, Level::warning);
}

void StoreServer::accept_failed(const boost::system::error_code& ec) {
  if (accept_failure_said_) return;
  accept_failure_said_ = true;
  std::string why = ec.message();
  if (ec == boost::system::errc::too_many_files_open) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      why += fmt::format(" (the agent has its limit of {} open files, RLIMIT_NOFILE)",
                         static_cast<unsigned long long>(limit.rlim_cur));
  }
  say_(fmt::format("c10d store: cannot accept a connection: {}; new clients wait to be accepted "
                   "until descriptors are free",
                   why),
       Level::warning);
}

void StoreServer::take(StoreClient client, StoreRequest request) {
  for (StoreReply& reply : data_.handle(client, std::move(request))) {
    auto it = connections_.find(reply.client);
    if (it == connections_.end()) continue;
    auto c = it->second;  // alive through send, which may close it
    c->send(std::move(reply.bytes));
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
  const std::size_t before = data_.budget().used();
  auto c = it->second;
  connections_.erase(it);
  data_.forget(client);
  c->close();
  freed(before);
}

}  // namespace trainrun::launch
