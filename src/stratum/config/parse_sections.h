#pragma once
// Internal: one function per group of ds_config sections. Each reads its keys
// from the top-level reader into `config` and records problems in the reader's
// Diagnostics; cross-field rules come after all sections are read.
#include "stratum/config/config.h"
#include "stratum/config/key_reader.h"

namespace stratum::config {

void parse_training(KeyReader& root, Config& config);   // batch, optimizer, scheduler, precision, clipping
void parse_zero(KeyReader& root, Config& config);       // zero_optimization and its offload sections
void parse_parallel(KeyReader& root, Config& config);   // pipeline, tensor_parallel, activation_checkpointing
void parse_diagnostics(KeyReader& root, Config& config);  // comms_logger, monitors, printing
void parse_flops_profiler(KeyReader& root, Config& config);  // flops_profiler
void parse_lora(KeyReader& root, Config& config);       // lora (after the precision sections)
void parse_moe(KeyReader& root, Config& config);        // moe
void parse_fp8(KeyReader& root, Config& config);        // fp8 (after the precision and parallel sections)
void check_cross_field_rules(const Config& config, Diagnostics& diag);
// The pipeline's share of them (what its engine cannot do).
void check_pipeline_rules(const Config& config, Diagnostics& diag);

}  // namespace stratum::config
