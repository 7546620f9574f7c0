#include "rendezvous_options.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "config.hpp"
#include "rendezvous_token.hpp"
#include "trainrun/rendezvous/endpoint.hpp"

using namespace trainrun::launch;
using namespace trainrun::rendezvous;
using std::chrono::seconds;

namespace {

LaunchConfig c10d(const std::string& endpoint, int min = 2, int max = 2) {
  LaunchConfig c;
  c.rdzv_backend = "c10d";
  c.rdzv_endpoint = endpoint;
  c.rdzv_id = "job7";
  c.min_nodes = min;
  c.max_nodes = max;
  return c;
}

}  // namespace

TEST_CASE("endpoints parse with a default port", "[rendezvous]") {
  CHECK(parse_endpoint("node0").host == "node0");
  CHECK(parse_endpoint("node0").port == 29400);
  CHECK(parse_endpoint("node0:1234").port == 1234);
  CHECK(parse_endpoint("[::1]:77").host == "::1");
  CHECK(parse_endpoint("[::1]:77").port == 77);
  CHECK(parse_endpoint("fe80::1").host == "fe80::1");
  CHECK_THROWS_WITH(parse_endpoint(":80"), Catch::Contains("the host is empty"));
  CHECK_THROWS_WITH(parse_endpoint("h:http"), Catch::Contains("not a number"));
  CHECK_THROWS_WITH(parse_endpoint("h:70000"), Catch::Contains("0..65535"));
  CHECK_THROWS(parse_endpoint("[::1"));
}

TEST_CASE("c10d options take defaults and --rdzv-conf keys", "[rendezvous]") {
  LaunchConfig c = c10d("node0:29401", 2, 4);
  c.max_restarts = 3;
  RendezvousOptions o = rendezvous_options(c, {});
  CHECK_FALSE(o.static_backend);
  CHECK(o.endpoint.host == "node0");
  CHECK(o.endpoint.port == 29401);
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 4);
  CHECK(o.max_restarts == 3);
  CHECK(o.join_timeout == seconds(600));
  CHECK(o.last_call_timeout == seconds(30));
  CHECK(o.heartbeat_timeout <= seconds(15));
  CHECK_FALSE(o.is_host);
  CHECK_FALSE(o.token);

  c.rdzv_conf = {{"join_timeout", "20"},
                 {"heartbeat_timeout", "3"},
                 {"is_host", "1"},
                 {"last_call_timeout", "0.5"}};
  o = rendezvous_options(c, {});
  CHECK(o.join_timeout == seconds(20));
  CHECK(o.heartbeat_timeout == seconds(3));
  CHECK(o.keep_alive_interval == seconds(1));
  CHECK(o.is_host == true);
  CHECK(o.last_call_timeout == std::chrono::milliseconds(500));
}

TEST_CASE("bad rendezvous options are refused naming the option", "[rendezvous]") {
  auto refused = [](LaunchConfig c, const std::string& what) {
    CHECK_THROWS_WITH(rendezvous_options(c, {}), Catch::Contains(what));
  };
  refused(c10d(""), "needs --rdzv-endpoint");
  refused(c10d("node0:x"), "--rdzv-endpoint=");
  LaunchConfig c = c10d("node0");
  c.rdzv_conf = {{"join_timout", "5"}};
  refused(c, "unknown key");
  c.rdzv_conf = {{"join_timeout", "-5"}};
  refused(c, "join_timeout=-5");
  c.rdzv_conf = {{"heartbeat_timeout", "2"}, {"keep_alive_interval", "5"}};
  refused(c, "must exceed keep_alive_interval");
  c.rdzv_conf = {{"is_host", "maybe"}};
  refused(c, "is_host=maybe");
  c = c10d("node0");
  c.rdzv_backend = "etcd";
  refused(c, "not available in this build");
  c = c10d("node0:0");
  refused(c, "port 0 only works with");

  LaunchConfig s;
  s.rdzv_backend = "static";
  s.min_nodes = 2;
  s.max_nodes = 3;
  refused(s, "needs a fixed node count");
  s.min_nodes = 3;
  s.node_rank = 3;
  refused(s, "--node-rank=3: out of range");
}

TEST_CASE("the static backend serves on MASTER_PORT + 1 unless rdzv_port is given",
          "[rendezvous]") {
  LaunchConfig s;
  s.rdzv_backend = "static";
  s.min_nodes = s.max_nodes = 2;
  s.node_rank = 1;
  s.master_addr = "node0";
  s.master_port = 29500;
  RendezvousOptions o = rendezvous_options(s, {});
  CHECK(o.static_backend);
  CHECK(o.node_rank == 1);
  CHECK(o.endpoint.host == "node0");
  CHECK(o.endpoint.port == 29501);
  CHECK(o.static_master.port == 29500);
  s.rdzv_conf = {{"rdzv_port", "4000"}};
  CHECK(rendezvous_options(s, {}).endpoint.port == 4000);
}

TEST_CASE("the token comes from token_file, else TRAINRUN_RDZV_TOKEN", "[rendezvous]") {
  CHECK_FALSE(load_token({}, {}));
  CHECK(load_token({}, {{"TRAINRUN_RDZV_TOKEN", "abc\n"}}) == std::string("abc"));
  CHECK_THROWS_WITH(load_token({}, {{"TRAINRUN_RDZV_TOKEN", " \n"}}), Catch::Contains("blank"));
  std::string path = "rdzv_token_test_" + std::to_string(::getpid());
  {
    std::ofstream out(path);
    out << "from-file\n";
  }
  CHECK(load_token({{"token_file", path}}, {{"TRAINRUN_RDZV_TOKEN", "env"}}) ==
        std::string("from-file"));
  { std::ofstream out(path); }
  CHECK_THROWS_WITH(load_token({{"token_file", path}}, {}), Catch::Contains("the file is empty"));
  std::remove(path.c_str());
  CHECK_THROWS_WITH(load_token({{"token_file", path}}, {}), Catch::Contains("cannot read it"));
}
