#include "trainrun/launch/workers/descriptors.hpp"

#include <sys/resource.h>

#include <catch2/catch.hpp>

using namespace trainrun::launch;

namespace {

// Sets the soft descriptor limit of this test process for the scope, then puts it back.
struct SoftLimit {
  rlimit saved{};
  explicit SoftLimit(rlim_t soft) {
    ::getrlimit(RLIMIT_NOFILE, &saved);
    rlimit changed = saved;
    changed.rlim_cur = soft;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &changed) == 0);
  }
  ~SoftLimit() { ::setrlimit(RLIMIT_NOFILE, &saved); }
};

}  // namespace

TEST_CASE("the server's connections fit in what the workers leave of 1,024 descriptors",
          "[launch]") {
  SoftLimit limit(1024);
  for (std::size_t workers : {1, 8, 64}) {
    const auto limits = server_limits_for(workers);
    const std::size_t left = 1024 - kLauncherDescriptors - kDescriptorsPerWorker * workers;
    CHECK(limits.max_pending + limits.max_admitted <= left);
    CHECK(limits.max_pending <= left / 4);
    CHECK(limits.max_pending >= 8);
  }
}

TEST_CASE("with descriptors to spare the server keeps its default counts", "[launch]") {
  rlimit current{};
  ::getrlimit(RLIMIT_NOFILE, &current);
  if (current.rlim_max != RLIM_INFINITY && current.rlim_max < 20000) {
    SUCCEED("the hard descriptor limit here is below 20,000");
    return;
  }
  SoftLimit limit(20000);
  const auto limits = server_limits_for(8);
  CHECK(limits.max_pending == trainrun::rendezvous::ServerLimits{}.max_pending);
  CHECK(limits.max_admitted == trainrun::rendezvous::ServerLimits{}.max_admitted);
}

TEST_CASE("the store's agent says at start where its descriptor limit cannot hold every rank",
          "[descriptors]") {
  // 1,000 ranks, 8 of them here: 1,000 + 64 + 64 descriptors.
  CHECK_FALSE(store_descriptor_shortfall(1000, 8, 1128, 1128));
  const auto line = store_descriptor_shortfall(1000, 8, 1024, 1024);
  REQUIRE(line);
  CHECK(*line ==
        "the job's c10d store holds a connection from each of its 1000 ranks, and this agent may "
        "open 1024 files (RLIMIT_NOFILE, hard limit 1024): ranks past that wait to connect until "
        "others close; `ulimit -n 1128` before trainrun (as root, or LimitNOFILE= for a service) "
        "gives it room");
  CHECK(store_descriptor_shortfall(100000, 8, 524288, 1048576) == std::nullopt);
}
