#include "etcd_client.hpp"

#include <fmt/format.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <optional>
#include <set>
#include <thread>

#include "trainrun/base/numbers.hpp"

namespace trainrun::rendezvous {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string EtcdReply::describe() const {
  if (!transport_ok) return error;
  return fmt::format("HTTP {}: {}", http_status, body.substr(0, 200));
}

namespace {

// "http://host:port" (the host bracketed when IPv6) and the path of one request.
struct Target {
  std::string host, port, authority, path;
};

Target parse_target(const std::string& base_url, const std::string& path) {
  Target t;
  t.authority =
      base_url.substr(base_url.find("://") == std::string::npos ? 0 : base_url.find("://") + 3);
  t.path = path.empty() ? "/" : path;
  const auto colon = t.authority.rfind(':');
  const auto bracket = t.authority.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    t.host = t.authority.substr(0, colon);
    t.port = t.authority.substr(colon + 1);
  } else {
    t.host = t.authority;
    t.port = "80";
  }
  if (t.host.size() >= 2 && t.host.front() == '[' && t.host.back() == ']')
    t.host = t.host.substr(1, t.host.size() - 2);
  return t;
}

long elapsed_ms(Clock::time_point since) {
  return static_cast<long>(std::chrono::duration_cast<milliseconds>(Clock::now() - since).count());
}

// One POST, run on `net`'s thread: resolve, connect, send, read the answer (line by line when
// streaming). `finish` gets the reply exactly once, also after cancel(). A connection that an
// earlier request left open (`reused`) is tried first; where etcd has closed it meanwhile, the
// request goes on a new one. A connection whose answer came whole goes to `keep`, for the next.
class Transfer : public std::enable_shared_from_this<Transfer> {
 public:
  using Finish = std::function<void(EtcdReply)>;
  using Keep = std::function<void(tcp::socket)>;

  Transfer(asio::io_context& net, Target target, std::string body, bool streaming,
           milliseconds connect_timeout, milliseconds timeout, EtcdClient::Line line, Finish finish,
           std::optional<tcp::socket> reused = std::nullopt, Keep keep = nullptr)
      : target_(std::move(target)),
        streaming_(streaming),
        connect_timeout_(connect_timeout),
        timeout_(timeout),
        line_(std::move(line)),
        finish_(std::move(finish)),
        keep_(std::move(keep)),
        resolver_(net),
        socket_(reused ? std::move(*reused) : tcp::socket(net)),
        reused_(reused.has_value()),
        deadline_(net) {
    request_ = http::request<http::string_body>(http::verb::post, target_.path, 11);
    request_.set(http::field::host, target_.authority);
    request_.set(http::field::content_type, "application/json");
    request_.body() = std::move(body);
    request_.prepare_payload();
    new_parser();
  }

  bool streaming() const { return streaming_; }

  void start() {
    started_ = Clock::now();
    // The connect timeout counts from the start, the whole request's too (as curl's did).
    arm(timeout_.count() > 0 ? std::min(connect_timeout_, timeout_) : connect_timeout_);
    if (reused_) return on_connected({});
    resolve();
  }

 private:
  void resolve() {
    auto self = shared_from_this();
    // An address needs no lookup (and no trip through the resolver's thread).
    boost::system::error_code numeric;
    const asio::ip::address address = asio::ip::make_address(target_.host, numeric);
    const std::optional<long long> port = parse_integer(target_.port);
    if (!numeric && port && *port > 0 && *port <= 65535) {
      return socket_.async_connect(
          tcp::endpoint(address, static_cast<unsigned short>(*port)),
          [self](const boost::system::error_code& ec) { self->on_connected(ec); });
    }
    resolver_.async_resolve(
        target_.host, target_.port, tcp::resolver::numeric_service,
        [self](const boost::system::error_code& ec, const tcp::resolver::results_type& results) {
          self->on_resolved(ec, results);
        });
  }

 public:
  // Ends the request with `why` as its error, unless it has ended already.
  void cancel(const std::string& why) {
    if (!error_.empty() || finished_) return;
    error_ = why;
    boost::system::error_code ignored;
    resolver_.cancel();
    socket_.close(ignored);
    deadline_.cancel();
  }

 private:
  void arm(milliseconds after) {
    deadline_.expires_at(started_ + after);
    deadline_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec == asio::error::operation_aborted) return;
      self->cancel(self->connected_
                       ? fmt::format("Operation timed out after {} milliseconds with {} bytes "
                                     "received",
                                     elapsed_ms(self->started_), self->received_)
                       : fmt::format("Connection timed out after {} milliseconds",
                                     elapsed_ms(self->started_)));
    });
  }

  void on_resolved(const boost::system::error_code& ec,
                   const tcp::resolver::results_type& results) {
    if (ec) return complete(ec, fmt::format("Could not resolve host: {}", target_.host));
    asio::async_connect(
        socket_, results,
        [self = shared_from_this()](const boost::system::error_code& ec, const tcp::endpoint&) {
          self->on_connected(ec);
        });
  }

  void on_connected(const boost::system::error_code& ec) {
    if (ec) {
      return complete(ec,
                      fmt::format("Failed to connect to {} port {} after {} ms: {}", target_.host,
                                  target_.port, elapsed_ms(started_), ec.message()));
    }
    connected_ = true;
    if (timeout_.count() > 0) {
      arm(timeout_);
    } else {
      deadline_.cancel();
    }
    boost::system::error_code ignored;
    // etcd streams watch events as they happen: nothing held back on the way.
    socket_.set_option(tcp::no_delay(true), ignored);
    const tcp::endpoint local = socket_.local_endpoint(ignored);
    if (!ignored) local_ip_ = local.address().to_string();
    const tcp::endpoint peer = socket_.remote_endpoint(ignored);
    if (!ignored) peer_ip_ = peer.address().to_string();
    http::async_write(socket_, request_,
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        if (ec && self->reused_ && self->error_.empty()) return self->reconnect();
                        if (ec) return self->complete(ec, "Send failure: " + ec.message());
                        self->read();
                      });
  }

  void read() {
    http::async_read_some(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
          if (ec && self->reused_ && self->received_ == 0 && n == 0 && self->error_.empty())
            return self->reconnect();
          self->received_ += n;
          if (self->streaming_) self->deliver_lines();
          if (ec) {
            const bool empty = ec == http::error::end_of_stream && self->received_ == 0;
            return self->complete(
                ec, empty ? "Empty reply from server" : "Recv failure: " + ec.message());
          }
          if (self->parser_->is_done()) return self->complete({}, "");
          self->read();
        });
  }

  void new_parser() {
    parser_.emplace();
    // Watches stream for as long as the job runs, and ranges may be large: no size limit (a
    // number, as Boost 1.74's boost::none compares wrongly against a Content-Length).
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  // The kept connection was closed by etcd while idle: the same request on a new one.
  void reconnect() {
    reused_ = false;
    connected_ = false;
    boost::system::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
    new_parser();
    arm(timeout_.count() > 0 ? std::min(connect_timeout_, timeout_) : connect_timeout_);
    resolve();
  }

  // Each newline-terminated piece of a streamed body goes to `line_` as it arrives.
  void deliver_lines() {
    std::string& body = parser_->get().body();
    size_t start = 0, nl;
    while ((nl = body.find('\n', start)) != std::string::npos) {
      line_(body.substr(start, nl - start));
      start = nl + 1;
    }
    body.erase(0, start);
  }

  void complete(const boost::system::error_code& ec, const std::string& why) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    EtcdReply r;
    r.transport_ok = !ec && error_.empty();
    if (!r.transport_ok) r.error = error_.empty() ? why : error_;
    if (parser_->is_header_done()) r.http_status = parser_->get().result_int();
    if (keep_ && r.transport_ok && !streaming_ && parser_->is_done() && parser_->keep_alive()) {
      keep_(std::move(socket_));
    } else {
      boost::system::error_code ignored;
      socket_.close(ignored);
    }
    // A stream's lines went to `line_`; what is left is an unfinished line, not an answer.
    if (!streaming_) r.body = std::move(parser_->get().body());
    r.local_ip = local_ip_;
    r.peer_ip = peer_ip_;
    finish_(std::move(r));
  }

  Target target_;
  bool streaming_;
  milliseconds connect_timeout_, timeout_;
  EtcdClient::Line line_;
  Finish finish_;
  Keep keep_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  bool reused_;
  asio::steady_timer deadline_;
  http::request<http::string_body> request_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  Clock::time_point started_;
  bool connected_ = false, finished_ = false;
  size_t received_ = 0;
  std::string error_, local_ip_, peer_ip_;
};

constexpr milliseconds kConnectTimeout{5000};
// Connections kept open for the next requests: an agent has a few requests out at a time.
constexpr std::size_t kIdleConnections = 4;

}  // namespace

// The network thread: runs every request on an io_context of its own, posts the results and the
// stream lines to the caller's loop, where they run only while the client is alive.
struct EtcdClient::Impl {
  asio::io_context& io;
  asio::io_context net;
  asio::executor_work_guard<asio::io_context::executor_type> net_work{net.get_executor()};
  std::shared_ptr<int> alive = std::make_shared<int>(0);
  std::set<std::shared_ptr<Transfer>> running;  // network thread only
  std::vector<tcp::socket> idle;                // the same: connections left open, last first
  std::thread thread;

  explicit Impl(asio::io_context& context) : io(context) {
    thread = std::thread([this] { net.run(); });
  }

  ~Impl() {
    net.stop();
    thread.join();
    running.clear();
    idle.clear();
  }

  void submit(Target target, std::string body, bool streaming, milliseconds timeout, Line line,
              Reply done) {
    // The caller's loop has work while a request is out: it does not run out and return.
    auto work = std::make_shared<asio::executor_work_guard<asio::io_context::executor_type>>(
        io.get_executor());
    std::weak_ptr<int> weak = alive;
    Line post_line;
    if (line) {
      post_line = [this, weak, line](const std::string& one) {
        asio::post(io, [weak, line, one] {
          if (weak.lock()) line(one);
        });
      };
    }
    auto finished = std::make_shared<std::weak_ptr<Transfer>>();
    Transfer::Finish finish = [this, weak, done = std::move(done), work, finished](EtcdReply r) {
      running.erase(finished->lock());
      asio::post(io, [weak, done, r = std::move(r), work]() mutable {
        if (weak.lock()) done(std::move(r));
      });
    };
    asio::post(
        net, [this, target = std::move(target), body = std::move(body), streaming, timeout,
              post_line = std::move(post_line), finish = std::move(finish), finished]() mutable {
          // A watch holds its connection for as long as it streams: it never takes a kept one.
          std::optional<tcp::socket> reused;
          if (!streaming && !idle.empty()) {
            reused.emplace(std::move(idle.back()));
            idle.pop_back();
          }
          auto t = std::make_shared<Transfer>(
              net, std::move(target), std::move(body), streaming, kConnectTimeout, timeout,
              std::move(post_line), std::move(finish), std::move(reused), [this](tcp::socket s) {
                if (idle.size() < kIdleConnections) idle.push_back(std::move(s));
              });
          *finished = t;
          running.insert(t);
          t->start();
        });
  }
};

EtcdClient::EtcdClient(asio::io_context& io, std::string base_url)
    : base_url_(std::move(base_url)), impl_(std::make_shared<Impl>(io)) {}

EtcdClient::~EtcdClient() = default;

void EtcdClient::post(const std::string& path, std::string body, std::chrono::milliseconds timeout,
                      Reply done) {
  impl_->submit(parse_target(base_url_, path), std::move(body), false, timeout, nullptr,
                std::move(done));
}

void EtcdClient::stream(const std::string& path, std::string body, Line line, Reply done) {
  impl_->submit(parse_target(base_url_, path), std::move(body), true, milliseconds(0),
                std::move(line), std::move(done));
}

void EtcdClient::cancel_streams() {
  asio::post(impl_->net, [impl = impl_.get()] {
    // cancel() ends a transfer through its reply, which takes it out of `running`.
    std::vector<std::shared_ptr<Transfer>> streams;
    for (const auto& t : impl->running)
      if (t->streaming()) streams.push_back(t);
    for (const auto& t : streams) t->cancel("Operation was aborted by an application callback");
  });
}

EtcdReply EtcdClient::post_now(const std::string& path, const std::string& body,
                               std::chrono::milliseconds timeout) const {
  asio::io_context local;
  EtcdReply reply;
  auto t =
      std::make_shared<Transfer>(local, parse_target(base_url_, path), body, false, timeout,
                                 timeout, nullptr, [&reply](EtcdReply r) { reply = std::move(r); });
  t->start();
  local.run();
  return reply;
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

std::string base64_decode(const std::string& text) {
  // Each byte's value in the alphabet, -1 for the others: every state an agent watches is decoded.
  static const auto values = [] {
    std::array<std::int8_t, 256> v;
    v.fill(-1);
    for (int i = 0; i < 64; ++i)
      v[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
    return v;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int value = values[static_cast<unsigned char>(c)];
    if (value < 0) continue;
    acc = (acc << 6) | static_cast<std::uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

}  // namespace trainrun::rendezvous
