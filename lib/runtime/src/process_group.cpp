#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <vector>

#include "session.hpp"

#ifdef TRAINRUN_RUNTIME_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace trainrun::runtime {
namespace detail {
namespace {

std::mutex group_mutex;
c10::intrusive_ptr<c10d::Store> group_store;
c10::intrusive_ptr<ProcessGroup> group;
// The GPU of this rank's NCCL group, named to barriers (NCCL would otherwise guess it); -1: Gloo.
int group_gpu = -1;

int gpu_index(const TrainContext& context) {
  return choose_gpu(context.launched(), context.local_rank(),
                    static_cast<int>(torch::cuda::device_count()));
}

std::string where(const TrainContext& context) {
  return "rank " + std::to_string(context.world_rank()) + " (store " +
         context.launch_env().master_addr + ":" + std::to_string(context.launch_env().master_port) +
         ")";
}

// As torch.distributed: GLOO_SOCKET_IFNAME names the interfaces, comma-separated (one Gloo
// device each, used in turn), else the host name's address.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices() {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
  std::istringstream names(interfaces != nullptr ? interfaces : "");
  for (std::string name; std::getline(names, name, ',');) {
    if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  }
  if (devices.empty()) devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

c10::intrusive_ptr<ProcessGroup> make_gloo(const TrainContext& context,
                                           std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices = gloo_devices();
  return c10::make_intrusive<c10d::ProcessGroupGloo>(group_store, context.world_rank(),
                                                     context.world_size(), options);
}

c10::intrusive_ptr<ProcessGroup> make_nccl(const TrainContext& context,
                                           std::chrono::milliseconds timeout) {
#ifdef TRAINRUN_RUNTIME_WITH_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(group_store, context.world_rank(),
                                                     context.world_size(), options);
#else
  (void)timeout;
  throw ConfigError("no NCCL in this build for " + where(context));
#endif
}

}  // namespace

void prepare_device(const TrainContext& context) {
  if (!context.use_gpu()) return;
#ifdef TRAINRUN_RUNTIME_WITH_NCCL
  if (!torch::cuda::is_available()) {
    throw ConfigError("ScalingConfig::use_gpu is set but no CUDA device is visible to rank " +
                      std::to_string(context.world_rank()) +
                      "; check CUDA_VISIBLE_DEVICES and the driver, or set use_gpu = false");
  }
  const auto devices = static_cast<int>(torch::cuda::device_count());
  const int index = gpu_index(context);
  if (index >= devices) {
    throw ConfigError("ScalingConfig::use_gpu: LOCAL_RANK " + std::to_string(index) +
                      " has no GPU of its own (" + std::to_string(devices) +
                      " visible); start at most one worker per GPU on each node, or give each "
                      "worker one GPU in CUDA_VISIBLE_DEVICES");
  }
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw ConfigError(
      "ScalingConfig::use_gpu is set but libtrainrun_runtime was built against a LibTorch "
      "without CUDA, so it has neither GPUs nor NCCL (rank " +
      std::to_string(context.world_rank()) +
      "); rebuild against a CUDA LibTorch (see scripts/gpu-check.sh) or set use_gpu = false");
#endif
}

void start_process_group(const TrainContext& context, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(group_mutex);
  if (group) return;
  const LaunchEnv& launch = context.launch_env();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(launch.master_port);
  options.isServer = context.world_rank() == 0 && !launch.use_agent_store;
  options.numWorkers = static_cast<std::size_t>(context.world_size());
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    group_store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, options);
    if (launch.use_agent_store) {
      // The launcher's store outlives restarts: keys of earlier attempts must not be seen again.
      group_store = c10::make_intrusive<c10d::PrefixStore>(
          "/worker/attempt_" + std::to_string(launch.restart_count), group_store);
    }
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("cannot ") + (options.isServer ? "host" : "connect to") +
                       " the c10d TCPStore for " + where(context) + ": " + e.what() +
                       (options.isServer ? "; is the port already in use?"
                                         : "; is rank 0 running and MASTER_ADDR reachable?"));
  }
  try {
    group = context.use_gpu() ? make_nccl(context, timeout) : make_gloo(context, timeout);
    group_gpu = context.use_gpu() ? gpu_index(context) : -1;
  } catch (const ConfigError&) {
    group_store.reset();
    throw;
  } catch (const std::exception& e) {
    group_store.reset();
    throw RuntimeError("cannot create the " + std::string(context.use_gpu() ? "NCCL" : "Gloo") +
                       " process group for " + where(context) + ": " + e.what());
  }
}

void stop_process_group() {
  std::lock_guard<std::mutex> lock(group_mutex);
#if defined(TRAINRUN_RUNTIME_WITH_NCCL) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2))
  // A NCCL group destroyed without a shutdown leaks its communicators, and PyTorch 2.x warns
  // about it at exit.
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(group.get())) nccl->shutdown();
#endif
  // The group goes first: its threads may still talk to peers the store introduced.
  group.reset();
  group_gpu = -1;
  group_store.reset();
}

bool process_group_started() {
  std::lock_guard<std::mutex> lock(group_mutex);
  return static_cast<bool>(group);
}

void barrier() {
  c10::intrusive_ptr<ProcessGroup> current;
  c10d::BarrierOptions options;
  {
    std::lock_guard<std::mutex> lock(group_mutex);
    current = group;
    if (group_gpu >= 0) options.device_ids = {group_gpu};
  }
  if (!current) return;
  try {
    current->barrier(options)->wait();
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("barrier across ranks failed: ") + e.what() +
                       "; another worker probably stopped");
  }
}

std::string share_from_rank0(int rank, const std::string& key, const std::string& value) {
  c10::intrusive_ptr<c10d::Store> store;
  {
    std::lock_guard<std::mutex> lock(group_mutex);
    store = group_store;
  }
  if (!store) return value;
  try {
    if (rank == 0) {
      store->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
      return value;
    }
    const auto bytes = store->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw RuntimeError("cannot read rank 0's " + key + " from the job's store: " + e.what() +
                       "; rank 0 probably stopped");
  }
}

}  // namespace detail

c10::intrusive_ptr<ProcessGroup> get_process_group() {
  detail::current_session();
  std::lock_guard<std::mutex> lock(detail::group_mutex);
  return detail::group;
}

int choose_gpu(bool launched, int local_rank, int visible) {
  if (visible == 1 || !launched) return 0;
  return local_rank;
}

c10::Device get_device() {
  const TrainContext& context = get_context();
  if (!context.use_gpu()) return c10::Device(c10::kCPU);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(detail::gpu_index(context)));
}

}  // namespace trainrun::runtime
