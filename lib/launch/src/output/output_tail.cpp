#include "trainrun/launch/output/output_tail.hpp"

#include <string_view>

#include "trainrun/base/text.hpp"

namespace trainrun::launch {

namespace {

// Escaping can make a byte four: the raw bytes kept are enough for kMaxBytes once escaped.
constexpr std::size_t kKeptBytes = 4 * OutputTail::kMaxBytes;

// `text` from the start of its first whole line, or whole when it has only one.
std::string_view from_first_whole_line(std::string_view text) {
  const size_t nl = text.find('\n');
  return nl == std::string_view::npos ? text : text.substr(nl + 1);
}

}  // namespace

void OutputTail::feed(const char* data, std::size_t size) {
  kept_.append(data, size);
  // Trimmed in steps, not on every write: a worker writing byte by byte costs no quadratic copy.
  if (kept_.size() > 2 * kKeptBytes) {
    kept_.erase(0, kept_.size() - kKeptBytes);
    cut_ = true;
  }
}

std::string OutputTail::text() const {
  std::string_view raw = kept_;
  if (cut_) raw = from_first_whole_line(raw);
  while (!raw.empty() && (raw.back() == '\n' || raw.back() == '\r' || raw.back() == ' '))
    raw.remove_suffix(1);
  const std::string escaped = escape_control(raw, true);
  // Where the last kMaxLines lines start.
  size_t start = escaped.size();
  size_t lines = 0;
  while (start > 0) {
    const size_t nl = escaped.rfind('\n', start - 1);
    if (nl == std::string::npos) {
      start = 0;
      break;
    }
    if (++lines == kMaxLines) {
      start = nl + 1;
      break;
    }
    start = nl;
  }
  std::string_view out = std::string_view(escaped).substr(start);
  if (out.size() > kMaxBytes) {
    const std::string_view suffix = utf8_suffix(out, kMaxBytes);
    out = suffix.find('\n') == std::string_view::npos ? suffix : from_first_whole_line(suffix);
  }
  // Blank lines before the first shown line say nothing.
  while (!out.empty() && out.front() == '\n') out.remove_prefix(1);
  return std::string(out);
}

}  // namespace trainrun::launch
