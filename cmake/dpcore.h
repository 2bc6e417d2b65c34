// dpcore for embedding programs: #include <dpcore/dpcore.h> (after find_package(dpcore)
// and target_link_libraries(app dpcore::dpcore)). Each header below can also be included
// on its own as <dpcore/PATH>, e.g. <dpcore/train/step/step.h>. docs/embedding.md shows a program.
#pragma once

// engine: tensors, autograd, the differentiable ops, devices and allocators, SGD, traces
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/runtime.h"
#include "engine/sgd.h"
#include "engine/tensor.h"
#include "engine/trace.h"
// engine: datasets, the batch loader, safetensors files
#include "engine/data/augment.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/data/spec.h"
#include "engine/io/safetensors.h"
// layers: modules, models over flat parameters, the reference models, weights files
#include "layers/model.h"
#include "layers/module.h"
#include "layers/resnet.h"
#include "layers/weights.h"
#include "layers/zoo.h"
// comm: communicators (local ring, MPI, NCCL)
#include "comm/communicator.h"
// train: the exact accumulation step, runners (one device, dp, ddp), checkpoints, the loop
#include "train/checkpoints/checkpoint.h"
#include "train/schedule/lr_schedule.h"
#include "train/schedule/recipe.h"
#include "train/runners/runner.h"
#include "train/step/step.h"
#include "train/trainer.h"
