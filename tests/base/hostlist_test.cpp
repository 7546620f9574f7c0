#include "trainrun/base/hostlist.hpp"

#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <vector>

using trainrun::HostList;
using Names = std::vector<std::string>;

namespace {

Names expand(const std::string& text) {
  const HostList list = HostList::parse(text);
  const Names names = list.expand();
  CHECK(list.size() == names.size());
  CHECK(list.first() == names.front());
  return names;
}

std::string reason(const std::string& text) {
  try {
    HostList::parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

// The forms of Slurm's documentation (sbatch/srun "HOSTNAME ENVIRONMENT", scontrol show
// hostnames), with what scontrol 22.05 prints for each.
TEST_CASE("Slurm's documented host-list forms expand as scontrol lists them", "[hostlist]") {
  CHECK(expand("node[01-04,07]") == Names{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand("gpu-a[1-2],gpu-b3") == Names{"gpu-a1", "gpu-a2", "gpu-b3"});
  CHECK(expand("tux[1-3]") == Names{"tux1", "tux2", "tux3"});
  CHECK(expand("lx[10-12,15]") == Names{"lx10", "lx11", "lx12", "lx15"});
  CHECK(expand("n1") == Names{"n1"});
  CHECK(expand("n1,n2") == Names{"n1", "n2"});
}

TEST_CASE("a range keeps the zero padding of its first number", "[hostlist]") {
  CHECK(expand("n[08-10]") == Names{"n08", "n09", "n10"});
  CHECK(expand("n[8-10]") == Names{"n8", "n9", "n10"});
  CHECK(expand("n[1-010]").size() == 10);
  CHECK(expand("n[001-3,5]") == Names{"n001", "n002", "n003", "n5"});
  CHECK(expand("n[0000]") == Names{"n0000"});
}

TEST_CASE("several bracket groups in a name: the first varies slowest", "[hostlist]") {
  CHECK(expand("rack[1-2]-node[1-3]") == Names{"rack1-node1", "rack1-node2", "rack1-node3",
                                               "rack2-node1", "rack2-node2", "rack2-node3"});
  CHECK(expand("n[001-3,5]x[1-2]") ==
        Names{"n001x1", "n001x2", "n002x1", "n002x2", "n003x1", "n003x2", "n5x1", "n5x2"});
  CHECK(expand("[1-3]") == Names{"1", "2", "3"});
  CHECK(expand("n[1-2]-ib") == Names{"n1-ib", "n2-ib"});
}

TEST_CASE("commas inside and outside brackets, order and repeats kept", "[hostlist]") {
  CHECK(expand("a[1,3],b[2-3,5],c") == Names{"a1", "a3", "b2", "b3", "b5", "c"});
  CHECK(expand("n[2,1,1]") == Names{"n2", "n1", "n1"});
  CHECK(expand("a,,b,") == Names{"a", "b"});  // empty names skipped, as Slurm does
  CHECK(expand("a b") == Names{"a", "b"});
}

TEST_CASE("first() and size() need no expansion of a large list", "[hostlist]") {
  const HostList big = HostList::parse("n[000001-999999],m[1-48575]");
  CHECK(big.size() == 999999 + 48575);
  CHECK(big.first() == "n000001");
}

TEST_CASE("bad host lists are refused with the reason", "[hostlist]") {
  CHECK(reason("") == "no host name in the list");
  CHECK(reason(",") == "no host name in the list");
  CHECK(reason("a[3-1]") == "range '3-1' runs backwards");
  CHECK(reason("a[]") == "empty brackets []");
  CHECK(reason("a[1-2") == "'[' without ']'");
  CHECK(reason("a]") == "']' without '['");
  CHECK(reason("n[1-2]]") == "']' without '['");
  CHECK(reason("n[[1]") == "nested '['");
  CHECK(reason("n[a-b]") == "range 'a-b' is not N or N-M with digits");
  CHECK(reason("n[1-]") == "range '1-' needs numbers of 1 to 18 digits");
  CHECK(reason("n[-1]") == "range '-1' needs numbers of 1 to 18 digits");
  CHECK(reason("n[1,,2]") == "range '' needs numbers of 1 to 18 digits");
  CHECK(reason("n[1-2-3]") == "range '1-2-3' is not N or N-M with digits");
  CHECK(reason("n[1234567890123456789]") ==
        "range '1234567890123456789' needs numbers of 1 to 18 digits");
  CHECK(reason("n[0-1048576]") == "more than 1048576 host names");
  CHECK(reason("a[1-1024]b[1-1025]") == "more than 1048576 host names");
  CHECK(reason("n[0-999999999999999999]") == "more than 1048576 host names");
}
