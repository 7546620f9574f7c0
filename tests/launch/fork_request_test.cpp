// The agent's side of the request the --preload template carries out. data/fork_request.json is
// the first case's request: the template's side (fork_request_test.py) decodes that file.
#include "workers/fork_request.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

using nlohmann::json;
using trainrun::SpawnRequest;
using trainrun::Stdio;
using trainrun::launch::fork_request;

namespace {

SpawnRequest worker() {
  SpawnRequest r;
  r.program = "/usr/bin/python3";
  r.argv = {"/usr/bin/python3", "-u", "train.py", "--lr=0.1"};
  r.env = std::vector<std::string>{"RANK=1", "PATH=/usr/bin"};
  r.in = Stdio::null();
  r.out = Stdio::from_fd(17);
  r.err = Stdio::from_fd(18);
  r.group = SpawnRequest::Group::new_session;
  r.death_signal = 9;
  return r;
}

}  // namespace

TEST_CASE("a worker's request: its fields by name, its descriptors in the order named",
          "[preload]") {
  SpawnRequest r = worker();
  r.argv.push_back("\xff\x80 x");
  r.env->push_back("NAME=\xe9");
  r.cwd = "/job";
  r.cgroup_fd = 20;
  r.kept_fd = 21;
  r.descriptor_limit = 4096;
  r.cpus = {2, 3};
  const auto request = fork_request(r, {true, true, true});
  REQUIRE(request);
  const json j = json::parse(request->json);
  std::ifstream shared(TRAINRUN_LAUNCH_TEST_DATA "/fork_request.json");
  CHECK(j == json::parse(shared));
  CHECK(j["argv"][2] == "train.py");
  CHECK(j["cwd"] == "/job");
  CHECK(j["group"] == "session");
  CHECK(j["death_signal"] == 9);
  CHECK(j["descriptor_limit"] == 4096);
  CHECK(j["streams"] == json({"null", "fd", "fd"}));
  CHECK(j["cgroup"] == true);
  CHECK(j["diagnosis"] == true);
  CHECK(j["cpus"] == json({2, 3}));
  CHECK(request->fds == std::vector<int>{17, 18, 20, 21});
}

TEST_CASE("a request without a cgroup, a channel, a limit, a working directory or a group",
          "[preload]") {
  SpawnRequest r = worker();
  r.group = SpawnRequest::Group::inherit;
  const auto request = fork_request(r, {true, true, true});
  REQUIRE(request);
  const json j = json::parse(request->json);
  CHECK(j["cwd"].is_null());
  CHECK(j["group"].is_null());
  CHECK(j["descriptor_limit"].is_null());
  CHECK(j["cgroup"] == false);
  CHECK(j["diagnosis"] == false);
  CHECK(j["cpus"] == json::array());
  CHECK(request->fds == std::vector<int>{17, 18});
}

TEST_CASE("a text that is not UTF-8 travels as its bytes; UTF-8 as a string", "[preload]") {
  SpawnRequest r = worker();
  r.argv = {"python3", "caf\xc3\xa9.py", "\xff\x80 x"};
  r.env = std::vector<std::string>{"NAME=\xe9t\xe9"};
  r.cwd = "/tmp/\xfe";
  const auto request = fork_request(r, {true, true, true});
  REQUIRE(request);
  const json j = json::parse(request->json);
  CHECK(j["argv"][1] == "caf\xc3\xa9.py");
  CHECK(j["argv"][2] == json({0xff, 0x80, 0x20, 0x78}));
  CHECK(j["env"][0] == json({'N', 'A', 'M', 'E', '=', 0xe9, 't', 0xe9}));
  CHECK(j["cwd"] == json({'/', 't', 'm', 'p', '/', 0xfe}));
}

TEST_CASE("an inherited stream is ours, or closed where ours is", "[preload]") {
  SpawnRequest r = worker();
  r.in = r.out = r.err = Stdio::inherit();
  const auto request = fork_request(r, {false, true, false});
  REQUIRE(request);
  CHECK(json::parse(request->json)["streams"] == json({"closed", "fd", "closed"}));
  CHECK(request->fds == std::vector<int>{1});
}

TEST_CASE("a stream asked for as a pipe is not the template's to carry out", "[preload]") {
  SpawnRequest r = worker();
  r.out = Stdio::pipe();
  CHECK_FALSE(fork_request(r, {true, true, true}));
}
