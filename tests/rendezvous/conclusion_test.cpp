// The pure rules of a job's conclusion that both backends share (conclusion.hpp).
#include "conclusion.hpp"

#include <catch2/catch.hpp>

#include "frame.hpp"
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

TEST_CASE("the longest failure lists, all control characters, still travel in one frame",
          "[rendezvous]") {
  std::vector<WorkerFailure> list;
  for (int rank = 0; rank < static_cast<int>(kMaxRelayedFailures); ++rank) {
    list.push_back(worker_failure("h", rank, 1, 1000 - rank));  // the last rank is the earliest
    list.back().message = std::string(kMaxRelayedTraceback, '\x01');
    list.back().traceback = std::string(kMaxRelayedTraceback, '\x02');
  }
  // As a node would have sent them: over the frame limit, so the host refused the report.
  REQUIRE(encode(ClientMessage{Ended{3, list, 0}}).size() > kMaxFrameSize);

  const Ended sent = relayed_failures(3, list, 2);
  CHECK(encode(ClientMessage{sent}).size() <= kMaxFrameSize);
  CHECK(sent.round == 3);
  CHECK(sent.failures.size() + static_cast<std::size_t>(sent.not_relayed) == list.size() + 2);
  CHECK(sent.failures.front().rank == 0);  // the node's own order: its head is kept

  const Stop stop = concluded_stop(std::vector<Ended>{Ended{3, list, 0}}, "");
  CHECK(encode(ServerMessage{stop}).size() <= kMaxFrameSize);
  CHECK(stop.failures.front().rank == static_cast<int>(kMaxRelayedFailures) - 1);  // root cause
  CHECK(stop.failures.size() + static_cast<std::size_t>(stop.not_relayed) == list.size());
}
