#include "collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>

#include "trainrun/base/text.hpp"
#include "trainrun/stacks/groups.hpp"

namespace trainrun::launch {

namespace {

using nlohmann::json;

constexpr std::size_t kTensorsKept = 4;
// More dimensions than a real tensor has; two tensors that differ only past them read the same.
constexpr std::size_t kDimsKept = 8;
constexpr std::size_t kP2pKept = 2;
// Bytes of a group's name or description, of an operation ("all_gather_into_tensor_coalesced"),
// of a dtype ("float8_e4m3fnuz").
constexpr std::size_t kTextKept = 128;
constexpr std::size_t kOpKept = 64;
constexpr std::size_t kDtypeKept = 24;
// Behind ranks of one collective named each on a line of their own; more share one line.
constexpr std::size_t kBehindNamed = 4;
// The different calls of one collective, and the places of one group's ranks, spelled out.
constexpr std::size_t kCallsShown = 4;
constexpr std::size_t kLinesKept = 12;

// What is wrong with a dump or a summary, thrown inside this file only and caught at its edges.
struct Malformed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Text from another process, fit to print and to serialize: valid UTF-8 (nlohmann::json's dump
// throws on anything else), without control characters, at most `max_bytes` with their escapes.
std::string clean(std::string_view text, std::size_t max_bytes = kTextKept) {
  const std::string escaped = escape_control(utf8_prefix(valid_utf8_prefix(text), max_bytes));
  return std::string(utf8_prefix(escaped, max_bytes));
}

const json& required(const json& object, const char* name, const std::string& where) {
  const auto it = object.find(name);
  if (it == object.end()) throw Malformed(fmt::format("{} has no \"{}\"", where, name));
  return *it;
}

std::int64_t integer(const json& object, const char* name, const std::string& where) {
  const json& value = required(object, name, where);
  if (!value.is_number_integer())
    throw Malformed(fmt::format("{}: \"{}\" is not an integer", where, name));
  return value.get<std::int64_t>();
}

std::string text(const json& object, const char* name, const std::string& where,
                 std::size_t max_bytes) {
  const json& value = required(object, name, where);
  if (!value.is_string()) throw Malformed(fmt::format("{}: \"{}\" is not a string", where, name));
  return clean(value.get_ref<const std::string&>(), max_bytes);
}

// A list of tensor shapes ([[4096], [4, 8]]), its first kTensorsKept; `left_out` counts the rest.
// Absent is empty (torch before 2.4 wrote no dtypes).
json sizes_of(const json& object, const char* name, const std::string& where,
              std::size_t& left_out) {
  json out = json::array();
  left_out = 0;
  const auto it = object.find(name);
  if (it == object.end()) return out;
  if (!it->is_array()) throw Malformed(fmt::format("{}: \"{}\" is not a list", where, name));
  for (const auto& shape : *it) {
    if (out.size() == kTensorsKept) {
      ++left_out;
      continue;
    }
    if (!shape.is_array())
      throw Malformed(fmt::format("{}: \"{}\" is not a list of shapes", where, name));
    json dims = json::array();
    for (const auto& d : shape) {
      if (!d.is_number_integer())
        throw Malformed(fmt::format("{}: \"{}\" has a size that is not an integer", where, name));
      if (dims.size() < kDimsKept) dims.push_back(d.get<std::int64_t>());
    }
    out.push_back(std::move(dims));
  }
  return out;
}

json dtypes_of(const json& object, const char* name, const std::string& where, bool rename) {
  json out = json::array();
  const auto it = object.find(name);
  if (it == object.end()) return out;
  if (!it->is_array()) throw Malformed(fmt::format("{}: \"{}\" is not a list", where, name));
  for (const auto& d : *it) {
    if (!d.is_string())
      throw Malformed(fmt::format("{}: \"{}\" has a dtype that is not a string", where, name));
    if (out.size() == kTensorsKept) break;
    const std::string dtype = clean(d.get_ref<const std::string&>(), kDtypeKept);
    out.push_back(rename ? python_dtype(dtype) : dtype);
  }
  return out;
}

// One entry of a dump as its summary keeps it.
json summarize_entry(const json& entry, const std::string& where, bool p2p) {
  const json& name = required(entry, "profiling_name", where);
  if (!name.is_string()) throw Malformed(where + ": \"profiling_name\" is not a string");
  // "nccl:all_reduce", "gloo:recv 3<-?": the operation follows the library's name.
  std::string_view op = name.get_ref<const std::string&>();
  if (const auto colon = op.rfind(':'); colon != std::string_view::npos)
    op.remove_prefix(colon + 1);
  std::size_t in_left_out = 0;
  std::size_t out_left_out = 0;
  json in_sizes = sizes_of(entry, "input_sizes", where, in_left_out);
  json out_sizes = sizes_of(entry, "output_sizes", where, out_left_out);
  // NCCL says "completed" once the watchdog sees the kernel done; Gloo leaves every entry
  // "scheduled" and only retires it when the work ends.
  const auto retired = entry.find("retired");
  const auto state = entry.find("state");
  const bool completed =
      (retired != entry.end() && retired->is_boolean() && retired->get<bool>()) ||
      (state != entry.end() && state->is_string() && *state == "completed");
  json out = {{"seq", integer(entry, p2p ? "p2p_seq_id" : "collective_seq_id", where)},
              {"op", clean(op, kOpKept)},
              {"in_sizes", std::move(in_sizes)},
              {"in_dtypes", dtypes_of(entry, "input_dtypes", where, true)},
              {"out_sizes", std::move(out_sizes)},
              {"out_dtypes", dtypes_of(entry, "output_dtypes", where, true)},
              {"state", completed ? "completed" : "pending"}};
  if (in_left_out) out["in_left_out"] = in_left_out;
  if (out_left_out) out["out_left_out"] = out_left_out;
  return out;
}

struct KeptGroup {
  std::string desc;
  std::deque<json> collectives;
  std::deque<json> p2p;
  std::size_t used = 0;  // 1 + the index of its last entry in the dump; 0: none
};

// The bootstrap's "trainrun_groups": the name (as the recorder gives it) of each process group
// this rank belongs to, which tells a member that never called a group's collective from a rank
// outside the group (Gloo's dump has no group's ranks). A group of them the dump has no entry of
// is kept with no collectives.
void read_memberships(const json& dump, std::map<std::string, KeptGroup>& groups) {
  const auto told = dump.find("trainrun_groups");
  if (told == dump.end() || !told->is_array()) return;
  for (const auto& name : *told)
    if (name.is_string()) groups[clean(name.get_ref<const std::string&>())];
}

json compact_or_throw(const json& dump) {
  if (!dump.is_object()) throw Malformed("the dump is not a JSON object");
  const auto entries = dump.find("entries");
  if (entries == dump.end() && !dump.contains("version"))
    throw Malformed("the dump has neither \"version\" nor \"entries\"");
  json out = json::object();
  if (const auto version = dump.find("version"); version != dump.end() && version->is_string())
    out["version"] = clean(version->get_ref<const std::string&>());
  std::map<std::string, KeptGroup> groups;
  if (entries != dump.end()) {
    if (!entries->is_array()) throw Malformed("the dump's \"entries\" is not a list");
    for (std::size_t i = 0; i < entries->size(); ++i) {
      const json& entry = (*entries)[i];
      const std::string where = fmt::format("entry {}", i);
      if (!entry.is_object()) throw Malformed(where + " is not an object");
      const json& pg = required(entry, "process_group", where);
      if (!pg.is_array() || pg.empty() || !pg[0].is_string())
        throw Malformed(where + ": \"process_group\" is not [name, description]");
      KeptGroup& group = groups[clean(pg[0].get_ref<const std::string&>())];
      if (pg.size() > 1 && pg[1].is_string())
        group.desc = clean(pg[1].get_ref<const std::string&>());
      group.used = i + 1;
      const auto is_p2p = entry.find("is_p2p");
      const bool p2p = is_p2p != entry.end() && is_p2p->is_boolean() && is_p2p->get<bool>();
      json item = summarize_entry(entry, where, p2p);
      auto& kept = p2p ? group.p2p : group.collectives;
      // The operations of a coalesced collective share its number: the last one stands for all.
      if (!p2p && !kept.empty() && kept.back()["seq"] == item["seq"])
        kept.back() = std::move(item);
      else
        kept.push_back(std::move(item));
      if (kept.size() > (p2p ? kP2pKept : kCollectivesKept)) kept.pop_front();
    }
  }
  read_memberships(dump, groups);
  // The groups used last, when there are too many; those this rank never used after them.
  std::vector<std::pair<std::size_t, std::string>> by_use;
  for (const auto& [name, group] : groups) by_use.emplace_back(group.used, name);
  std::sort(by_use.rbegin(), by_use.rend());
  json kept = json::object();
  for (std::size_t i = 0; i < by_use.size() && i < kCollectiveGroupsKept; ++i) {
    KeptGroup& group = groups[by_use[i].second];
    json g = {{"desc", group.desc},
              {"collectives",
               json(std::vector<json>(group.collectives.begin(), group.collectives.end()))}};
    if (!group.p2p.empty()) g["p2p"] = json(std::vector<json>(group.p2p.begin(), group.p2p.end()));
    kept[by_use[i].second] = std::move(g);
  }
  out["groups"] = std::move(kept);
  if (by_use.size() > kCollectiveGroupsKept)
    out["groups_left_out"] = by_use.size() - kCollectiveGroupsKept;
  return out;
}

// One collective of one rank, read back from its summary.
struct Call {
  std::int64_t seq = 0;
  std::string op;
  json in_sizes, in_dtypes, out_sizes, out_dtypes;
  std::size_t in_left_out = 0;
  std::size_t out_left_out = 0;
  bool completed = false;
};

struct Member {
  const RankCollectives* rank = nullptr;
  std::vector<Call> calls;  // ascending; empty: a member that has entered none yet
  bool entered() const { return !calls.empty(); }
  const Call& last() const { return calls.back(); }
};

struct GroupView {
  std::string desc;
  std::vector<Member> members;  // by rank
};

// Group names in the order people count them: "0", "1", "2", "10", then names that are not
// numbers.
struct NameOrder {
  bool operator()(const std::string& a, const std::string& b) const {
    const auto number = [](const std::string& s) {
      return !s.empty() &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    const bool na = number(a);
    const bool nb = number(b);
    if (na != nb) return na;
    if (na && a.size() != b.size()) return a.size() < b.size();
    return a < b;
  }
};

Call read_call(const json& c, const std::string& where) {
  if (!c.is_object()) throw Malformed(where + " is not an object");
  Call call;
  call.seq = integer(c, "seq", where);
  call.op = text(c, "op", where, kOpKept);
  call.in_sizes = sizes_of(c, "in_sizes", where, call.in_left_out);
  call.out_sizes = sizes_of(c, "out_sizes", where, call.out_left_out);
  call.in_dtypes = dtypes_of(c, "in_dtypes", where, false);
  call.out_dtypes = dtypes_of(c, "out_dtypes", where, false);
  for (const auto& [field, count] : {std::pair{"in_left_out", &call.in_left_out},
                                     std::pair{"out_left_out", &call.out_left_out}}) {
    const auto it = c.find(field);
    if (it != c.end() && it->is_number_unsigned()) *count += it->get<std::size_t>();
  }
  call.completed = text(c, "state", where, kTextKept) == "completed";
  return call;
}

// One group of a rank's summary.
struct SummaryGroup {
  std::string name;
  std::string desc;
  std::vector<Call> calls;  // ascending
};

// A summary's groups; throws Malformed on another shape.
std::vector<SummaryGroup> read_compact(const json& compact) {
  if (compact.is_null()) throw Malformed("none came");
  if (!compact.is_object()) throw Malformed("its summary is not a JSON object");
  if (const auto error = compact.find("error"); error != compact.end())
    throw Malformed(error->is_string() ? clean(error->get_ref<const std::string&>())
                                       : "its summary has an error");
  const json& groups = required(compact, "groups", "its summary");
  if (!groups.is_object()) throw Malformed("its summary's \"groups\" is not an object");
  std::vector<SummaryGroup> out;
  for (const auto& [name, group] : groups.items()) {
    if (out.size() == kCollectiveGroupsKept) break;
    const std::string where = "group " + clean(name);
    if (!group.is_object()) throw Malformed(where + " is not an object");
    std::vector<Call> calls;
    const auto collectives = group.find("collectives");
    if (collectives != group.end()) {
      if (!collectives->is_array()) throw Malformed(where + ": \"collectives\" is not a list");
      const std::size_t skip =
          collectives->size() > kCollectivesKept ? collectives->size() - kCollectivesKept : 0;
      for (std::size_t i = skip; i < collectives->size(); ++i)
        calls.push_back(read_call((*collectives)[i], fmt::format("{}, collective {}", where, i)));
    }
    std::stable_sort(calls.begin(), calls.end(),
                     [](const Call& a, const Call& b) { return a.seq < b.seq; });
    const auto desc = group.find("desc");
    out.push_back(
        {clean(name),
         desc != group.end() && desc->is_string() ? clean(desc->get_ref<const std::string&>()) : "",
         std::move(calls)});
  }
  return out;
}

std::string ranks_word(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", stacks::rank_ranges(ranks));
}

std::string tensors(const json& sizes, const json& dtypes, std::size_t left_out) {
  std::string out;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string shape;
    for (const auto& d : sizes[i]) shape += (shape.empty() ? "" : "x") + d.dump();
    if (shape.empty()) shape = "scalar";
    if (i < dtypes.size()) shape += " " + dtypes[i].get<std::string>();
    out += (out.empty() ? "" : ", ") + shape;
  }
  if (left_out) out += fmt::format("{}+{} more", out.empty() ? "" : ", ", left_out);
  return out;
}

// "all_reduce(4096 float32)", or with the outputs too: "all_gather(8 float32 -> 4x8 float32)".
std::string call_text(const Call& c, bool with_outputs = false) {
  std::string in = tensors(c.in_sizes, c.in_dtypes, c.in_left_out);
  if (with_outputs) in += " -> " + tensors(c.out_sizes, c.out_dtypes, c.out_left_out);
  return fmt::format("{}({})", c.op, in);
}

// What must agree between the ranks of a collective, as torch's flight-recorder analysis checks
// it: the operation, and the sizes and dtypes that are the same on every rank for that operation
// (an all_to_all's are uneven, a scatter's inputs and a gather's outputs are the root's alone).
std::string agreement_key(const Call& c) {
  static const std::set<std::string> uneven = {
      "all_to_all", "all_to_all_single", "all_to_all_v_single", "all_gather_v", "reduce_scatter_v"};
  const bool is_uneven = uneven.count(c.op) > 0;
  std::string key = c.op;
  if (!is_uneven && c.op != "scatter")
    key += "|" + c.in_sizes.dump() + "+" + std::to_string(c.in_left_out);
  if (!is_uneven && c.op != "gather")
    key += "|" + c.out_sizes.dump() + "+" + std::to_string(c.out_left_out);
  if (c.op != "scatter" && c.op != "broadcast") key += "|" + c.in_dtypes.dump();
  if (c.op != "gather") key += "|" + c.out_dtypes.dump();
  return key;
}

struct Mismatch {
  std::int64_t seq = 0;
  std::string line;
};

// The first collective, among those two ranks or more kept, that its ranks did not call alike.
std::optional<Mismatch> first_mismatch(const std::string& group,
                                       const std::vector<Member>& members) {
  std::map<std::int64_t, std::vector<std::pair<int, const Call*>>> by_seq;
  for (const auto& m : members)
    for (const auto& c : m.calls) by_seq[c.seq].emplace_back(m.rank->rank, &c);
  for (const auto& [seq, calls] : by_seq) {
    if (calls.size() < 2) continue;
    std::map<std::string, std::pair<std::vector<int>, const Call*>> alike;
    for (const auto& [rank, call] : calls) {
      auto& a = alike[agreement_key(*call)];
      a.first.push_back(rank);
      a.second = call;
    }
    if (alike.size() < 2) continue;
    std::vector<std::pair<std::vector<int>, const Call*>> ways;
    for (auto& [key, a] : alike) ways.push_back(std::move(a));
    for (auto& w : ways) std::sort(w.first.begin(), w.first.end());
    std::sort(ways.begin(), ways.end(), [](const auto& a, const auto& b) {
      if (a.first.size() != b.first.size()) return a.first.size() > b.first.size();
      return a.first.front() < b.first.front();
    });
    // Calls that differ only in what the short form leaves out show their outputs too.
    std::set<std::string> short_forms;
    for (const auto& w : ways) short_forms.insert(call_text(*w.second));
    const bool with_outputs = short_forms.size() < ways.size();
    std::string line = fmt::format("collective #{} of group {}: ", seq, group);
    for (std::size_t i = 0; i < ways.size() && i < kCallsShown; ++i)
      line += fmt::format("{}{} called {}", i ? ", " : "", ranks_word(ways[i].first),
                          call_text(*ways[i].second, with_outputs));
    if (ways.size() > kCallsShown) {
      std::vector<int> rest;
      for (std::size_t i = kCallsShown; i < ways.size(); ++i)
        rest.insert(rest.end(), ways[i].first.begin(), ways[i].first.end());
      line += fmt::format(", {} called {} other ways", ranks_word(rest), ways.size() - kCallsShown);
    }
    return Mismatch{seq, line};
  }
  return std::nullopt;
}

std::vector<int> ranks_of(const std::vector<const Member*>& members) {
  std::vector<int> out;
  for (const auto* m : members) out.push_back(m->rank->rank);
  return out;
}

std::string named(const RankCollectives& r) {
  return r.node.empty() ? fmt::format("rank {}", r.rank)
                        : fmt::format("rank {} ({})", r.rank, r.node);
}

std::string is_in(const RankCollectives& r) {
  return r.where.empty() ? "" : fmt::format("; rank {} is in {}", r.rank, r.where);
}

// Where a rank waits inside a collective, by group: "collective #1 (all_reduce, group 1)".
using WaitsIn = std::map<int, std::vector<std::pair<std::string, std::string>>>;

// The collective of another group than `group` that the rank waits in, if any.
const std::string* waits_elsewhere(const WaitsIn& waits, int rank, const std::string& group) {
  const auto it = waits.find(rank);
  if (it == waits.end()) return nullptr;
  for (const auto& [where, text] : it->second)
    if (where != group) return &text;
  return nullptr;
}

// What one group's ranks say, sorted into the report's kinds of lines. A rank behind that waits
// inside another group's collective is held up there, by that group's ranks: its line comes after
// those of the ranks behind that wait in none, which are the hang's cause.
struct GroupLines {
  std::vector<std::string> behind;
  std::vector<std::string> mismatch;
  std::vector<std::string> behind_waiting;
  std::vector<std::string> waiting;
  std::vector<int> behind_ranks;
  std::vector<int> behind_roots;  // of behind_ranks, those that wait in no collective
  std::vector<std::string> all() const {
    std::vector<std::string> out = behind;
    for (const auto* kind : {&mismatch, &behind_waiting, &waiting})
      out.insert(out.end(), kind->begin(), kind->end());
    return out;
  }
};

GroupLines judge_group(const std::string& name, const GroupView& group, const WaitsIn& waits) {
  GroupLines out;
  std::int64_t top = 0;
  for (const auto& m : group.members)
    if (m.entered()) top = std::max(top, m.last().seq);
  std::vector<const Member*> waiting, done, behind;
  for (const auto& m : group.members) {
    if (!m.entered() || m.last().seq < top)
      behind.push_back(&m);
    else
      (m.last().completed ? done : waiting).push_back(&m);
  }
  const auto mismatch = first_mismatch(name, group.members);
  const Call& at_top = (waiting.empty() ? done : waiting).front()->last();
  if (!behind.empty()) {
    const std::string others = waiting.empty()
                                   ? fmt::format(", which {} completed", ranks_word(ranks_of(done)))
                                   : fmt::format(" that {} {} in", ranks_word(ranks_of(waiting)),
                                                 waiting.size() == 1 ? "waits" : "wait");
    const std::string collective =
        fmt::format("collective #{} ({}, group {}){}", top, at_top.op, name, others);
    for (const auto* m : behind)
      if (!waits_elsewhere(waits, m->rank->rank, name)) out.behind_roots.push_back(m->rank->rank);
    if (behind.size() <= kBehindNamed) {
      for (const auto* m : behind) {
        const std::string* elsewhere = waits_elsewhere(waits, m->rank->rank, name);
        (elsewhere ? out.behind_waiting : out.behind)
            .push_back(fmt::format(
                "{} never entered {}{}", named(*m->rank), collective,
                elsewhere ? fmt::format("; rank {} waits in {}", m->rank->rank, *elsewhere)
                          : is_in(*m->rank)));
      }
    } else {
      const auto ranks = ranks_of(behind);
      const RankCollectives& first = *behind.front()->rank;
      (out.behind_roots.empty() ? out.behind_waiting : out.behind)
          .push_back(fmt::format(
              "ranks {} ({}) never entered {}{}", stacks::rank_ranges(ranks), ranks.size(),
              collective,
              first.where.empty() ? "" : fmt::format("; {} is in {}", named(first), first.where)));
    }
    out.behind_ranks = ranks_of(behind);
  } else if (!waiting.empty() && (!mismatch || mismatch->seq != top)) {
    if (group.members.size() == 1)
      out.waiting.push_back(fmt::format(
          "{} waits in collective #{} ({}, group {}); no other rank read has used group {}",
          named(*waiting.front()->rank), top, at_top.op, name, name));
    else if (done.empty())
      out.waiting.push_back(
          fmt::format("every rank of group {} waits in collective #{} ({}): the hang is inside it, "
                      "not before it",
                      name, top, at_top.op));
    else
      out.waiting.push_back(
          fmt::format("{} {} in collective #{} ({}, group {}), which {} completed",
                      ranks_word(ranks_of(waiting)), waiting.size() == 1 ? "waits" : "wait", top,
                      at_top.op, name, ranks_word(ranks_of(done))));
  }
  if (mismatch) out.mismatch.push_back(mismatch->line);
  return out;
}

// "group 0 (default_pg): ranks 0-2 at #6 all_reduce(4096 float32), pending; rank 3 at #5 ..."
std::string table_line(const std::string& name, const GroupView& group) {
  std::map<std::tuple<std::int64_t, std::string, bool>, std::vector<int>> places;
  for (const auto& m : group.members) {
    if (m.entered())
      places[{m.last().seq, call_text(m.last()), m.last().completed}].push_back(m.rank->rank);
    else
      places[{0, "", false}].push_back(m.rank->rank);
  }
  std::vector<std::pair<std::vector<int>, std::string>> shown;
  for (const auto& [place, ranks] : places)
    shown.emplace_back(
        ranks, std::get<0>(place) == 0
                   ? fmt::format("{} entered none", ranks_word(ranks))
                   : fmt::format("{} at #{} {}, {}", ranks_word(ranks), std::get<0>(place),
                                 std::get<1>(place), std::get<2>(place) ? "completed" : "pending"));
  std::sort(shown.begin(), shown.end());
  const bool named_desc = !group.desc.empty() && group.desc != "undefined";
  std::string line = fmt::format("group {}{}: ", name, named_desc ? " (" + group.desc + ")" : "");
  std::vector<int> rest;
  for (std::size_t i = 0; i < shown.size(); ++i) {
    if (i < kCallsShown)
      line += (i ? "; " : "") + shown[i].second;
    else
      rest.insert(rest.end(), shown[i].first.begin(), shown[i].first.end());
  }
  if (!rest.empty()) line += fmt::format("; {} elsewhere", ranks_word(rest));
  return line;
}

json group_json(const std::string& name, const GroupView& group, const GroupLines& lines) {
  json ranks = json::array();
  for (const auto& m : group.members) {
    if (!m.entered()) {
      ranks.push_back({{"rank", m.rank->rank},
                       {"seq", nullptr},
                       {"op", nullptr},
                       {"in_sizes", json::array()},
                       {"in_dtypes", json::array()},
                       {"state", "none"}});
      continue;
    }
    const Call& c = m.last();
    ranks.push_back({{"rank", m.rank->rank},
                     {"seq", c.seq},
                     {"op", c.op},
                     {"in_sizes", c.in_sizes},
                     {"in_dtypes", c.in_dtypes},
                     {"state", c.completed ? "completed" : "pending"}});
  }
  return {
      {"group", name}, {"desc", group.desc}, {"ranks", std::move(ranks)}, {"lines", lines.all()}};
}

}  // namespace

std::string python_dtype(const std::string& dtype) {
  // c10's ScalarType names, as the flight recorder writes them, and torch's names in Python.
  static const std::map<std::string, std::string> names = {
      {"Byte", "uint8"},
      {"Char", "int8"},
      {"Short", "int16"},
      {"Int", "int32"},
      {"Long", "int64"},
      {"Half", "float16"},
      {"Float", "float32"},
      {"Double", "float64"},
      {"ComplexHalf", "complex32"},
      {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"},
      {"Bool", "bool"},
      {"QInt8", "qint8"},
      {"QUInt8", "quint8"},
      {"QInt32", "qint32"},
      {"BFloat16", "bfloat16"},
      {"QUInt4x2", "quint4x2"},
      {"QUInt2x4", "quint2x4"},
      {"Float8_e5m2", "float8_e5m2"},
      {"Float8_e4m3fn", "float8_e4m3fn"},
      {"Float8_e5m2fnuz", "float8_e5m2fnuz"},
      {"Float8_e4m3fnuz", "float8_e4m3fnuz"},
      {"Float8_e8m0fnu", "float8_e8m0fnu"},
      {"Float4_e2m1fn_x2", "float4_e2m1fn_x2"},
      {"UInt16", "uint16"},
      {"UInt32", "uint32"},
      {"UInt64", "uint64"},
  };
  const auto it = names.find(dtype);
  return it == names.end() ? dtype : it->second;
}

json compact_collectives(const json& dump) {
  try {
    return compact_or_throw(dump);
  } catch (const std::exception& e) {
    return {{"error", clean(e.what())}};
  }
}

CollectivesVerdict judge_collectives(const std::vector<RankCollectives>& ranks) {
  std::vector<const RankCollectives*> sorted;
  for (const auto& r : ranks) sorted.push_back(&r);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto* a, const auto* b) { return a->rank < b->rank; });

  std::map<std::string, GroupView, NameOrder> groups;
  std::vector<std::pair<std::string, std::vector<int>>> unread;  // by the reason, in order of rank
  json unread_json = json::array();
  std::set<int> seen;
  for (const auto* r : sorted) {
    if (!seen.insert(r->rank).second) continue;
    try {
      for (auto& group : read_compact(r->compact)) {
        GroupView& view = groups[group.name];
        if (view.desc.empty()) view.desc = group.desc;
        view.members.push_back({r, std::move(group.calls)});
      }
    } catch (const std::exception& e) {
      const auto same = std::find_if(unread.begin(), unread.end(),
                                     [&](const auto& u) { return u.first == e.what(); });
      if (same == unread.end())
        unread.push_back({e.what(), {r->rank}});
      else
        same->second.push_back(r->rank);
      unread_json.push_back({{"rank", r->rank}, {"error", e.what()}});
    }
  }

  // A group no rank has entered a collective of says nothing. Where each rank waits inside one.
  WaitsIn waits;
  for (auto it = groups.begin(); it != groups.end();) {
    const auto& members = it->second.members;
    if (std::none_of(members.begin(), members.end(), [](const Member& m) { return m.entered(); })) {
      it = groups.erase(it);
      continue;
    }
    for (const auto& m : members)
      if (m.entered() && !m.last().completed)
        waits[m.rank->rank].emplace_back(
            it->first,
            fmt::format("collective #{} ({}, group {})", m.last().seq, m.last().op, it->first));
    ++it;
  }

  CollectivesVerdict verdict;
  std::vector<std::string> behind_lines, mismatch_lines, behind_waiting_lines, waiting_lines;
  std::set<int> behind, roots;
  std::vector<std::pair<std::string, GroupLines>> judged;
  for (const auto& [name, group] : groups) {
    GroupLines lines = judge_group(name, group, waits);
    behind_lines.insert(behind_lines.end(), lines.behind.begin(), lines.behind.end());
    mismatch_lines.insert(mismatch_lines.end(), lines.mismatch.begin(), lines.mismatch.end());
    behind_waiting_lines.insert(behind_waiting_lines.end(), lines.behind_waiting.begin(),
                                lines.behind_waiting.end());
    waiting_lines.insert(waiting_lines.end(), lines.waiting.begin(), lines.waiting.end());
    behind.insert(lines.behind_ranks.begin(), lines.behind_ranks.end());
    roots.insert(lines.behind_roots.begin(), lines.behind_roots.end());
    judged.emplace_back(name, std::move(lines));
  }

  // The groups with something to say first, when there are too many to show.
  std::vector<std::size_t> shown;
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < judged.size() && shown.size() < kCollectiveGroupsKept; ++i)
      if (judged[i].second.all().empty() == (pass == 1)) shown.push_back(i);
  std::sort(shown.begin(), shown.end());
  json groups_json = json::array();
  for (const std::size_t i : shown) {
    const auto& [name, lines] = judged[i];
    const GroupView& group = groups.at(name);
    verdict.table.push_back(table_line(name, group));
    groups_json.push_back(group_json(name, group, lines));
  }
  if (judged.size() > shown.size())
    verdict.table.push_back(fmt::format("({} more groups)", judged.size() - shown.size()));

  for (auto* kind : {&behind_lines, &mismatch_lines, &behind_waiting_lines, &waiting_lines})
    verdict.lines.insert(verdict.lines.end(), kind->begin(), kind->end());
  if (verdict.lines.size() > kLinesKept) {
    const std::size_t more = verdict.lines.size() - (kLinesKept - 1);
    verdict.lines.resize(kLinesKept - 1);
    verdict.lines.push_back(fmt::format("... and {} more in the job summary", more));
  }
  for (const auto& [why, rs] : unread)
    verdict.lines.push_back(
        rs.size() == 1
            ? fmt::format("note: rank {}'s flight recorder could not be read: {}", rs.front(), why)
            : fmt::format("note: the flight recorders of ranks {} could not be read: {}",
                          stacks::rank_ranges(rs), why));

  // The ranks behind that wait in no collective are the cause; where every rank behind waits in
  // one (ranks that wait for each other in two groups), all of them.
  const std::set<int>& cause = roots.empty() ? behind : roots;
  verdict.behind.assign(cause.begin(), cause.end());
  verdict.json = {{"groups", std::move(groups_json)},
                  {"behind", verdict.behind},
                  {"unread", std::move(unread_json)}};
  return verdict;
}

}  // namespace trainrun::launch
