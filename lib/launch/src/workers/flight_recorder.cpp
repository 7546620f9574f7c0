#include "trainrun/launch/workers/flight_recorder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace trainrun::launch {

namespace {

struct Setting {
  const char* name;   // read by every PyTorch 2.x
  const char* newer;  // read first from 2.8, which warns about `name`
};

constexpr Setting kSettings[] = {
    {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"},
    {"TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_ON_TIMEOUT"},
    {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"},
};

}  // namespace

std::map<std::string, std::string> flight_recorder_variables(
    const std::string& rank_dir, const std::map<std::string, std::string>& inherited,
    const std::optional<TorchVersion>& torch, bool nccl) {
  const std::string values[] = {"2000", "1", rank_dir + "/" + kFlightRecorderPrefix};
  const bool newer = torch && torch->at_least(2, 8);
  std::map<std::string, std::string> v;
  for (size_t i = 0; i < (nccl ? std::size(kSettings) : 1); ++i)
    if (!inherited.count(kSettings[i].name) && !inherited.count(kSettings[i].newer))
      v[newer ? kSettings[i].newer : kSettings[i].name] = values[i];
  return v;
}

std::vector<std::string> flight_recorder_dumps(const std::string& run_dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> dumps;
  std::error_code ec;
  for (fs::directory_iterator a(run_dir, ec), end; !ec && a != end; a.increment(ec)) {
    if (a->path().filename().string().rfind("attempt_", 0) != 0) continue;
    std::error_code ranks_ec;
    for (fs::directory_iterator r(a->path(), ranks_ec); !ranks_ec && r != end;
         r.increment(ranks_ec)) {
      std::error_code files_ec;
      for (fs::directory_iterator f(r->path(), files_ec); !files_ec && f != end;
           f.increment(files_ec))
        if (f->path().filename().string().rfind(kFlightRecorderPrefix, 0) == 0)
          dumps.push_back(f->path().string());
    }
  }
  std::sort(dumps.begin(), dumps.end());
  return dumps;
}

std::string flight_recorder_line(const std::vector<std::string>& dumps) {
  if (dumps.empty()) return "";
  std::string line = fmt::format("NCCL flight recorder dumps ({}): ", dumps.size());
  for (size_t i = 0; i < dumps.size(); ++i) line += (i ? ", " : "") + dumps[i];
  return line;
}

}  // namespace trainrun::launch
