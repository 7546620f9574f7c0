#pragma once

#include "dataset_files.hpp"
#include "options.hpp"

namespace fashion_mnist {

struct Data {
  Split train;
  Split test;
};

// The training function every worker runs (the same alone, under a launcher, or as one of the
// workers started by --num-workers): ResNet-18, Adam, cross-entropy; evaluates on the test split
// and reports {epoch, loss, test_accuracy, ...} with a checkpoint (model.pt, optimizer.pt,
// train_state.json) every epoch; resumes from get_checkpoint() when there is one. Rank 0 prints
// each epoch's metrics.
void train(const Options& options, const Data& data);

}  // namespace fashion_mnist
