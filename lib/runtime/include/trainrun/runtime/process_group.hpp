#pragma once

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace trainrun::runtime {

// The collective interface: c10d::ProcessGroup in LibTorch 1.x, c10d::Backend from 2.0 (where
// ProcessGroupGloo and ProcessGroupNCCL became backends). Both offer allreduce, broadcast,
// barrier and the other collectives with the same signatures.
#if TORCH_VERSION_MAJOR >= 2
using ProcessGroup = c10d::Backend;
#else
using ProcessGroup = c10d::ProcessGroup;
#endif

// The job's process group (Gloo on CPU, NCCL with use_gpu on a CUDA build), created from the
// launcher's variables on first use; null in local mode. Rank 0 hosts the c10d TCPStore on
// MASTER_ADDR:MASTER_PORT and the others connect to it within TorchConfig::timeout.
c10::intrusive_ptr<ProcessGroup> get_process_group();

// Where this worker's model and tensors belong with use_gpu: cuda:choose_gpu(...), else cpu.
c10::Device get_device();

// The CUDA device a rank uses among the `visible` ones it sees: the only one when it sees one (a
// per-process CUDA_VISIBLE_DEVICES, as Slurm, Kubernetes and --virtual-local-rank give it), else
// its LOCAL_RANK when launched, else the first.
int choose_gpu(bool launched, int local_rank, int visible);

}  // namespace trainrun::runtime
