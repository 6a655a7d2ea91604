#include "stratum/monitor/run_records.h"

namespace stratum::monitor {

RunRecords::RunRecords(const Config& config, const std::string& log_dir, int64_t samples_per_step, bool lead)
    : lead_(lead), samples_per_step_(samples_per_step) {
  const auto& csv = config.monitor.csv_monitor;
  metrics_dir_ = !log_dir.empty() ? log_dir : csv.enabled ? csv.output_path + "/" + csv.job_name : "";
  const auto& tb = config.monitor.tensorboard;
  if (tb.enabled) tensorboard_dir_ = tb.output_path.empty() ? tb.job_name : tb.output_path + "/" + tb.job_name;
  if (!lead_) return;
  if (!metrics_dir_.empty())
    metrics_ = std::make_unique<MetricsLog>(metrics_dir_, std::vector<std::string>{"step", "loss", "eval_loss", "lr",
                                                                                  "loss_scale", "tokens_per_s", "mfu",
                                                                                  "memory_gib", "grad_norm", "skipped",
                                                                                  "expert_imbalance", "experts_dropped",
                                                                                  "straggler"});
  if (!tensorboard_dir_.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir_);
}

void RunRecords::step(const StepMetrics& m, double grad_norm, std::optional<double> eval_loss) {
  if (!lead_) return;
  summary_.add_step(m, grad_norm);
  if (eval_loss) summary_.add_eval(m.step, *eval_loss);
  if (metrics_) {
    std::map<std::string, double> row = {{"step", double(m.step)},      {"loss", m.loss},
                                         {"lr", m.lr},                  {"loss_scale", m.loss_scale},
                                         {"tokens_per_s", m.tokens_per_second}, {"mfu", m.mfu},
                                         {"memory_gib", m.memory_gib}, {"grad_norm", grad_norm},
                                         {"skipped", double(m.skipped)}};
    if (eval_loss) row["eval_loss"] = *eval_loss;
    if (m.expert_imbalance) row["expert_imbalance"] = *m.expert_imbalance;
    if (m.experts_dropped) row["experts_dropped"] = *m.experts_dropped;
    if (m.straggler) row["straggler"] = *m.straggler;
    metrics_->write(row);
  }
  if (tensorboard_) {
    const int64_t samples = m.step * samples_per_step_;
    tensorboard_->add_scalar("Train/Samples/train_loss", m.loss, samples);
    tensorboard_->add_scalar("Train/Samples/lr", m.lr, samples);
    tensorboard_->add_scalar("Train/Samples/loss_scale", m.loss_scale, samples);
    tensorboard_->add_scalar("Train/Samples/grad_norm", grad_norm, samples);
    tensorboard_->add_scalar("Train/Samples/tokens_per_s", m.tokens_per_second, samples);
    tensorboard_->add_scalar("Train/Samples/mfu", m.mfu, samples);
    tensorboard_->add_scalar("Train/Samples/memory_gib", m.memory_gib, samples);
    if (m.expert_imbalance) tensorboard_->add_scalar("Train/Samples/expert_imbalance", *m.expert_imbalance, samples);
    if (eval_loss) tensorboard_->add_scalar("Eval/Samples/eval_loss", *eval_loss, samples);
    tensorboard_->flush();
  }
}

void RunRecords::finish(const nlohmann::json& about, const std::string& title, double wall_seconds) {
  if (!lead_) return;
  const std::string& dir = !metrics_dir_.empty() ? metrics_dir_ : tensorboard_dir_;
  if (!dir.empty()) summary_.write(dir, about, wall_seconds, title);
}

}  // namespace stratum::monitor
