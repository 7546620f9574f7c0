// N ranks' start-up against a c10d TCPStore server (torch 2.x protocol), each rank on a
// connection of its own from a loopback address of its own, all at once: what
// init_process_group does on torch 2.15 with the agent's store (TORCHELASTIC_USE_AGENT_STORE).
// Prints one JSON object: the time from the first connect to every rank past the barrier, the
// request and connect latencies, the connects retried. bench/store_scale.py runs it against
// trainrun's agent and torch's libuv server.
//
//   store_load --port PORT --clients N [--pattern nccl|gloo] [--processes K] [--timeout S]
//
// Each rank, as torch 2.15's Python and C++ client do (torch/distributed/rendezvous.py
// _create_c10d_store, TCPStore.cpp, distributed_c10d.py):
//   connect (refused, reset or timed out: again after a back-off, counted as retried);
//   VALIDATE and PING (the TCPStore constructor), ADD init/ 1 (its wait_for_workers);
//   nccl: rank 0 SETs the unique id (128 bytes); every other rank gets it, as the client's get
//         does: WAIT for the key, then GET;
//   gloo: every rank SETs its address, then gets every other rank's (WAIT, GET): N^2 requests;
//   _store_based_barrier: ADD key 1, ADD key 0, the rank that counts N SETs key:last_worker,
//         every rank WAITs for it; then closes.
// Latencies: of the requests the store answers at once (PING, ADD, GET), from the write to the
// whole reply; a WAIT waits for other ranks by design and is not counted. The connect's: from
// connect() to the connection made, retries included.

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loopback_source.hpp"
#include "trainrun/launch/store/store_protocol.hpp"

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using trainrun::launch::StoreQuery;
using trainrun::launch::StoreRequest;

namespace {

constexpr std::size_t kIdBytes = 128;       // ncclUniqueId
constexpr std::size_t kAddressBytes = 128;  // a Gloo rank's address, about
constexpr int kStartedPerTurn = 64;         // connects begun before completions are looked at

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Latencies in buckets 2% wide, from 1 us to 1,000 s: merged by adding, percentiles within 2%.
class Histogram {
 public:
  static constexpr int kBuckets = 1100;
  void add(std::int64_t ns) {
    const double us = static_cast<double>(ns) / 1000.0;
    int b = us <= 1 ? 0 : 1 + static_cast<int>(std::log(us) / std::log(1.02));
    counts_[static_cast<std::size_t>(std::min(b, kBuckets - 1))]++;
  }
  void merge(const Histogram& o) {
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  }
  std::uint64_t total() const {
    std::uint64_t t = 0;
    for (auto c : counts_) t += c;
    return t;
  }
  // The upper end of the bucket holding quantile q, in ms; -1 when empty.
  double quantile_ms(double q) const {
    const std::uint64_t n = total();
    if (n == 0) return -1;
    const auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(n)));
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= std::max<std::uint64_t>(rank, 1)) return std::pow(1.02, i) / 1000.0;
    }
    return -1;
  }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
};

// What one process of the generator measured; written whole through a pipe to the first.
struct Tally {
  std::int64_t first_connect_ns = 0;
  std::int64_t last_barrier_ns = 0;
  std::uint64_t ranks_past_barrier = 0;
  std::uint64_t retried_connects = 0;
  std::uint64_t failed = 0;  // ranks whose connection broke after it was made
  bool timed_out = false;
  Histogram requests;
  Histogram connects;

  void merge(const Tally& o) {
    if (o.first_connect_ns && (!first_connect_ns || o.first_connect_ns < first_connect_ns))
      first_connect_ns = o.first_connect_ns;
    last_barrier_ns = std::max(last_barrier_ns, o.last_barrier_ns);
    ranks_past_barrier += o.ranks_past_barrier;
    retried_connects += o.retried_connects;
    failed += o.failed;
    timed_out = timed_out || o.timed_out;
    requests.merge(o.requests);
    connects.merge(o.connects);
  }
};

struct Options {
  int port = 0;
  std::string host = "127.0.0.1";
  int clients = 0;
  bool gloo = false;
  int processes = 1;
  int timeout_s = 120;
};

std::string request(StoreQuery q, std::vector<std::string> keys = {},
                    std::vector<std::string> values = {}, std::int64_t number = 0) {
  StoreRequest r;
  r.query = q;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.number = number;
  return trainrun::launch::encode_request(r);
}

// The keys as torch 2.15's prefixes make them (TCPStore's "/", PrefixStore's "default_pg", the
// group's and the device's).
const std::string kNcclIdKey = "/default_pg/0//cuda//0";
const std::string kBarrierKey = "/default_pg/store_based_barrier_key:0";
const std::string kLastWorkerKey = kBarrierKey + ":last_worker";
std::string gloo_key(int rank) { return fmt::format("/default_pg/0//cpu//rank_{}", rank); }

class Generator;

// One rank: its connection and where it is in its start-up. Requests go one at a time, as from a
// blocking client; a SET, which has no reply, goes out with the request after it.
class Rank {
 public:
  Rank(Generator& g, int rank) : g_(g), rank_(rank), socket_(io()) {}
  void start();

 private:
  enum class Reply { none, u32, i64, u8, value };
  enum class Step { hello, init, id, barrier_add, barrier_count, barrier_wait, done };

  asio::io_context& io();
  void connect();
  void connected(boost::system::error_code ec);
  void retry();
  void send(std::string bytes, Reply reply, bool timed);
  void replied();
  void next();
  void fail();

  Generator& g_;
  int rank_;
  tcp::socket socket_;
  std::unique_ptr<asio::steady_timer> backoff_;  // only for a rank whose connect failed
  int retries_ = 0;
  std::int64_t connect_started_ = 0;
  std::int64_t sent_at_ = 0;
  bool timed_ = false;
  Step step_ = Step::hello;
  int peer_ = 0;              // gloo: the next rank whose address is fetched
  bool peer_waited_ = false;  // gloo: its key is there, GET it next
  bool id_fetched_ = false;   // nccl: the unique id has come
  std::string pending_;       // a SET without a reply, sent with the next request
  std::string out_;
  std::array<char, 8> head_{};
  std::string body_;
  Reply reply_ = Reply::none;
};

class Generator {
 public:
  Generator(const Options& o, int first, int step) : o_(o), first_(first), step_(step) {}

  Tally run() {
    for (int r = first_; r < o_.clients; r += step_)
      ranks_.push_back(std::make_unique<Rank>(*this, r));
    asio::steady_timer limit(io_, std::chrono::seconds(o_.timeout_s));
    limit.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      tally_.timed_out = true;
      io_.stop();
    });
    start_some(0);
    io_.run();
    return tally_;
  }

  void rank_finished(bool past_barrier) {
    if (past_barrier) {
      ++tally_.ranks_past_barrier;
      tally_.last_barrier_ns = now_ns();
    } else {
      ++tally_.failed;
    }
    if (++finished_ == ranks_.size()) io_.stop();
  }

  asio::io_context& io() { return io_; }
  const Options& options() const { return o_; }
  Tally& tally() { return tally_; }
  const tcp::endpoint& server() const { return server_; }

 private:
  // A few connects at a time, so that the first completions are seen while the rest start.
  void start_some(std::size_t from) {
    if (from == 0) tally_.first_connect_ns = now_ns();
    const std::size_t to = std::min(ranks_.size(), from + kStartedPerTurn);
    for (std::size_t i = from; i < to; ++i) ranks_[i]->start();
    if (to < ranks_.size()) asio::post(io_, [this, to] { start_some(to); });
  }

  Options o_;
  int first_, step_;
  asio::io_context io_;
  tcp::endpoint server_{asio::ip::make_address(o_.host), static_cast<unsigned short>(o_.port)};
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::size_t finished_ = 0;
  Tally tally_;
};

asio::io_context& Rank::io() { return g_.io(); }

void Rank::start() {
  connect_started_ = now_ns();
  connect();
}

void Rank::connect() {
  boost::system::error_code ec;
  socket_.open(tcp::v4(), ec);
  // Its own source address: ephemeral ports run out for no one.
  if (!ec)
    socket_.bind(
        tcp::endpoint(asio::ip::make_address_v4(trainrun::bench::loopback_source(rank_)), 0), ec);
  if (ec) return fail();
  socket_.async_connect(g_.server(), [this](boost::system::error_code e) { connected(e); });
}

void Rank::connected(boost::system::error_code ec) {
  if (ec) return retry();
  g_.tally().connects.add(now_ns() - connect_started_);
  boost::system::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  const std::uint32_t nonce = 0x5eed0000u + static_cast<std::uint32_t>(rank_);
  StoreRequest ping;
  ping.query = StoreQuery::ping;
  ping.word = nonce;
  StoreRequest hello;
  hello.query = StoreQuery::validate;
  hello.word = trainrun::launch::kStoreValidationMagic;
  send(trainrun::launch::encode_request(hello) + trainrun::launch::encode_request(ping), Reply::u32,
       true);
}

// As torch's client: a refused, reset or timed-out connect is tried again after a back-off.
void Rank::retry() {
  ++g_.tally().retried_connects;
  boost::system::error_code ignored;
  socket_.close(ignored);
  if (!backoff_) backoff_ = std::make_unique<asio::steady_timer>(io());
  const int ms = std::min(1000, 50 << std::min(retries_++, 4));
  backoff_->expires_after(std::chrono::milliseconds(ms + rank_ % 50));
  backoff_->async_wait([this](boost::system::error_code ec) {
    if (!ec) connect();
  });
}

void Rank::send(std::string bytes, Reply reply, bool timed) {
  out_ = pending_ + bytes;
  pending_.clear();
  reply_ = reply;
  timed_ = timed;
  sent_at_ = now_ns();
  asio::async_write(socket_, asio::buffer(out_), [this](boost::system::error_code ec, std::size_t) {
    if (ec) return fail();
    const std::size_t n = reply_ == Reply::u32 ? 4 : reply_ == Reply::u8 ? 1 : 8;
    asio::async_read(socket_, asio::buffer(head_, n),
                     [this](boost::system::error_code e, std::size_t) {
                       if (e) return fail();
                       if (reply_ != Reply::value) return replied();
                       std::uint64_t len = 0;
                       std::memcpy(&len, head_.data(), 8);
                       body_.resize(len);
                       asio::async_read(socket_, asio::buffer(body_),
                                        [this](boost::system::error_code e2, std::size_t) {
                                          if (e2) return fail();
                                          replied();
                                        });
                     });
  });
}

void Rank::replied() {
  if (timed_) g_.tally().requests.add(now_ns() - sent_at_);
  next();
}

// The request after the one just answered.
void Rank::next() {
  const int n = g_.options().clients;
  switch (step_) {
    case Step::hello:
      step_ = Step::init;
      return send(request(StoreQuery::add, {"init/"}, {}, 1), Reply::i64, true);
    case Step::init:
      step_ = Step::id;
      if (g_.options().gloo) {
        pending_ = request(StoreQuery::set, {gloo_key(rank_)}, {std::string(kAddressBytes, 'a')});
        peer_ = rank_ == 0 ? 1 : 0;
      } else if (rank_ == 0) {
        pending_ = request(StoreQuery::set, {kNcclIdKey}, {std::string(kIdBytes, 'i')});
      } else {
        return send(request(StoreQuery::wait, {kNcclIdKey}), Reply::u8, false);
      }
      [[fallthrough]];
    case Step::id:
      if (g_.options().gloo && peer_ < n) {
        const std::string key = gloo_key(peer_);
        if (!peer_waited_) {
          peer_waited_ = true;
          return send(request(StoreQuery::wait, {key}), Reply::u8, false);
        }
        peer_waited_ = false;
        if (++peer_ == rank_) ++peer_;
        return send(request(StoreQuery::get, {key}), Reply::value, true);
      }
      if (!g_.options().gloo && rank_ != 0 && !id_fetched_) {
        id_fetched_ = true;
        return send(request(StoreQuery::get, {kNcclIdKey}), Reply::value, true);
      }
      step_ = Step::barrier_add;
      return send(request(StoreQuery::add, {kBarrierKey}, {}, 1), Reply::i64, true);
    case Step::barrier_add:
      step_ = Step::barrier_count;
      return send(request(StoreQuery::add, {kBarrierKey}, {}, 0), Reply::i64, true);
    case Step::barrier_count: {
      std::int64_t count = 0;
      std::memcpy(&count, head_.data(), 8);
      if (count == n) pending_ = request(StoreQuery::set, {kLastWorkerKey}, {"1"});
      step_ = Step::barrier_wait;
      return send(request(StoreQuery::wait, {kLastWorkerKey}), Reply::u8, false);
    }
    case Step::barrier_wait: {
      step_ = Step::done;
      boost::system::error_code ignored;
      socket_.close(ignored);
      return g_.rank_finished(true);
    }
    case Step::done:
      return;
  }
}

void Rank::fail() {
  if (step_ == Step::done) return;
  step_ = Step::done;
  boost::system::error_code ignored;
  socket_.close(ignored);
  g_.rank_finished(false);
}

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// The ranks dealt over `processes` processes (rank r to process r % processes); their tallies
// merged.
Tally run_all(const Options& o) {
  if (o.processes <= 1) return Generator(o, 0, 1).run();
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < o.processes; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const Tally t = Generator(o, p, o.processes).run();
      _exit(write_all(fds[1], &t, sizeof t) ? 0 : 1);
    }
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  Tally all;
  for (auto& [pid, fd] : children) {
    Tally t;
    if (read_all(fd, &t, sizeof t)) all.merge(t);
    ::close(fd);
    ::waitpid(pid, nullptr, 0);
  }
  return all;
}

int usage(const std::string& why) {
  fmt::print(stderr,
             "store_load: {}\nusage: store_load --port PORT --clients N [--host ADDRESS] "
             "[--pattern nccl|gloo] [--processes K] [--timeout S]\n",
             why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage(a + " needs a value");
    const std::string v = argv[++i];
    try {
      if (a == "--port")
        o.port = std::stoi(v);
      else if (a == "--clients")
        o.clients = std::stoi(v);
      else if (a == "--host")
        o.host = v;
      else if (a == "--pattern" && (v == "nccl" || v == "gloo"))
        o.gloo = v == "gloo";
      else if (a == "--processes")
        o.processes = std::stoi(v);
      else if (a == "--timeout")
        o.timeout_s = std::stoi(v);
      else
        return usage(fmt::format("unknown option or value: {} {}", a, v));
    } catch (const std::exception&) {
      return usage(fmt::format("{}: not a number: {}", a, v));
    }
  }
  if (o.port <= 0 || o.port > 65535) return usage("--port must be 1..65535");
  if (o.clients < 2 || o.clients > 250 * 250 * 200) return usage("--clients must be 2..12,500,000");
  if (o.processes < 1 || o.processes > o.clients) return usage("--processes must be 1..N");
  if (o.timeout_s < 1) return usage("--timeout must be at least 1 s");

  const Tally t = run_all(o);
  const bool all = t.ranks_past_barrier == static_cast<std::uint64_t>(o.clients);
  fmt::print(
      "{{\"clients\": {}, \"pattern\": \"{}\", \"processes\": {}, \"ranks_past_barrier\": {}, "
      "\"failed\": {}, \"timed_out\": {}, \"seconds\": {}, \"requests\": {}, \"p50_ms\": {:.3f}, "
      "\"p99_ms\": {:.3f}, \"connect_p50_ms\": {:.3f}, \"connect_p99_ms\": {:.3f}, "
      "\"retried_connects\": {}}}\n",
      o.clients, o.gloo ? "gloo" : "nccl", o.processes, t.ranks_past_barrier, t.failed,
      t.timed_out ? "true" : "false",
      all ? fmt::format("{:.3f}", static_cast<double>(t.last_barrier_ns - t.first_connect_ns) / 1e9)
          : "null",
      t.requests.total(), t.requests.quantile_ms(0.5), t.requests.quantile_ms(0.99),
      t.connects.quantile_ms(0.5), t.connects.quantile_ms(0.99), t.retried_connects);
  return all ? 0 : 1;
}
