// Members: the round state's lists of nodes, found by id through an index kept beside the list.
#include "round_state.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
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

// Every member is found at its own place (the first of those with its id), and an absent id is
// not found.
void check_index(const Members& m) {
  for (const RoundMember& r : m) {
    const RoundMember* found = m.find(r.id);
    REQUIRE(found != nullptr);
    const RoundMember* first = &*std::find_if(
        m.begin(), m.end(), [&](const RoundMember& other) { return other.id == r.id; });
    CHECK(found == first);
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

namespace {

// What Members replaced: a plain list searched from the front.
struct PlainList {
  std::vector<RoundMember> v;
  const RoundMember* find(const std::string& id) const {
    for (const RoundMember& m : v)
      if (m.id == id) return &m;
    return nullptr;
  }
  bool erase(const std::string& id) {
    const auto before = v.size();
    v.erase(std::remove_if(v.begin(), v.end(), [&](const RoundMember& m) { return m.id == id; }),
            v.end());
    return v.size() != before;
  }
};

}  // namespace

TEST_CASE("members: random changes find what a search of a plain list finds", "[members]") {
  // Ids from a small pool, so that some repeat (never made by the rules, but kept as a search
  // would keep them), and each member's nproc says which copy it is.
  std::mt19937 random(20261202);
  Members m;
  PlainList plain;
  int made = 0;
  auto pick = [&](int n) { return static_cast<int>(random() % static_cast<unsigned>(n)); };
  for (int step = 0; step < 4000; ++step) {
    const std::string id = "n" + std::to_string(pick(step < 2000 ? 400 : 40));
    switch (pick(6)) {
      case 0:
      case 1: {
        RoundMember r = member(id);
        r.node.nproc = ++made;
        m.push_back(r);
        plain.v.push_back(r);
        break;
      }
      case 2:
        CHECK(m.erase(id) == plain.erase(id));
        break;
      case 3:
        if (!plain.v.empty()) {
          const auto at = static_cast<std::ptrdiff_t>(pick(static_cast<int>(plain.v.size())));
          const auto n =
              std::min<std::ptrdiff_t>(pick(3) + 1, plain.v.end() - plain.v.begin() - at);
          m.erase(m.begin() + at, m.begin() + at + n);
          plain.v.erase(plain.v.begin() + at, plain.v.begin() + at + n);
        }
        break;
      case 4:
        if (pick(20) == 0) {  // as a restart puts the last round's members in front again
          Members front{member("f" + std::to_string(step)), member(id)};
          m.insert(m.begin(), front.begin(), front.end());
          plain.v.insert(plain.v.begin(), front.begin(), front.end());
        }
        break;
      default:
        if (pick(50) == 0) {  // as a round forms from the first of them
          const auto take = std::min<std::size_t>(plain.v.size(), 5);
          Members taken;
          taken.assign(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(take));
          m.erase(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(take));
          plain.v.erase(plain.v.begin(), plain.v.begin() + static_cast<std::ptrdiff_t>(take));
          check_index(taken);
        }
        break;
    }
    REQUIRE(m.size() == plain.v.size());
    for (int k = 0; k < 400; k += 37) {
      const std::string probe = "n" + std::to_string(k);
      const RoundMember* a = m.find(probe);
      const RoundMember* b = plain.find(probe);
      REQUIRE((a == nullptr) == (b == nullptr));
      if (a) REQUIRE(a->node.nproc == b->node.nproc);
    }
  }
  for (std::size_t i = 0; i < plain.v.size(); ++i) CHECK(m[i].node.nproc == plain.v[i].node.nproc);
}
