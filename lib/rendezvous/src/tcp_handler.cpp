#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>

#include "trainrun/base/wording.hpp"
#include "trainrun/rendezvous/handler.hpp"
#include "trainrun/rendezvous/server.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

// Whether this process could bind `where` now, as the server does (SO_REUSEADDR); the error if
// not. Binding without listening: a client connecting meanwhile is refused, not misled. On the
// agent's own loop: asio's system executor would start a pool of threads, and one that cannot
// start (a pids limit) leaves its constructor joining the others forever.
error_code try_bind(asio::io_context& io, const tcp::endpoint& where) {
  tcp::acceptor probe(io);
  error_code ec;
  probe.open(where.protocol(), ec);
  if (!ec) probe.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) probe.bind(where, ec);
  return ec;
}

// Whether `address` is one of this machine's: something can be bound to it.
bool is_local_address(asio::io_context& io, const asio::ip::address& address) {
  return !try_bind(io, tcp::endpoint(address, 0));
}

std::string format_waiting(const Waiting& w) {
  // An elastic job may have more nodes than its minimum: "3 of 2" would read as an error.
  std::string count =
      w.min_nodes == w.max_nodes
          ? fmt::format("{} of {} joined", w.joined, w.min_nodes)
          : fmt::format("{} joined ({} to {} wanted)", w.joined, w.min_nodes, w.max_nodes);
  return fmt::format("waiting for nodes: {}, {:.0f} s of {:.0f} s", count, w.waited_s, w.timeout_s);
}

class TcpRendezvousHandler : public RendezvousHandler {
 public:
  TcpRendezvousHandler(asio::io_context& io, TcpRendezvousOptions options, LogFunction log)
      : io_(io), options_(std::move(options)), log_(std::move(log)), resolver_(io) {}

  ~TcpRendezvousHandler() override {
    client_.reset();
    if (server_) server_->close();
  }

  void start(ClientEvents events) override {
    events_ = std::move(events);
    if (options_.round.static_ranks) {
      if (options_.node_rank == 0) host_on(options_.endpoint.host, /*required=*/true);
      return connect();
    }
    if (options_.is_host) {
      if (*options_.is_host) host_on(options_.endpoint.host, true);
      return connect();
    }
    // Whether this node owns the endpoint is known only after resolving it, which must not
    // block the loop; the first try of the client waits for the answer.
    resolver_.async_resolve(options_.endpoint.host, std::to_string(options_.endpoint.port),
                            [this](error_code ec, tcp::resolver::results_type results) {
                              // Cancelled: the handler may be gone, touch nothing.
                              if (ec == asio::error::operation_aborted) return;
                              if (!ec) {
                                for (const auto& entry : results) {
                                  if (is_local_address(io_, entry.endpoint().address())) {
                                    host_on(options_.endpoint.host, false);
                                    break;
                                  }
                                }
                              }
                              connect();
                            });
  }

  void join(const JoinRequest& request) override {
    NodeDescriptor node;
    node.addr = options_.local_addr;
    node.pid = ::getpid();
    node.nproc = request.nproc;
    node.node_rank = options_.round.static_ranks ? options_.node_rank : request.preferred_rank;
    node.master_port = options_.round.static_ranks ? 0 : request.master_port;
    node.last_rank = options_.round.static_ranks ? -1 : request.last_rank;
    node.preflight = request.preflight;
    pending_join_ = node;
    if (client_) send_join();
  }

  void report_failure(const FailureReport& failure, const std::vector<WorkerFailure>& failures,
                      int not_relayed) override {
    if (client_) client_->report_failure(failure, failures, not_relayed);
  }

  void report_ended(const std::vector<WorkerFailure>& failures, int not_relayed) override {
    if (client_) client_->report_ended(failures, not_relayed);
  }

  void report_done() override {
    if (client_) client_->report_done();
  }

  void abort(const std::string& reason) override {
    if (client_) client_->abort(reason);
  }

  void shutdown(const std::string& reason) override {
    resolver_.cancel();
    // A server we host goes away with us: it tells the other nodes who stopped and why, which
    // our own leave could not (the server would close before reading it).
    if (server_) server_->leave(reason, client_ ? client_->local_endpoint() : std::nullopt);
    if (client_) client_->leave(reason);
  }

  void request_stacks(StacksDone done) override {
    if (!client_) return done({}, {}, "this node is not connected to the rendezvous host yet");
    client_->request_stacks(std::move(done));
  }
  void ask_others(std::string question, Clock::duration bound, StacksDone done) override {
    if (!client_) return done({}, {}, "this node is not connected to the rendezvous host yet");
    client_->request_stacks(std::move(done), std::move(question), bound);
  }

  std::string endpoint() const override { return to_string(options_.endpoint); }

  bool hosting() const override { return server_ != nullptr; }

  std::string advertised_address() const override {
    return client_ ? client_->advertised_address() : options_.local_addr;
  }

 private:
  void log(const std::string& line) const {
    if (log_) log_(line);
  }

  void host_on(const std::string& host, bool required) {
    // Bind where the endpoint is meant to be reached: loopback stays private to this machine;
    // any other name is served on every interface, as c10d's store does.
    asio::ip::address bind_address = asio::ip::address_v4::any();
    error_code ec;
    auto literal = asio::ip::make_address(host, ec);
    if (!ec && literal.is_loopback()) bind_address = literal;
    if (ec && host == "localhost") bind_address = asio::ip::address_v4::loopback();
    if (!ec && literal.is_v6() && !literal.is_loopback())
      bind_address = asio::ip::address_v6::any();

    ServerOptions so;
    so.credentials = options_.credentials;
    so.round = options_.round;
    so.liveness = options_.liveness;
    so.connection = options_.connection;
    so.limits = options_.limits;
    so.endpoint = endpoint();
    so.log = [this](const std::string& line) { log("rendezvous server: " + line); };
    auto server = std::make_unique<RendezvousServer>(io_, std::move(so));
    tcp::endpoint where(bind_address, static_cast<unsigned short>(options_.endpoint.port));
    try {
      server->listen(where);
    } catch (const boost::system::system_error& e) {
      if (required) {
        throw HostingError(fmt::format("cannot host the rendezvous on {}:{}: {}",
                                       where.address().to_string(), where.port(),
                                       e.code().message()));
      }
      // Another agent on this machine got there first: it hosts, we are a client. Unless what
      // holds the port is not an agent; the client finds out if it is refused (see connect).
      if (e.code() == asio::error::address_in_use) port_held_ = where;
      return;
    }
    actual_port_ = server->local_endpoint().port();
    server_ = std::move(server);
    log(fmt::format(
        "hosting the rendezvous on {}:{} (run id \"{}\", {}{})", where.address().to_string(),
        actual_port_, options_.credentials.run_id,
        options_.round.min_nodes == options_.round.max_nodes
            ? count_of(options_.round.max_nodes, "node")
            : fmt::format("{}..{} nodes", options_.round.min_nodes, options_.round.max_nodes),
        options_.credentials.token ? ", token required" : ""));
  }

  void connect() {
    ClientOptions co;
    co.endpoint = HostPort{options_.endpoint.host, server_ ? actual_port_ : options_.endpoint.port};
    co.credentials = options_.credentials;
    co.connection = options_.connection;
    co.retry = options_.retry;
    co.deadline = join_deadline(options_);
    if (port_held_) {
      co.local_port_held = [this, where = *port_held_]() -> std::optional<std::string> {
        error_code ec = try_bind(io_, where);
        if (ec == asio::error::address_in_use) return ec.message();
        return std::nullopt;
      };
    }
    co.log = log_;
    ClientEvents events = events_;
    events.on_waiting = [this](const Waiting& w) {
      // A fixed-size round that every node has joined forms at once: the node whose join
      // completed it (told how the round stood as it joined, the round's wait included) has
      // nothing to wait for, and says nothing of waiting.
      const bool complete = w.min_nodes == w.max_nodes && w.joined >= w.max_nodes;
      // Nodes of one machine meet at once; one still waiting on a loopback endpoint may be
      // waiting for nodes on other machines, which each reach their own.
      const bool loopback = w.waited_s >= 10 && is_loopback_host(options_.endpoint.host);
      if (!complete)
        log(format_waiting(w) +
            (loopback ? fmt::format("; {} is a loopback address: nodes on other machines cannot "
                                    "join here, give them an address they reach",
                                    options_.endpoint.host)
                      : ""));
      if (events_.on_waiting) events_.on_waiting(w);
    };
    events.on_stop = [this](const Stop& s) {
      // The job is over for this node. A server we host queued its last message to every peer
      // before ours arrived: stop accepting and ticking, so the loop runs out of work once those
      // are delivered instead of keeping the agent alive for its whole drain bound.
      if (server_) server_->close();
      if (events_.on_stop) events_.on_stop(s);
    };
    client_ = std::make_unique<RendezvousClient>(io_, std::move(co), std::move(events));
    client_->start();
    if (pending_join_) send_join();
  }

  // Whether this agent hosts is decided before its client exists.
  void send_join() {
    pending_join_->at_endpoint = server_ != nullptr;
    client_->join(*pending_join_);
    pending_join_.reset();
  }

  asio::io_context& io_;
  TcpRendezvousOptions options_;
  LogFunction log_;
  tcp::resolver resolver_;
  ClientEvents events_;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
  std::optional<NodeDescriptor> pending_join_;
  unsigned short actual_port_ = 0;
  std::optional<tcp::endpoint> port_held_;  // the endpoint we could not bind: address in use
};

}  // namespace

std::unique_ptr<RendezvousHandler> make_rendezvous_handler(asio::io_context& io,
                                                           TcpRendezvousOptions options,
                                                           LogFunction log) {
  return std::make_unique<TcpRendezvousHandler>(io, std::move(options), std::move(log));
}

}  // namespace trainrun::rendezvous
