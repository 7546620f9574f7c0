// Rendezvous round time, the built-in backend against the etcd one, through the interface the
// agent uses (RendezvousHandler): N handlers in this process on one event loop, each joining
// like an agent; the time from start() to the last assignment (round formed) and from the
// first report_done() to the last stop (exit barrier). Medians of --runs rounds per size, a
// fresh run id each. The built-in rendezvous is hosted by the first handler on a free port; the
// etcd one needs a running etcd at --etcd HOST:PORT (see docs/benchmarks.md).
//
//   rendezvous_backends --etcd 127.0.0.1:2379 [--sizes 2,8,64] [--runs 5] [--write FILE]

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/round_counts.hpp"
#include "test_support.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/rendezvous/etcd.hpp"
#include "trainrun/rendezvous/handler.hpp"

using namespace trainrun::rendezvous;
namespace asio = boost::asio;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Times {
  double round_s = -1;
  double barrier_s = -1;
};

double since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

Times one_round(int n, const HostPort* etcd) {
  asio::io_context io;
  TcpRendezvousOptions base;
  base.endpoint = etcd ? *etcd : HostPort{"127.0.0.1", trainrun::test::free_port()};
  base.credentials.run_id = "bench-" + trainrun::random_hex(6);
  base.round.min_nodes = base.round.max_nodes = n;
  base.local_addr = "127.0.0.1";
  bench::RoundCounts counts;
  std::vector<std::unique_ptr<RendezvousHandler>> handlers;
  const auto start = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    TcpRendezvousOptions o = base;
    o.is_host = i == 0;
    LogFunction log;  // quiet: failures come back as stops
    handlers.push_back(etcd ? make_etcd_rendezvous_handler(io, o, log)
                            : make_rendezvous_handler(io, o, log));
    handlers.back()->start(counts.events("rendezvous_backends"));
    handlers.back()->join({1, 29500 + i});
  }
  auto run_until = [&](auto done) {
    const auto limit = SteadyClock::now() + std::chrono::seconds(60);
    while (!done() && counts.failed == 0 && SteadyClock::now() < limit) {
      io.run_for(std::chrono::milliseconds(1));
    }
    return done() && counts.failed == 0;
  };
  Times t;
  if (!run_until([&] { return counts.assigned == n; })) return t;
  t.round_s = since(start);
  const auto barrier = SteadyClock::now();
  for (auto& h : handlers) h->report_done();
  if (run_until([&] { return counts.stopped == n; })) t.barrier_s = since(barrier);
  handlers.clear();
  io.restart();
  io.run_for(std::chrono::milliseconds(200));
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

std::string cell(double s) { return s < 0 ? "failed" : fmt::format("{:.1f} ms", s * 1000); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {2, 8, 64};
  int runs = 5;
  std::string etcd_text, write_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
    } else if (arg == "--runs" && i + 1 < argc) {
      runs = std::stoi(argv[++i]);
    } else if (arg == "--etcd" && i + 1 < argc) {
      etcd_text = argv[++i];
    } else if (arg == "--write" && i + 1 < argc) {
      write_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: rendezvous_backends --etcd HOST:PORT [--sizes 2,8,64] "
                           "[--runs 5] [--write FILE]\n");
      return 2;
    }
  }
  if (etcd_text.empty()) {
    std::fprintf(stderr, "rendezvous_backends: --etcd HOST:PORT is required\n");
    return 2;
  }
  const HostPort etcd = parse_endpoint(etcd_text, 2379);
  std::ostringstream out;
  out << "| agents | built-in: round formed | etcd: round formed | built-in: exit barrier | "
         "etcd: exit barrier |\n|---:|---:|---:|---:|---:|\n";
  bool ok = true;
  for (int n : sizes) {
    std::vector<double> round[2], barrier[2];
    for (int r = 0; r < runs; ++r) {
      for (int b = 0; b < 2; ++b) {
        const Times t = one_round(n, b ? &etcd : nullptr);
        ok = ok && t.round_s >= 0 && t.barrier_s >= 0;
        round[b].push_back(t.round_s);
        barrier[b].push_back(t.barrier_s);
      }
    }
    out << fmt::format("| {} | {} | {} | {} | {} |\n", n, cell(median(round[0])),
                       cell(median(round[1])), cell(median(barrier[0])), cell(median(barrier[1])));
  }
  std::fputs(out.str().c_str(), stdout);
  if (!write_path.empty()) std::ofstream(write_path) << out.str();
  return ok ? 0 : 1;
}
