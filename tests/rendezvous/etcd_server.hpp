// A real etcd (/usr/bin/etcd) for the tests of the etcd backend, started once per test process on
// free ports, with its data in a temporary directory; killed when the process exits.
#pragma once

#include <memory>
#include <string>

namespace trainrun::test {

class EtcdServer {
 public:
  // Null, with a warning, where /usr/bin/etcd is not installed or does not start.
  static const EtcdServer* get();
  ~EtcdServer();
  // "http://127.0.0.1:port", and "127.0.0.1:port".
  const std::string& url() const { return url_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  static std::unique_ptr<EtcdServer> start();
  EtcdServer() = default;

  int pid_ = -1;
  std::string url_;
  std::string endpoint_;
};

}  // namespace trainrun::test
