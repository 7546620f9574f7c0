// Time for the built-in rendezvous to form one round, and to pass the exit barrier, with N
// protocol clients in a child process on loopback (each a full client: connect, handshake, join,
// heartbeats). Prints a table; with --write FILE, also puts it into FILE between markers; with
// --json FILE, writes the results as JSON (read by bench/plot.py).
//
//   rendezvous_scale [--sizes 16,256,1024,4096,16384] [--token] [--preflight]
//                    [--write docs/benchmarks.md] [--json FILE]
//
// --preflight: each client joins with a preflight offer, as an agent of a multi-node job does,
// so that every assignment carries the offers of the nodes its agent checks.

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/round_counts.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/server.hpp"

using namespace trainrun::rendezvous;
namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Result {
  int nodes = 0;
  double round_s = 0;
  double barrier_s = 0;
  double rss_per_agent_kib = 0;  // the host's resident memory growth, per agent
  bool ok = false;
};

double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// The simulated agents: n clients on an io_context of their own, in a child process (so that the
// host's memory and file descriptors are the server's alone). Writes the two times to `out`.
void run_clients(int n, bool token, bool preflight, int port, int out) {
  asio::io_context io;
  bench::RoundCounts counts;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  clients.reserve(static_cast<std::size_t>(n));
  auto start = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    ClientOptions co;
    co.endpoint = HostPort{"127.0.0.1", port};
    co.credentials.run_id = "bench";
    if (token) co.credentials.token = "bench-token";
    co.deadline = std::chrono::seconds(120);
    ClientEvents e = counts.events("rendezvous_scale: a client stopped");
    clients.push_back(std::make_unique<RendezvousClient>(io, co, e));
    clients.back()->start();
    NodeDescriptor node;
    node.host = fmt::format("node{:05d}", i);
    node.pid = 1000 + i;
    node.nproc = 8;
    node.master_port = 29500;
    if (preflight) {
      PreflightOffer o;
      o.id = fmt::format("{:016x}", i);
      o.port = 32768 + i % 28000;
      o.trainrun = "0.9.0";
      o.entrypoint = "train.py";
      o.sha256 = std::string(64, 'a');
      o.python = "3.11.2";
      o.torch = "2.1.0+cu121";
      o.network = fmt::format("{:016x}", i);
      node.preflight = o;
    }
    clients.back()->join(node);
  }
  auto run_until = [&](auto done) {
    auto limit = SteadyClock::now() + std::chrono::seconds(120);
    while (!done() && counts.failed == 0 && SteadyClock::now() < limit) {
      io.run_for(std::chrono::milliseconds(1));
    }
    return done() && counts.failed == 0;
  };
  double times[2] = {-1, -1};
  if (run_until([&] { return counts.assigned == n; })) {
    times[0] = since(start);
    auto barrier = SteadyClock::now();
    for (auto& c : clients) c->report_done();
    if (run_until([&] { return counts.stopped == n; })) times[1] = since(barrier);
  }
  if (::write(out, times, sizeof times) != static_cast<ssize_t>(sizeof times)) _exit(1);
  _exit(0);
}

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGE_SIZE)) / (1 << 20);
}

Result measure(int n, bool token, bool preflight) {
  Result r;
  r.nodes = n;
  int to_child[2], from_child[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) return r;
  const pid_t child = ::fork();
  if (child == 0) {
    int port = 0;
    if (::read(to_child[0], &port, sizeof port) != static_cast<ssize_t>(sizeof port)) _exit(1);
    run_clients(n, token, preflight, port, from_child[1]);
  }
  const double rss_before = rss_mib();
  asio::io_context io;
  ServerOptions so;
  so.credentials.run_id = "bench";
  if (token) so.credentials.token = "bench-token";
  so.round.min_nodes = so.round.max_nodes = n;
  so.endpoint = "127.0.0.1";
  so.limits.max_pending = static_cast<std::size_t>(n) + 16;
  so.limits.max_admitted = static_cast<std::size_t>(n) + 16;
  RendezvousServer server(io, so);
  server.listen(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  int port = server.local_endpoint().port();
  if (::write(to_child[1], &port, sizeof port) != static_cast<ssize_t>(sizeof port)) return r;
  asio::posix::stream_descriptor answer(io, from_child[0]);
  double times[2] = {-1, -1};
  bool answered = false;
  answer.async_read_some(asio::buffer(times, sizeof times),
                         [&](boost::system::error_code, std::size_t) { answered = true; });
  double peak = rss_before;
  auto limit = SteadyClock::now() + std::chrono::seconds(300);
  while (!answered && SteadyClock::now() < limit) {
    io.run_for(std::chrono::milliseconds(50));
    peak = std::max(peak, rss_mib());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  r.round_s = times[0];
  r.barrier_s = times[1];
  r.rss_per_agent_kib = (peak - rss_before) * 1024.0 / n;
  r.ok = answered && times[0] >= 0 && times[1] >= 0;
  return r;
}

void raise_fd_limit(int needed) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < static_cast<rlim_t>(needed)) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, static_cast<rlim_t>(needed));
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

std::string machine() {
  utsname u{};
  ::uname(&u);
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  double mem = static_cast<double>(::sysconf(_SC_PAGE_SIZE)) *
               static_cast<double>(::sysconf(_SC_PHYS_PAGES)) / (1 << 30);
  return fmt::format("{}, {} CPUs, {:.0f} GiB, Linux {}", u.machine, cpus, mem, u.release);
}

std::string table(const std::vector<Result>& results, bool token) {
  std::ostringstream out;
  out << "## Rendezvous scale (`bench/rendezvous_scale`)\n\n";
  out << "Time for the built-in rendezvous server to form one round, and then to pass the exit "
         "barrier (every node reports done, every node is told), with N protocol clients in a "
         "second "
         "process on loopback (the host's memory is its own: resident set growth from before the "
         "server starts to its peak, per agent); each client connects, completes the handshake"
      << (token ? " with the token proof" : "")
      << ", joins and heartbeats like an agent. Targets: under 2 s at 1,024, under 5 s at 16,384. "
         "Machine: "
      << machine() << ".\n\n";
  out << "| nodes | round formed (s) | exit barrier (s) | host memory per agent (KiB) |\n"
         "|---:|---:|---:|---:|\n";
  for (const auto& r : results) {
    if (r.ok) {
      out << fmt::format("| {} | {:.3f} | {:.3f} | {:.1f} |\n", r.nodes, r.round_s, r.barrier_s,
                         r.rss_per_agent_kib);
    } else {
      out << fmt::format("| {} | failed | failed | |\n", r.nodes);
    }
  }
  return out.str();
}

// The same section format as bench/bench_doc.py: the block between the markers is ours.
void write_section(const std::string& path, const std::string& body) {
  const std::string start = "<!-- bench:rendezvous_scale -->";
  const std::string end = "<!-- /bench:rendezvous_scale -->";
  std::string text;
  {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (text.empty()) {
    text =
        "# Benchmarks\n\nEach section is written by the program named in it; rerun that program "
        "to refresh it.\n";
  }
  std::string block = start + "\n" + body + end;
  auto b = text.find(start);
  auto e = text.find(end);
  if (b != std::string::npos && e != std::string::npos && e > b) {
    text.replace(b, e + end.size() - b, block);
  } else {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    text += "\n\n" + block + "\n";
  }
  std::ofstream out(path);
  out << text;
}

void write_json(const std::string& path, const std::vector<Result>& results, bool token,
                const std::string& command) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    rows.push_back({{"nodes", r.nodes},
                    {"round_s", r.round_s},
                    {"barrier_s", r.barrier_s},
                    {"rss_per_agent_kib", r.rss_per_agent_kib},
                    {"ok", r.ok}});
  }
  const nlohmann::json record = {{"benchmark", "rendezvous_scale"},
                                 {"command", command},
                                 {"settings", {{"token", token}}},
                                 {"results", rows}};
  std::ofstream(path) << record.dump(1) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {16, 256, 1024, 4096, 16384};
  std::string write_path;
  std::string json_path;
  std::string command = "rendezvous_scale";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  bool token = false;
  bool preflight = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else if (arg == "--write" && i + 1 < argc) {
      write_path = argv[++i];
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--token") {
      token = true;
    } else if (arg == "--preflight") {
      preflight = true;
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--sizes 16,256,1024,4096,16384] [--token] "
                   "[--preflight] [--write FILE] [--json FILE]\n");
      return 2;
    }
  }
  int largest = 0;
  for (int n : sizes) largest = std::max(largest, n);
  // Each process (host, simulated agents) holds one descriptor per agent, and a few more.
  raise_fd_limit(largest + 256);

  std::vector<Result> results;
  bool all_ok = true;
  for (int n : sizes) {
    results.push_back(measure(n, token, preflight));
    all_ok = all_ok && results.back().ok;
  }
  std::string text = table(results, token);
  std::fputs(text.c_str(), stdout);
  if (!write_path.empty()) write_section(write_path, text);
  if (!json_path.empty()) write_json(json_path, results, token, command);
  return all_ok ? 0 : 1;
}
