#pragma once
// Stratum's public API in one header, as <torch/torch.h> is libtorch's:
//
//   #include <stratum/stratum.h>
//
//   auto ctx = stratum::distributed::init();            // first: it outlives the engine
//   auto config = stratum::Config::from_file("ds_config.json");
//   auto engine = stratum::initialize(config, model, ctx);
//   loss = engine.forward(x, y); engine.backward(loss); engine.step();
//
// Installed with `cmake --install build --prefix P`; a project uses it with
// find_package(Stratum REQUIRED) and target_link_libraries(app Stratum::stratum).
#include "stratum/build_info.h"
#include "stratum/checkpoint/checkpoint.h"
#include "stratum/checkpoint/engine_checkpoint.h"
#include "stratum/config/config.h"
#include "stratum/core/error.h"
#include "stratum/core/log.h"
#include "stratum/distributed/init.h"
#include "stratum/distributed/mpi_session.h"
#include "stratum/engine/engine.h"
#include "stratum/engine/pipeline_stages.h"
#include "stratum/engine/tensor_parallel_setup.h"
#include "stratum/models/causal_lm.h"
#include "stratum/models/model_config.h"
#include "stratum/nn/layer_stack.h"
