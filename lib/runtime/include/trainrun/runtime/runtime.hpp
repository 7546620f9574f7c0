#pragma once

// Everything a training program uses: #include <trainrun/runtime/runtime.hpp>.
#include <trainrun/runtime/checkpoint.hpp>
#include <trainrun/runtime/config.hpp>
#include <trainrun/runtime/context.hpp>
#include <trainrun/runtime/data_loader.hpp>
#include <trainrun/runtime/errors.hpp>
#include <trainrun/runtime/prepare_model.hpp>
#include <trainrun/runtime/process_group.hpp>
#include <trainrun/runtime/report.hpp>
#include <trainrun/runtime/run_storage.hpp>
#include <trainrun/runtime/state_dict.hpp>
#include <trainrun/runtime/trainer.hpp>
