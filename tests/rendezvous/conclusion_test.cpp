// The pure rules of a job's conclusion that both backends share (conclusion.hpp).
#include "trainrun/rendezvous/conclusion.hpp"

#include <catch2/catch.hpp>

#include "worker_failure.hpp"

using namespace trainrun::rendezvous;

TEST_CASE("failures that must fit in one stored value keep their head and count the rest",
          "[rendezvous]") {
  std::vector<WorkerFailure> list;
  for (int rank = 0; rank < 8; ++rank) {
    list.push_back(worker_failure("h", rank, 1, rank));
    list.back().traceback = std::string(kMaxRelayedTraceback, '\x01');  // 6 bytes each escaped
  }
  int not_relayed = 3;
  fit_failures(list, not_relayed, 64 * 1024);
  // 8 × 24 KiB escaped does not fit in 64 KiB: the earliest two do.
  REQUIRE(list.size() == 2);
  CHECK(list[1].rank == 1);
  CHECK(not_relayed == 3 + 6);

  fit_failures(list, not_relayed, 1);  // the first always stays
  CHECK(list.size() == 1);
  CHECK(not_relayed == 10);
}
