#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun {

// A Slurm host-list expression, as in SLURM_JOB_NODELIST: host names separated by commas (or
// blanks; empty names are skipped, as Slurm does), each with any number of bracket groups of
// numbers and ranges ("node[01-04,07]", "gpu-a[1-2],gpu-b3", "rack[1-2]-node[1-3]"). A range keeps
// the zero padding of its first number ("[08-10]" gives 08 09 10, "[8-10]" 8 9 10); with several
// groups in one name the first group varies slowest, as `scontrol show hostnames` lists them. Read
// without scontrol.
class HostList {
 public:
  // Throws std::invalid_argument with a reason (no prefix) for an expression Slurm would not
  // write: no name at all, an unbalanced or nested bracket, a group that is not a comma list of
  // "N" or "N-M" (digits, N <= M), or more than kMaxHosts names. Text after the last group
  // ("n[1-2]-ib") is kept, though Slurm 22.05's scontrol refuses it.
  static HostList parse(std::string_view text);

  static constexpr std::size_t kMaxHosts = std::size_t{1} << 20;

  std::size_t size() const { return size_; }
  // The first name, without expanding the rest.
  std::string first() const;
  // Every name, in Slurm's order (at most kMaxHosts, checked by parse).
  std::vector<std::string> expand() const;

  struct Range {
    unsigned long long lo = 0, hi = 0;
    std::size_t width = 0;  // digits of the first number: the zero padding
  };
  // A literal (ranges empty) or a bracket group (text empty).
  struct Part {
    std::string text;
    std::vector<Range> ranges;
  };
  using Name = std::vector<Part>;

 private:
  std::vector<Name> names_;
  std::size_t size_ = 0;
};

}  // namespace trainrun
