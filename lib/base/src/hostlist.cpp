#include "trainrun/base/hostlist.hpp"

#include <algorithm>
#include <stdexcept>

namespace trainrun {

namespace {

[[noreturn]] void bad(const std::string& reason) { throw std::invalid_argument(reason); }

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }

// Decimal digits only, at most 18 of them (no overflow, no sign).
unsigned long long parse_digits(std::string_view s, std::string_view range) {
  if (s.empty() || s.size() > 18)
    bad("range '" + std::string(range) + "' needs numbers of 1 to 18 digits");
  unsigned long long n = 0;
  for (char c : s) {
    if (!is_digit(c)) bad("range '" + std::string(range) + "' is not N or N-M with digits");
    n = n * 10 + static_cast<unsigned long long>(c - '0');
  }
  return n;
}

HostList::Range parse_range(std::string_view item) {
  const std::size_t dash = item.find('-');
  HostList::Range r;
  const std::string_view lo = item.substr(0, dash);
  r.lo = parse_digits(lo, item);
  r.hi = dash == std::string_view::npos ? r.lo : parse_digits(item.substr(dash + 1), item);
  r.width = lo.size();
  if (r.hi < r.lo) bad("range '" + std::string(item) + "' runs backwards");
  return r;
}

// "01-04,07" (the text between the brackets).
std::vector<HostList::Range> parse_group(std::string_view body) {
  if (body.empty()) bad("empty brackets []");
  std::vector<HostList::Range> ranges;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = body.find(',', start);
    ranges.push_back(parse_range(body.substr(start, comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

// The count of names a group or a whole name gives, saturated just above the limit.
std::size_t saturating_mul(std::size_t a, std::size_t b) {
  constexpr std::size_t cap = HostList::kMaxHosts + 1;
  if (a == 0 || b == 0) return 0;
  return a > cap / b ? cap : std::min(cap, a * b);
}

std::size_t group_size(const std::vector<HostList::Range>& ranges) {
  std::size_t n = 0;
  for (const auto& r : ranges) {
    const unsigned long long span = r.hi - r.lo;
    n += span >= HostList::kMaxHosts ? HostList::kMaxHosts + 1 : static_cast<std::size_t>(span) + 1;
    if (n > HostList::kMaxHosts) return HostList::kMaxHosts + 1;
  }
  return n;
}

// One name of the list: literals and bracket groups.
HostList::Name parse_name(std::string_view text) {
  HostList::Name name;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ']') bad("']' without '['");
    if (text[i] != '[') {
      const std::size_t next = text.find_first_of("[]", i);
      name.push_back({std::string(text.substr(i, next - i)), {}});
      i = next == std::string_view::npos ? text.size() : next;
      continue;
    }
    const std::size_t close = text.find_first_of("[]", i + 1);
    if (close == std::string_view::npos || text[close] != ']')
      bad(close == std::string_view::npos ? "'[' without ']'" : "nested '['");
    name.push_back({"", parse_group(text.substr(i + 1, close - i - 1))});
    i = close + 1;
  }
  return name;
}

std::string format_number(unsigned long long n, std::size_t width) {
  std::string digits = std::to_string(n);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Appends every name `parts[k..]` gives after `prefix`, the first group varying slowest.
void expand_parts(const HostList::Name& parts, std::size_t k, const std::string& prefix,
                  std::vector<std::string>& out) {
  if (k == parts.size()) {
    out.push_back(prefix);
    return;
  }
  const HostList::Part& part = parts[k];
  if (part.ranges.empty()) {
    expand_parts(parts, k + 1, prefix + part.text, out);
    return;
  }
  for (const auto& r : part.ranges)
    for (unsigned long long n = r.lo;; ++n) {
      expand_parts(parts, k + 1, prefix + format_number(n, r.width), out);
      if (n == r.hi) break;
    }
}

}  // namespace

HostList HostList::parse(std::string_view text) {
  HostList list;
  std::size_t start = 0;
  while (start <= text.size()) {
    // A comma or a blank ends a name only outside brackets; empty names are skipped, as Slurm
    // does.
    std::size_t end = start;
    int depth = 0;
    while (end < text.size() && (!is_separator(text[end]) || depth > 0)) {
      depth += text[end] == '[' ? 1 : text[end] == ']' ? -1 : 0;
      ++end;
    }
    if (end == start) {
      ++start;
      continue;
    }
    Name name = parse_name(text.substr(start, end - start));
    std::size_t count = 1;
    for (const auto& part : name)
      if (!part.ranges.empty()) count = saturating_mul(count, group_size(part.ranges));
    list.size_ += count;
    if (list.size_ > kMaxHosts) bad("more than " + std::to_string(kMaxHosts) + " host names");
    list.names_.push_back(std::move(name));
    start = end + 1;
  }
  if (list.names_.empty()) bad("no host name in the list");
  return list;
}

std::string HostList::first() const {
  std::string out;
  for (const auto& part : names_.front())
    out += part.ranges.empty() ? part.text : format_number(part.ranges[0].lo, part.ranges[0].width);
  return out;
}

std::vector<std::string> HostList::expand() const {
  std::vector<std::string> out;
  out.reserve(size_);
  for (const auto& name : names_) expand_parts(name, 0, "", out);
  return out;
}

}  // namespace trainrun
