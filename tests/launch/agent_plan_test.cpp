#include "agent/agent_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>

using namespace trainrun::launch;

namespace {

bool has(const std::vector<std::string>& envp, const std::string& entry) {
  return std::find(envp.begin(), envp.end(), entry) != envp.end();
}

}  // namespace

TEST_CASE("a rendezvous only when more than one node may take part", "[agent]") {
  LaunchConfig c;
  CHECK_FALSE(uses_rendezvous(c));  // one node, static backend
  c.max_nodes = 2;
  CHECK(uses_rendezvous(c));
  c.max_nodes = 1;
  c.rdzv_backend = RendezvousBackend::c10d;
  CHECK(uses_rendezvous(c));
  c.standalone = true;
  CHECK_FALSE(uses_rendezvous(c));
}

TEST_CASE("the port held for worker RANK 0's store", "[agent]") {
  LaunchConfig c;
  c.master_port = 29511;
  CHECK(port_to_hold(c, false) == 0);  // single node: any free port
  c.master_port_given = true;
  CHECK(port_to_hold(c, false) == 29511);
  c.node_rank = 0;
  CHECK(port_to_hold(c, true) == 29511);  // static: the node of RANK 0 holds the given port
  c.node_rank = 1;
  CHECK_FALSE(port_to_hold(c, true).has_value());
  c.rdzv_backend = RendezvousBackend::c10d;
  CHECK(port_to_hold(c, true) == 0);  // dynamic: every node offers a free port
}

TEST_CASE("a worker's launch: arguments, environment, output and prefix", "[agent]") {
  LaunchConfig c;
  c.entrypoint = "./train_${local_rank}";
  c.entry_args = {"--rank=${local_rank}", "$$HOME"};
  c.role = "trainer";
  c.log_line_prefix_template = "[${rank}@${hostname}]";
  Topology t;
  t.base_rank = 4;
  t.local_world_size = 2;
  t.world_size = 8;
  t.master_addr = "node0";
  t.master_port = 29500;
  const JobSettings job = job_settings(c, "run7");
  CHECK(job.run_id == "run7");
  CHECK(job.role == "trainer");
  const std::map<std::string, std::string> inherited = {{"PATH", "/bin"}};
  WorkerLaunch w = worker_launch(c, "/work/train_${local_rank}", t, job, 1, "/logs/run7/0/1",
                                 "node1", inherited);
  CHECK(w.local_rank == 1);
  CHECK(w.program == "/work/train_${local_rank}");
  // The program's own name is never expanded; its arguments are.
  CHECK(w.argv == std::vector<std::string>{"./train_${local_rank}", "--rank=1", "$HOME"});
  CHECK(has(w.envp, "PATH=/bin"));
  CHECK(has(w.envp, "RANK=5"));
  CHECK(has(w.envp, "TORCHELASTIC_RUN_ID=run7"));
  CHECK(has(w.envp, "TORCHELASTIC_ERROR_FILE=/logs/run7/0/1/error.json"));
  CHECK(w.prefix == "[5@node1]");
  CHECK(error_file_in("/logs/run7/0/1") == "/logs/run7/0/1/error.json");
}

TEST_CASE("the attempt and node lines", "[agent]") {
  Topology t;
  t.base_rank = 4;
  t.world_size = 8;
  t.master_addr = "node0";
  t.master_port = 29500;
  t.restart_count = 2;
  CHECK(attempt_line(t, 4) ==
        "attempt 2: starting 4 workers (ranks 4..7 of 8), MASTER_ADDR=node0 MASTER_PORT=29500");
  CHECK(attempt_line(t, 1) ==
        "attempt 2: starting 1 worker (ranks 4..4 of 8), MASTER_ADDR=node0 MASTER_PORT=29500");

  trainrun::rendezvous::Assignment a;
  a.group_rank = 1;
  a.group_world_size = 2;
  a.base_rank = 4;
  a.local_world_size = 4;
  CHECK(node_line(a, "node1", "10.0.0.2") ==
        "node rank 1 of 2 nodes (host node1, advertising 10.0.0.2; ranks 4..7)");
  CHECK(node_line(a, "node1", "") ==
        "node rank 1 of 2 nodes (host node1, advertising ?; ranks 4..7)");
}

TEST_CASE("a dynamic job's --node-rank not given in a round is said in one line", "[agent]") {
  trainrun::rendezvous::Assignment a;
  a.round = 1;
  a.group_rank = 1;
  a.group_world_size = 2;
  CHECK(preference_line(a, -1).empty());
  CHECK(preference_line(a, 1).empty());
  CHECK(preference_line(a, 3) ==
        "--node-rank=3 not free: round 1 has 2 nodes (0..1); this node is node rank 1");
  CHECK_THAT(preference_line(a, 0),
             Catch::StartsWith("--node-rank=0 not free: another node holds it in round 1 (") &&
                 Catch::EndsWith("); this node is node rank 1"));
}

TEST_CASE("a Python worker runs with -X faulthandler unless PYTHONFAULTHANDLER is set", "[agent]") {
  LaunchConfig c;
  c.entry_mode = EntryMode::python_script;
  c.python_exec = "python3";
  c.entrypoint = "train.py";
  const JobSettings job = job_settings(c, "run7");
  auto argv = [&](const std::map<std::string, std::string>& inherited) {
    return worker_launch(c, "/usr/bin/python3", Topology{}, job, 0, "/logs/0/0", "node1", inherited)
        .argv;
  };
  CHECK(argv({}) == std::vector<std::string>{"python3", "-X", "faulthandler", "-u", "train.py"});
  CHECK(argv({{"PYTHONFAULTHANDLER", ""}}) ==
        std::vector<std::string>{"python3", "-u", "train.py"});
}

TEST_CASE("a one-node job's MASTER_ADDR is torchrun 2.x's", "[agent]") {
  int asked = 0;
  auto name = [&](std::string answer) {
    return [&asked, answer] {
      ++asked;
      return answer;
    };
  };
  LaunchConfig c;  // static, no port given: torchrun's one-node c10d
  CHECK(one_node_master_addr(c, name("gpu1.example.org")) == "gpu1.example.org");
  CHECK(one_node_master_addr(c, name("")) == "127.0.0.1");
  c.local_addr = "10.0.0.7";
  CHECK(one_node_master_addr(c, name("gpu1.example.org")) == "10.0.0.7");
  c.local_addr.clear();
  c.standalone = true;
  CHECK(one_node_master_addr(c, name("gpu1.example.org")) == "gpu1.example.org");
  asked = 0;
  c.standalone = false;
  c.master_port_given = true;  // torchrun's static rendezvous: the master as given
  c.master_addr = "node0";
  CHECK(one_node_master_addr(c, name("gpu1.example.org")) == "node0");
  c.master_port_given = false;
  c.rdzv_endpoint = "node0:29500";
  CHECK(one_node_master_addr(c, name("gpu1.example.org")) == "node0");
  CHECK(asked == 0);
}

TEST_CASE("torchrun 2.x runs one static node without a port as --standalone", "[agent]") {
  LaunchConfig c;
  CHECK(standalone_in_torchrun(c));
  c.master_port_given = true;
  CHECK_FALSE(standalone_in_torchrun(c));
  c.master_port_given = false;
  c.rdzv_endpoint = "node0:29500";
  CHECK_FALSE(standalone_in_torchrun(c));
  c.rdzv_endpoint.clear();
  c.max_nodes = 2;
  CHECK_FALSE(standalone_in_torchrun(c));
  c.standalone = true;
  CHECK(standalone_in_torchrun(c));
}

namespace {

std::string described(const Topology& t) {
  return fmt::format("node {}/{} base {} local {} world {} master {}:{} restart {}", t.group_rank,
                     t.group_world_size, t.base_rank, t.local_world_size, t.world_size,
                     t.master_addr, t.master_port, t.restart_count);
}

}  // namespace

TEST_CASE("an attempt's topology, alone or as the rendezvous assigned it", "[agent]") {
  LaunchConfig c;
  c.nproc_per_node = 4;
  c.master_addr = "10.0.0.1";
  CHECK(described(single_node_topology(c, "", 29500)) ==
        "node 0/1 base 0 local 4 world 4 master 10.0.0.1:29500 restart 0");
  CHECK(single_node_topology(c, "gpu1.example.org", 29500).master_addr == "gpu1.example.org");

  const trainrun::rendezvous::Assignment a{7, 1, 2, 4, 4, 8, "node0", 29600, 2, 3, {}};
  c.max_nodes = 2;
  CHECK(described(assigned_topology(a, c, "gpu1.example.org")) ==
        "node 1/2 base 4 local 4 world 8 master node0:29600 restart 2");
  // A job that only ever has this node names its store as torchrun 2.x does.
  c.max_nodes = 1;
  CHECK(assigned_topology(a, c, "gpu1.example.org").master_addr == "gpu1.example.org");
  CHECK(assigned_topology(a, c, "").master_addr == "node0");
}
