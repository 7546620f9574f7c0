// Time for the built-in rendezvous to form one round, and to pass the exit barrier, with N
// protocol clients in a child process on loopback (each a full client: connect, handshake, join,
// heartbeats). Prints a table; with --write FILE, also puts it into FILE between markers; with
// --json FILE, writes the results as JSON (read by bench/plot.py).
//
//   rendezvous_scale [--sizes 16,256,1024,4096,16384] [--token] [--preflight]
//                    [--restart failure|lost] [--write docs/benchmarks.md] [--json FILE]
//
// --preflight: each client joins with a preflight offer, as an agent of a multi-node job does,
// so that every assignment carries the offers of the nodes its agent checks; and once the round
// has formed, every client but one checks group rank 0 as the preflight does: a connection to
// rank 0's preflight port (the host's, on the host's loop, as in an agent) that reads its
// greeting. That is the part of the preflight that grows with the node count: each node's other
// two checks (its ring neighbours) are two connections whatever the size, all in parallel.
//
// --restart: once the first round has formed, one agent fails as an agent does: `failure`, it
// reports a worker's failure (every node restarts, one restart allowed); `lost`, it leaves (its
// connection ends: the others restart without it). Every other agent joins again with the rank
// it had, as an agent does on `restart`; measured: from the failure to the last assignment of
// the next round. The job's c10d store is not simulated here (its clients are the workers):
// the host's clear of it between attempts is measured apart, for a store holding the keys that
// init_process_group with Gloo leaves for every rank of the job (8 a node), where the store can
// serve that many ranks at all (StoreLimits: one connection per rank, 1 GiB held).

#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
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

#include "loopback_source.hpp"
#include "rendezvous/round_counts.hpp"
#include "rendezvous/store_clear.hpp"
#include "trainrun/launch/preflight/preflight_probe.hpp"
#include "trainrun/rendezvous/client.hpp"
#include "trainrun/rendezvous/server.hpp"

using namespace trainrun::rendezvous;
namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

namespace {

enum class Failing { none, failure, lost };

struct Settings {
  bool token = false;
  bool preflight = false;
  Failing restart = Failing::none;
};

struct Result {
  int nodes = 0;
  double round_s = 0;
  double barrier_s = 0;
  double preflight_s = -1;       // from the round formed to every check of rank 0 answered
  double restart_s = -1;         // from the failure to every agent's next assignment
  double rss_per_agent_kib = 0;  // the host's resident memory growth, per agent
  bench::StoreClear store;       // --restart: the c10d store's clear for the job's ranks
  bool ok = false;
};

// Each simulated agent runs this many workers (its join's nproc), as the store's ranks count.
constexpr int kRanksPerNode = 8;

double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// The simulated agents: n clients on an io_context of their own, in a child process (so that the
// host's memory and file descriptors are the server's alone). Writes the four times to `out`.
void run_clients(int n, const Settings& settings, int port, int checks_go, int checks_done,
                 int out) {
  const bool preflight = settings.preflight;
  asio::io_context io;
  bench::RoundCounts counts;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  std::vector<NodeDescriptor> nodes(static_cast<std::size_t>(n));
  std::vector<int> last_rank(static_cast<std::size_t>(n), -1);
  clients.reserve(static_cast<std::size_t>(n));
  auto start = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    ClientOptions co;
    co.endpoint = HostPort{trainrun::bench::loopback_source(i), port};
    co.credentials.run_id = "bench";
    if (settings.token) co.credentials.token = "bench-token";
    co.deadline = std::chrono::seconds(120);
    ClientEvents e = counts.events("rendezvous_scale: a client stopped");
    const auto k = static_cast<std::size_t>(i);
    e.on_assignment = [&counts, &last_rank, k](const Assignment& a) {
      last_rank[k] = a.group_rank;
      ++counts.assigned;
    };
    // As an agent: its workers stopped, it joins the next round with the rank it had.
    e.on_restart = [&, k](const Restart&) {
      asio::post(io, [&, k] {
        NodeDescriptor again = nodes[k];
        again.last_rank = last_rank[k];
        clients[k]->join(again);
      });
    };
    clients.push_back(std::make_unique<RendezvousClient>(io, co, e));
    clients.back()->start();
    NodeDescriptor& node = nodes[k];
    node.host = fmt::format("node{:05d}", i);
    node.pid = 1000 + i;
    node.nproc = kRanksPerNode;
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
  double times[3] = {-1, -1, -1};
  int gone = -1;  // the agent that left (--restart lost)
  bool ready = run_until([&] { return counts.assigned == n; });
  if (ready) times[0] = since(start);
  if (ready && settings.restart != Failing::none) {
    // One agent in the middle fails; the others' next assignments end the restart.
    const int failing = n / 2;
    const auto restarted = SteadyClock::now();
    const int expected = settings.restart == Failing::lost ? 2 * n - 1 : 2 * n;
    if (settings.restart == Failing::failure) {
      FailureReport f;
      f.host = nodes[static_cast<std::size_t>(failing)].host;
      f.rank = failing * kRanksPerNode;
      f.local_rank = 0;
      f.exit_code = 1;
      f.summary = "rendezvous_scale: a simulated worker failure";
      clients[static_cast<std::size_t>(failing)]->report_failure(f, {}, 0);
    } else {
      clients[static_cast<std::size_t>(failing)]->leave("rendezvous_scale: a simulated loss");
      gone = failing;
    }
    ready = run_until([&] { return counts.assigned == expected; });
    if (ready) times[2] = since(restarted);
  }
  if (ready) {
    if (preflight) {
      // The checks of rank 0, in the checkers' process (their descriptors are their own): go,
      // then wait until they are done before the workers would start (the exit barrier).
      char go = 1;
      if (::write(checks_go, &go, 1) != 1 || ::read(checks_done, &go, 1) != 1) _exit(1);
    }
    auto barrier = SteadyClock::now();
    for (int i = 0; i < n; ++i)
      if (i != gone) clients[static_cast<std::size_t>(i)]->report_done();
    const int staying = gone < 0 ? n : n - 1;
    if (run_until([&] { return counts.stopped == staying; })) times[1] = since(barrier);
  }
  if (::write(out, times, sizeof times) != static_cast<ssize_t>(sizeof times)) _exit(1);
  _exit(0);
}

// The preflight's checks of group rank 0 by nodes 1..n-1, in a process of their own: once `go`
// is readable, every one at once connects to rank 0's preflight port and reads its greeting up
// to the close. Writes the time it took (-1 when one failed) to `out`, then a byte to `done`.
void run_checks(int n, int preflight_port, int go, int done, int out) {
  char byte = 0;
  if (::read(go, &byte, 1) != 1) _exit(1);
  asio::io_context io;
  const auto start = SteadyClock::now();
  int answered = 0, failed = 0;
  std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
  std::vector<std::unique_ptr<std::array<char, 256>>> buffers;
  for (int i = 1; i < n; ++i) {
    const asio::ip::tcp::endpoint rank0(
        asio::ip::make_address_v4(trainrun::bench::loopback_source(i)),
        static_cast<unsigned short>(preflight_port));
    sockets.push_back(std::make_unique<asio::ip::tcp::socket>(io));
    buffers.push_back(std::make_unique<std::array<char, 256>>());
    auto& sock = *sockets.back();
    auto& buf = *buffers.back();
    sock.async_connect(rank0, [&](boost::system::error_code ec) {
      if (ec) {
        ++failed;
        return;
      }
      asio::async_read(sock, asio::buffer(buf), [&](boost::system::error_code e, size_t got) {
        // The greeting, then the listener's close.
        if (e == asio::error::eof && got > 0)
          ++answered;
        else
          ++failed;
        sock.close();
      });
    });
  }
  const auto limit = SteadyClock::now() + std::chrono::seconds(120);
  while (answered + failed < n - 1 && SteadyClock::now() < limit)
    io.run_for(std::chrono::milliseconds(1));
  const double took = answered == n - 1 ? since(start) : -1;
  if (::write(out, &took, sizeof took) != static_cast<ssize_t>(sizeof took) ||
      ::write(done, &byte, 1) != 1)
    _exit(1);
  _exit(0);
}

double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGE_SIZE)) / (1 << 20);
}

Result measure(int n, const Settings& settings) {
  const bool preflight = settings.preflight;
  Result r;
  r.nodes = n;
  int to_child[2], from_child[2], go[2], done[2], from_checks[2];
  if (::pipe(to_child) != 0 || ::pipe(from_child) != 0 || ::pipe(go) != 0 || ::pipe(done) != 0 ||
      ::pipe(from_checks) != 0)
    return r;
  const pid_t child = ::fork();
  if (child == 0) {
    int ports[2] = {0, 0};
    if (::read(to_child[0], ports, sizeof ports) != static_cast<ssize_t>(sizeof ports)) _exit(1);
    run_clients(n, settings, ports[0], go[1], done[0], from_child[1]);
  }
  pid_t checkers = -1;
  if (preflight) {
    checkers = ::fork();
    if (checkers == 0) {
      int ports[2] = {0, 0};
      if (::read(to_child[0], ports, sizeof ports) != static_cast<ssize_t>(sizeof ports)) _exit(1);
      run_checks(n, ports[1], go[0], done[1], from_checks[1]);
    }
  }
  const double rss_before = rss_mib();
  asio::io_context io;
  ServerOptions so;
  so.credentials.run_id = "bench";
  if (settings.token) so.credentials.token = "bench-token";
  so.round.min_nodes = so.round.max_nodes = n;
  if (settings.restart != Failing::none) so.round.max_restarts = 1;
  // A lost agent leaves the others, fewer than MAX, to go on.
  if (settings.restart == Failing::lost) so.round.min_nodes = n - 1;
  so.endpoint = "127.0.0.1";
  so.limits.max_pending = static_cast<std::size_t>(n) + 16;
  so.limits.max_admitted = static_cast<std::size_t>(n) + 16;
  RendezvousServer server(io, so);
  server.listen(asio::ip::tcp::endpoint(asio::ip::address_v4::any(), 0));
  // Group rank 0's preflight port, on the loop of its rendezvous server, as in its agent.
  std::unique_ptr<trainrun::launch::PreflightListener> listener;
  if (preflight) listener = std::make_unique<trainrun::launch::PreflightListener>(io, "bench");
  int ports[2] = {server.local_endpoint().port(), listener ? listener->port() : 0};
  for (int i = 0; i < (preflight ? 2 : 1); ++i)  // to the clients, and to the checkers
    if (::write(to_child[1], ports, sizeof ports) != static_cast<ssize_t>(sizeof ports)) return r;
  asio::posix::stream_descriptor answer(io, from_child[0]);
  double times[3] = {-1, -1, -1};
  double times_checked = -1;
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
  if (checkers > 0) {
    double took = -1;
    if (::read(from_checks[0], &took, sizeof took) == static_cast<ssize_t>(sizeof took))
      times_checked = took;
    ::waitpid(checkers, &status, 0);
  }
  r.round_s = times[0];
  r.barrier_s = times[1];
  r.restart_s = times[2];
  r.preflight_s = times_checked;
  r.rss_per_agent_kib = (peak - rss_before) * 1024.0 / n;
  r.ok = answered && times[0] >= 0 && times[1] >= 0 && (!preflight || times_checked >= 0) &&
         (settings.restart == Failing::none || times[2] >= 0);
  // Apart, once the agents are gone: the host empties the job's store before the next attempt.
  if (r.ok && settings.restart != Failing::none)
    r.store = bench::measure_store_clear(io, n * kRanksPerNode);
  return r;
}

// Raises the descriptor limit to `needed` (the hard one too, where allowed: as root); false,
// having said so unless `quiet`, when it stays below (the soft limit then at the hard one).
bool raise_fd_limit(long needed, bool quiet = false) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return false;
  const auto want = static_cast<rlim_t>(needed);
  if (lim.rlim_cur >= want) return true;
  rlimit raised{want, std::max(lim.rlim_max, want)};
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return true;
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  if (quiet) return false;
  std::fprintf(stderr,
               "rendezvous_scale: the sizes asked for need %ld file descriptors per process; the "
               "limit is %llu (raise `ulimit -n`, or run as root)\n",
               needed, static_cast<unsigned long long>(lim.rlim_max));
  return false;
}

std::string machine() {
  utsname u{};
  ::uname(&u);
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  double mem = static_cast<double>(::sysconf(_SC_PAGE_SIZE)) *
               static_cast<double>(::sysconf(_SC_PHYS_PAGES)) / (1 << 30);
  return fmt::format("{}, {} CPUs, {:.0f} GiB, Linux {}", u.machine, cpus, mem, u.release);
}

std::string table(const std::vector<Result>& results, const Settings& settings) {
  const bool token = settings.token, preflight = settings.preflight;
  const bool restart = settings.restart != Failing::none;
  std::ostringstream out;
  out << "## Rendezvous scale (`bench/rendezvous_scale`)\n\n";
  out << "Time for the built-in rendezvous server to form one round, and then to pass the exit "
         "barrier (every node reports done, every node is told), with N protocol clients in a "
         "second process on loopback, each connecting to an address of its own in 127.0.0.0/8 "
         "as agents on distinct hosts come from distinct addresses (the host's memory is its "
         "own: resident set growth from before the server starts to its peak, per agent); each "
         "client connects, completes the handshake"
      << (token ? " with the token proof" : "")
      << ", joins and heartbeats like an agent. Targets: under 2 s at 1,024, under 5 s at 16,384. "
         "Machine: "
      << machine() << ".\n\n";
  if (preflight)
    out << "With `--preflight`: every join carries an offer, and once the round has formed every "
           "node but rank 0 checks rank 0 (a connection to its preflight port that reads the "
           "greeting), all at once.\n\n";
  if (restart)
    out << "With `--restart " << (settings.restart == Failing::lost ? "lost" : "failure")
        << "`: once the round has formed, one agent "
        << (settings.restart == Failing::lost ? "leaves" : "reports a worker's failure")
        << "; restart: from then to every agent's next assignment. Store clear: the host's "
           "clear of the job's c10d store holding what init_process_group (Gloo) leaves for "
           "its ranks, 8 a node.\n\n";
  out << "| nodes | round formed (s) |" << (preflight ? " rank 0 checked by all (s) |" : "")
      << (restart ? " restart (s) | store close + clear (s) |" : "")
      << " exit barrier (s) | host memory per agent (KiB) |\n"
      << "|---:|---:|" << (preflight ? "---:|" : "") << (restart ? "---:|---:|" : "")
      << "---:|---:|\n";
  for (const auto& r : results) {
    const std::string checked = preflight ? fmt::format(" {:.3f} |", r.preflight_s) : "";
    const std::string restarted =
        restart ? fmt::format(" {:.3f} | {} |", r.restart_s, bench::describe(r.store)) : "";
    if (r.ok) {
      out << fmt::format("| {} | {:.3f} |{}{} {:.3f} | {:.1f} |\n", r.nodes, r.round_s, checked,
                         restarted, r.barrier_s, r.rss_per_agent_kib);
    } else {
      out << fmt::format("| {} | failed |{}{} failed | |\n", r.nodes, preflight ? " failed |" : "",
                         restart ? " failed | |" : "");
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

const char* restart_name(Failing restart) {
  return restart == Failing::failure ? "failure" : restart == Failing::lost ? "lost" : "none";
}

void write_json(const std::string& path, const std::vector<Result>& results,
                const Settings& settings, const std::string& command) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json row = {{"nodes", r.nodes},
                          {"round_s", r.round_s},
                          {"barrier_s", r.barrier_s},
                          {"preflight_s", r.preflight_s},
                          {"rss_per_agent_kib", r.rss_per_agent_kib},
                          {"ok", r.ok}};
    if (settings.restart != Failing::none) {
      row["restart_s"] = r.restart_s;
      row["store"] = bench::to_json(r.store);
    }
    rows.push_back(std::move(row));
  }
  const nlohmann::json record = {{"benchmark", "rendezvous_scale"},
                                 {"command", command},
                                 {"settings",
                                  {{"token", settings.token},
                                   {"preflight", settings.preflight},
                                   {"restart", restart_name(settings.restart)}}},
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
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else if (arg == "--write" && i + 1 < argc) {
      write_path = argv[++i];
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--token") {
      settings.token = true;
    } else if (arg == "--preflight") {
      settings.preflight = true;
    } else if (arg == "--restart" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "failure" || std::string(argv[i + 1]) == "lost")) {
      settings.restart = std::string(argv[++i]) == "lost" ? Failing::lost : Failing::failure;
    } else {
      std::fprintf(stderr,
                   "usage: rendezvous_scale [--sizes 16,256,1024,4096,16384] [--token] "
                   "[--preflight] [--restart failure|lost] [--write FILE] [--json FILE]\n");
      return 2;
    }
  }
  int largest = 0;
  for (int n : sizes) largest = std::max(largest, n);
  // Each process (host, simulated agents, their checks of rank 0) holds one descriptor per agent,
  // and a few more; with --restart, the host holds both ends of each rank's store connection.
  if (!raise_fd_limit(largest + 256)) return 1;
  if (settings.restart != Failing::none) {
    // The store's clear: where the limit stays below, the sizes past it say so in their row
    // (descriptor_shortfall), and the restart itself is measured all the same.
    const auto most = static_cast<long>(trainrun::launch::StoreLimits{}.max_connections);
    raise_fd_limit(bench::store_clear_descriptors(std::min<long>(long{largest} * kRanksPerNode, most)),
                   true);
  }

  std::vector<Result> results;
  bool all_ok = true;
  for (int n : sizes) {
    results.push_back(measure(n, settings));
    all_ok = all_ok && results.back().ok;
  }
  std::string text = table(results, settings);
  std::fputs(text.c_str(), stdout);
  if (!write_path.empty()) write_section(write_path, text);
  if (!json_path.empty()) write_json(json_path, results, settings, command);
  return all_ok ? 0 : 1;
}
