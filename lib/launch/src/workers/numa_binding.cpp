#include "trainrun/launch/workers/numa_binding.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <iterator>
#include <optional>

#include "trainrun/base/numbers.hpp"
#include "trainrun/base/system.hpp"
#include "trainrun/base/text.hpp"
#include "trainrun/base/wording.hpp"

namespace trainrun::launch {

namespace {

// The first line of a /sys entry, trimmed.
std::optional<std::string> read_text(const std::string& path) {
  const auto text = read_file(path);
  if (!text) return std::nullopt;
  return trim(text->substr(0, text->find('\n')));
}

std::string required_text(const std::string& path) {
  auto text = read_text(path);
  if (!text) throw NumaError(fmt::format("cannot read {}", path));
  return *text;
}

long long required_number(const std::string& path) {
  const std::string text = required_text(path);
  const std::optional<long long> n = parse_integer(text);
  if (!n) throw NumaError(fmt::format("{}: '{}' is not a number", path, text));
  return *n;
}

std::vector<std::string> directory_entries(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = ::opendir(path.c_str())) {
    while (const dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    ::closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string cpu_dir(const std::string& sysfs, int cpu) {
  return fmt::format("{}/devices/system/cpu/cpu{}", sysfs, cpu);
}

// The NUMA node of a GPU; -1 (a machine with one node) counts as node 0, as in torchrun.
int numa_node_of(const std::string& sysfs, const std::string& gpu) {
  const long long node = required_number(sysfs + "/bus/pci/devices/" + gpu + "/numa_node");
  return static_cast<int>(std::max(node, 0LL));
}

std::set<int> node_cpus(const std::string& sysfs, int node, const std::set<int>& allowed) {
  const std::string path = fmt::format("{}/devices/system/node/node{}/cpulist", sysfs, node);
  std::set<int> cpus;
  for (int cpu : parse_cpu_list(required_text(path), path))
    if (allowed.count(cpu)) cpus.insert(cpu);
  return cpus;
}

// The position of `gpu` among the GPUs on its NUMA node, and how many there are.
std::pair<size_t, size_t> place_on_node(const std::string& sysfs,
                                        const std::vector<std::string>& gpus, size_t device) {
  const int node = numa_node_of(sysfs, gpus[device]);
  size_t position = 0, count = 0;
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (numa_node_of(sysfs, gpus[i]) != node) continue;
    if (i < device) ++position;
    ++count;
  }
  return {position, count};
}

// Groups `cpus` by a key of each (its core, its cache), the groups in key order.
template <typename Key>
std::map<int, std::set<int>> group_by(const std::set<int>& cpus, Key key) {
  std::map<int, std::set<int>> groups;
  for (int cpu : cpus) groups[key(cpu)].insert(cpu);
  return groups;
}

// The CPUs sharing the highest-level data or unified cache with `cpu`.
std::set<int> last_level_cache(const std::string& sysfs, int cpu) {
  const std::string dir = cpu_dir(sysfs, cpu) + "/cache";
  int best_level = -1;
  std::set<int> shared;
  for (const auto& entry : directory_entries(dir)) {
    if (entry.rfind("index", 0) != 0 || !parse_integer(entry.substr(5))) continue;
    const std::string index = dir + "/" + entry;
    const std::string type = required_text(index + "/type");
    if (type != "Unified" && type != "Data") continue;
    const int level = static_cast<int>(required_number(index + "/level"));
    if (level <= best_level) continue;
    best_level = level;
    shared = parse_cpu_list(required_text(index + "/shared_cpu_list"), index + "/shared_cpu_list");
  }
  if (shared.empty()) throw NumaError(fmt::format("no data or unified cache listed in {}", dir));
  return shared;
}

}  // namespace

std::set<int> parse_cpu_list(const std::string& text_read, const std::string& what) {
  const std::string text = text_read.substr(0, text_read.find('\n'));
  std::set<int> cpus;
  for (const auto& item : split(text, ',')) {
    const std::string range = trim(item);
    if (range.empty()) continue;
    const size_t dash = range.find('-');
    const auto low = parse_integer(range.substr(0, dash));
    const auto high = dash == std::string::npos ? low : parse_integer(range.substr(dash + 1));
    if (!low || !high || *low < 0 || *high < *low || *high > 1 << 20)
      throw NumaError(fmt::format("{}: '{}' is not a CPU list like 0-3,8", what, text));
    for (long long cpu = *low; cpu <= *high; ++cpu) cpus.insert(static_cast<int>(cpu));
  }
  return cpus;
}

std::string cpu_list_text(const std::set<int>& cpus) {
  std::string text;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int first = *it;
    int last = first;
    while (++it != cpus.end() && *it == last + 1) last = *it;
    text += (text.empty() ? "" : ",") +
            (first == last ? std::to_string(first) : fmt::format("{}-{}", first, last));
  }
  return text;
}

std::vector<std::string> visible_gpu_addresses(const std::string& sysfs,
                                               const std::map<std::string, std::string>& env) {
  const std::string devices = sysfs + "/bus/pci/devices";
  std::vector<std::string> gpus;
  for (const auto& address : directory_entries(devices)) {
    const auto vendor = read_text(devices + "/" + address + "/vendor");
    const auto device_class = read_text(devices + "/" + address + "/class");
    // 0x0300xx: VGA controllers; 0x0302xx: 3D controllers (data-centre GPUs).
    if (vendor == std::string("0x10de") && device_class &&
        (device_class->rfind("0x0300", 0) == 0 || device_class->rfind("0x0302", 0) == 0))
      gpus.push_back(address);
  }
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible == env.end()) return gpus;
  std::vector<std::string> chosen;
  for (const auto& item : split(visible->second, ',')) {
    if (trim(item).empty()) break;  // "" hides every GPU
    const std::optional<long long> index = parse_integer(trim(item));
    if (!index)
      throw NumaError(fmt::format(
          "CUDA_VISIBLE_DEVICES={} names a GPU by '{}': only indices tell its place in sysfs",
          visible->second, trim(item)));
    // As CUDA reads it: the list ends at the first index out of range (-1 ends it too).
    if (*index < 0 || *index >= static_cast<long long>(gpus.size())) break;
    chosen.push_back(gpus[static_cast<size_t>(*index)]);
  }
  return chosen;
}

std::set<int> numa_cpus(const std::string& sysfs, const std::string& mode, int device_index,
                        const std::vector<std::string>& gpus, const std::set<int>& allowed) {
  if (device_index < 0 || static_cast<size_t>(device_index) >= gpus.size())
    throw NumaError(
        fmt::format("no GPU {} here (the workers may use {})", device_index, gpus.size()));
  const size_t device = static_cast<size_t>(device_index);
  const int node = numa_node_of(sysfs, gpus[device]);
  std::set<int> cpus = node_cpus(sysfs, node, allowed);
  if (mode == "socket") {
    auto socket_of = [&](const std::set<int>& of) {
      return required_number(cpu_dir(sysfs, *of.begin()) + "/topology/physical_package_id");
    };
    if (cpus.empty())
      throw NumaError(fmt::format("NUMA node {} has no CPU trainrun may run on", node));
    const long long socket = socket_of(cpus);
    const std::string possible = sysfs + "/devices/system/node/possible";
    for (int other : parse_cpu_list(required_text(possible), possible)) {
      const std::set<int> other_cpus = node_cpus(sysfs, other, allowed);
      if (other != node && !other_cpus.empty() && socket_of(other_cpus) == socket)
        cpus.insert(other_cpus.begin(), other_cpus.end());
    }
  } else if (mode == "exclusive") {
    const auto [position, count] = place_on_node(sysfs, gpus, device);
    const auto cores = group_by(cpus, [&](int cpu) {
      const std::string path = cpu_dir(sysfs, cpu) + "/topology/thread_siblings_list";
      return *parse_cpu_list(required_text(path), path).begin();
    });
    if (cores.size() < count)
      throw NumaError(
          fmt::format("NUMA node {} has {} physical cores for {} GPUs", node, cores.size(), count));
    // As torchrun: the first (cores % GPUs) GPUs get one core more.
    const size_t each = cores.size() / count, extra = cores.size() % count;
    const size_t start = position * each + std::min(position, extra);
    const size_t end = start + each + (position < extra ? 1 : 0);
    cpus.clear();
    auto core = std::next(cores.begin(), static_cast<std::ptrdiff_t>(start));
    for (size_t i = start; i < end; ++i, ++core)
      cpus.insert(core->second.begin(), core->second.end());
  } else if (mode == "core-complex") {
    const auto [position, count] = place_on_node(sysfs, gpus, device);
    (void)count;
    const auto caches =
        group_by(cpus, [&](int cpu) { return *last_level_cache(sysfs, cpu).begin(); });
    // Fullest caches first, then by their first CPU; a GPU past the last shares from the first.
    std::vector<std::set<int>> ordered;
    for (const auto& [first, members] : caches) ordered.push_back(members);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    if (ordered.empty())
      throw NumaError(fmt::format("NUMA node {} has no CPU trainrun may run on", node));
    cpus = ordered[position % ordered.size()];
  } else if (mode != "node") {
    throw NumaError(fmt::format("unknown binding mode '{}'", mode));
  }
  if (cpus.empty())
    throw NumaError(
        fmt::format("NUMA node {} of GPU {} has no CPU trainrun may run on", node, gpus[device]));
  return cpus;
}

NumaPlan plan_numa_binding(const std::string& mode, int workers, const std::string& sysfs,
                           const std::map<std::string, std::string>& env,
                           const std::set<int>& allowed) {
  NumaPlan plan;
  plan.cpus.resize(static_cast<size_t>(std::max(workers, 0)));
  const std::string option = "--numa-binding=" + mode;
  try {
    const std::vector<std::string> gpus = visible_gpu_addresses(sysfs, env);
    if (gpus.empty()) {
      plan.warnings.push_back(fmt::format(
          "warning: {} does nothing here: no NVIDIA GPU on this node ({}/bus/pci/devices{}); "
          "workers run on every CPU",
          option, sysfs, env.count("CUDA_VISIBLE_DEVICES") ? ", CUDA_VISIBLE_DEVICES" : ""));
      return plan;
    }
    for (int rank = 0; rank < workers && static_cast<size_t>(rank) < gpus.size(); ++rank) {
      plan.cpus[static_cast<size_t>(rank)] = numa_cpus(sysfs, mode, rank, gpus, allowed);
      plan.details.push_back(fmt::format("{}: local rank {} (GPU {}) on CPUs {}", option, rank,
                                         gpus[static_cast<size_t>(rank)],
                                         cpu_list_text(plan.cpus[static_cast<size_t>(rank)])));
    }
    if (static_cast<size_t>(workers) > gpus.size())
      plan.warnings.push_back(
          fmt::format("warning: {}: {} no GPU of its own ({} here): not bound", option,
                      static_cast<size_t>(workers) == gpus.size() + 1
                          ? fmt::format("local rank {} has", gpus.size())
                          : fmt::format("local ranks {}..{} have", gpus.size(), workers - 1),
                      count_of(static_cast<long long>(gpus.size()), "GPU")));
  } catch (const NumaError& e) {
    plan.cpus.assign(plan.cpus.size(), {});
    plan.details.clear();
    plan.warnings.push_back(
        fmt::format("warning: {}: {}; workers run on every CPU", option, e.what()));
  }
  return plan;
}

std::string sysfs_root(const std::map<std::string, std::string>& env) {
  auto it = env.find("TRAINRUN_SYSFS_ROOT");
  return it != env.end() && !it->second.empty() ? it->second : "/sys";
}

std::set<int> own_cpu_affinity() {
  std::set<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  return cpus;
}

}  // namespace trainrun::launch
