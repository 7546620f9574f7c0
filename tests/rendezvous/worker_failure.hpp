#pragma once

#include <string>

#include "trainrun/rendezvous/messages.hpp"

namespace trainrun::rendezvous {

// One failed worker as a node reports it: local rank 0, exit `code`, its error file dated
// `timestamp`. For the tests of either backend's conclusion.
inline WorkerFailure worker_failure(const std::string& host, int rank, int code, double timestamp) {
  WorkerFailure w;
  w.host = host;
  w.rank = rank;
  w.local_rank = 0;
  w.pid = 100 + rank;
  w.exit_code = code;
  w.timestamp = timestamp;
  return w;
}

}  // namespace trainrun::rendezvous
