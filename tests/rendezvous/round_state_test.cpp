// Members: the round state's lists of nodes, found by id through an index kept beside the list.
#include "trainrun/rendezvous/round_state.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "test_node.hpp"

using namespace trainrun::rendezvous;

namespace {

RoundMember member(const std::string& id) { return RoundMember{id, node(id), {}}; }

std::vector<std::string> ids(const Members& m) {
  std::vector<std::string> out;
  for (const RoundMember& r : m) out.push_back(r.id);
  return out;
}

// Every member is found at its own place, and an absent id is not found.
void check_index(const Members& m) {
  for (const RoundMember& r : m) {
    const RoundMember* found = m.find(r.id);
    REQUIRE(found != nullptr);
    CHECK(found == &r);
  }
  CHECK(m.find("absent") == nullptr);
}

}  // namespace

TEST_CASE("members: each change keeps every member findable at its place", "[members]") {
  Members w{member("a"), member("b")};
  check_index(w);
  w.push_back(member("c"));
  w.push_back(member("d"));
  check_index(w);
  CHECK(w.erase("b"));
  CHECK_FALSE(w.erase("b"));
  CHECK(ids(w) == std::vector<std::string>{"a", "c", "d"});
  CHECK(w.find("b") == nullptr);
  check_index(w);

  Members p;
  p.assign(w.begin(), w.begin() + 2);
  w.erase(w.begin(), w.begin() + 2);
  CHECK(ids(p) == std::vector<std::string>{"a", "c"});
  CHECK(ids(w) == std::vector<std::string>{"d"});
  CHECK(w.find("a") == nullptr);
  check_index(p);
  check_index(w);

  w.insert(w.begin(), p.begin(), p.end());
  CHECK(ids(w) == std::vector<std::string>{"a", "c", "d"});
  check_index(w);
  auto next = w.erase(w.begin());
  CHECK(next->id == "c");
  check_index(w);

  RoundMember* c = w.find("c");
  REQUIRE(c);
  c->node.nproc = 7;
  CHECK(w.find("c")->node.nproc == 7);

  w.clear();
  CHECK(w.empty());
  CHECK(w.find("c") == nullptr);
}

TEST_CASE("members: a repeated id is found first where it first is, as a search finds it",
          "[members]") {
  Members m{member("a"), member("x"), member("b")};
  RoundMember again = member("x");
  again.node.nproc = 9;
  m.push_back(again);
  CHECK(m.find("x") == &m[1]);
  CHECK(m.erase("x"));  // every one of them
  CHECK(ids(m) == std::vector<std::string>{"a", "b"});
  check_index(m);
}

TEST_CASE("members: a copy has its own index", "[members]") {
  Members a{member("a"), member("b")};
  Members b = a;
  a.erase("a");
  REQUIRE(b.find("a") != nullptr);
  CHECK(b.find("a") == &b[0]);
  CHECK(b.find("b") == &b[1]);
  check_index(a);
}
