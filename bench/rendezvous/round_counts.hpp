// What the rendezvous benchmarks count while a round forms: agents assigned, stopped, failed.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

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

// The agent counts of --sizes: "16,256,1024".
inline std::vector<int> parse_sizes(const std::string& text) {
  std::vector<int> sizes;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) sizes.push_back(std::stoi(item));
  return sizes;
}

}  // namespace trainrun::rendezvous::bench
