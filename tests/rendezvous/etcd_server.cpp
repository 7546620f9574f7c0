#include "etcd_server.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "etcd_client.hpp"
#include "test_support.hpp"

namespace trainrun::test {

using namespace std::chrono_literals;

const EtcdServer* EtcdServer::get() {
  static std::unique_ptr<EtcdServer> server = start();
  return server.get();
}

EtcdServer::~EtcdServer() {
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

std::unique_ptr<EtcdServer> EtcdServer::start() {
  const char* etcd = "/usr/bin/etcd";
  if (::access(etcd, X_OK) != 0) return nullptr;
  const std::string dir = make_temp_dir("test-etcd");
  const std::string client = "http://127.0.0.1:" + std::to_string(free_port());
  const std::string peer = "http://127.0.0.1:" + std::to_string(free_port());
  const std::string log = dir + "/etcd.log";
  const std::string data = dir + "/data";
  const std::string cluster = "t=" + peer;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(etcd, etcd, "--name", "t", "--data-dir", data.c_str(), "--listen-client-urls",
            client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls",
            peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster",
            cluster.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto server = std::unique_ptr<EtcdServer>(new EtcdServer);
  server->pid_ = pid;
  server->url_ = client;
  server->endpoint_ = client.substr(std::string("http://").size());
  boost::asio::io_context io;
  rendezvous::EtcdClient probe(io, client);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (probe.post_now("/v3/maintenance/status", "{}", 1000ms).ok()) return server;
    std::this_thread::sleep_for(100ms);
  }
  WARN("etcd did not start on " << client << "; see " << log);
  return nullptr;
}

}  // namespace trainrun::test
