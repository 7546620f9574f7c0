#include "trainrun/rendezvous/endpoint.hpp"

#include <catch2/catch.hpp>

using namespace trainrun::rendezvous;

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
