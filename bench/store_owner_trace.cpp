// The cost of naming which worker of this node holds a connection to the job's store
// (lib/launch/src/agent/connection_owner: the agent asks it on its loop at each connection's
// first request). W child processes, each holding F more descriptors, as a Python worker holds
// its modules' and torch's, connect to a listening socket of this program and say their index;
// each connection is then named R times through the kernel's socket index (sock_diag) and the
// workers' /proc/PID/fd, as the agent names it, and the part of the fallback used where a kernel
// has no sock_diag (reading /proc/net/tcp and tcp6 whole and finding the socket's inode in them)
// is timed alike. Prints one JSON object. bench/store_owners.py runs it.
//
//   store_owner_trace --workers W [--fds F] [--repeat R]

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/connection_owner.hpp"
#include "trainrun/base/files.hpp"

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "store_owner_trace: %s\n", why.c_str());
  std::exit(1);
}

int number(const char* text, const char* what, int low, int high) {
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (!*text || *end || n < low || n > high)
    fail(std::string(what) + " must be a number in " + std::to_string(low) + ".." +
         std::to_string(high) + ", not \"" + text + "\"");
  return static_cast<int>(n);
}

tcp::endpoint endpoint_of(const sockaddr_in& a) {
  return tcp::endpoint(asio::ip::address_v4(ntohl(a.sin_addr.s_addr)), ntohs(a.sin_port));
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  int workers = 0, fds = 64, repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) fail(a + " needs a value");
    if (a == "--workers")
      workers = number(argv[++i], "--workers", 1, 1024);
    else if (a == "--fds")
      fds = number(argv[++i], "--fds", 0, 4096);
    else if (a == "--repeat")
      repeat = number(argv[++i], "--repeat", 1, 1000);
    else
      fail("unknown option " + a + " (--workers W [--fds F] [--repeat R])");
  }
  if (workers == 0) fail("--workers W is required");

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 4096) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail(std::string("cannot listen on 127.0.0.1: ") + std::strerror(errno));
  int hold[2];  // the children wait for its end
  if (::pipe(hold) != 0) fail(std::string("pipe: ") + std::strerror(errno));

  trainrun::launch::NodeWorkers node;
  for (int w = 0; w < workers; ++w) {
    const pid_t pid = ::fork();
    if (pid < 0) fail(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::close(hold[1]);
      for (int f = 0; f < fds; ++f)
        if (::dup(0) < 0) break;
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      const unsigned char index[2] = {static_cast<unsigned char>(w & 0xff),
                                      static_cast<unsigned char>(w >> 8)};
      if (s < 0 || ::connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
          ::write(s, index, 2) != 2)
        ::_exit(1);
      char byte;
      while (::read(hold[0], &byte, 1) > 0) {
      }
      ::_exit(0);
    }
    node.workers.push_back({w, w, pid, -1});
  }
  ::close(hold[0]);

  struct Connection {
    tcp::endpoint peer, local;
    int rank = 0;
  };
  std::vector<Connection> connections;
  std::vector<int> accepted;
  for (int w = 0; w < workers; ++w) {
    sockaddr_in peer{}, local{};
    socklen_t peer_length = sizeof peer, local_length = sizeof local;
    const int c = ::accept4(listener, reinterpret_cast<sockaddr*>(&peer), &peer_length,
                            SOCK_CLOEXEC);
    unsigned char index[2];
    if (c < 0 || ::recv(c, index, 2, MSG_WAITALL) != 2 ||
        ::getsockname(c, reinterpret_cast<sockaddr*>(&local), &local_length) != 0)
      fail("a worker did not connect");
    accepted.push_back(c);
    connections.push_back({endpoint_of(peer), endpoint_of(local), index[0] | index[1] << 8});
  }

  nlohmann::json sock_diag = nlohmann::json::array(), table = nlohmann::json::array();
  std::size_t table_lines = 0;
  for (int r = 0; r < repeat; ++r) {
    for (const Connection& c : connections) {
      const auto start = Clock::now();
      const std::optional<int> rank = trainrun::launch::connection_rank(c.peer, c.local, node);
      sock_diag.push_back(micros(Clock::now() - start));
      if (rank != c.rank) fail("a connection was named wrongly");
    }
    for (const Connection& c : connections) {
      const auto start = Clock::now();
      std::optional<unsigned long> inode;
      for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        const std::optional<std::string> text = trainrun::read_file(path);
        if (!text) continue;
        if (r == 0 && &c == &connections.front())
          for (char ch : *text) table_lines += ch == '\n';
        if ((inode = trainrun::launch::client_socket_inode(*text, c.peer, c.local))) break;
      }
      table.push_back(micros(Clock::now() - start));
      if (!inode) fail("a connection's socket is not in /proc/net/tcp");
    }
  }

  ::close(hold[1]);
  for (int c : accepted) ::close(c);
  for (const auto& w : node.workers) ::waitpid(w.pid, nullptr, 0);
  const nlohmann::json out = {{"workers", workers},
                              {"fds", fds},
                              {"repeat", repeat},
                              {"table_lines", table_lines},
                              {"sock_diag_us", sock_diag},
                              {"table_us", table}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
