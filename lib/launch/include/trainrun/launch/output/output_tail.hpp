#pragma once

#include <cstddef>
#include <string>

namespace trainrun::launch {

// The end of a worker's stream as it passes through trainrun: what the failure summary shows of
// a worker that wrote no error file. Holds a few KiB whatever the worker writes.
class OutputTail {
 public:
  static constexpr std::size_t kMaxLines = 20;
  static constexpr std::size_t kMaxBytes = 4096;

  void feed(const char* data, std::size_t size);
  // The last lines (at most kMaxLines, within kMaxBytes), control characters escaped as
  // trainrun::escape_control does, without the newline that ends them; "" when nothing but
  // blank lines came. A line cut by the bounds is left out unless it is the only one.
  std::string text() const;

 private:
  std::string kept_;
  bool cut_ = false;  // kept_ starts inside the stream, maybe inside a line
};

}  // namespace trainrun::launch
