// What the rendezvous benchmarks count while a round forms: agents assigned, stopped, failed.
#pragma once

#include <cstdio>
#include <string>

#include "trainrun/rendezvous/handler.hpp"

namespace trainrun::rendezvous::bench {

struct RoundCounts {
  int assigned = 0, stopped = 0, failed = 0;

  // Events that count into this object (which must outlive them); a failed stop is printed,
  // prefixed with `who`.
  ClientEvents events(std::string who) {
    ClientEvents e;
    e.on_assignment = [this](const Assignment&) { ++assigned; };
    e.on_stop = [this, who](const Stop& s) {
      ++stopped;
      if (s.exit_code != 0) {
        ++failed;
        std::fprintf(stderr, "%s: %s\n", who.c_str(), s.reason.c_str());
      }
    };
    return e;
  }
};

}  // namespace trainrun::rendezvous::bench
