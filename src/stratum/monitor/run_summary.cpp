#include "stratum/monitor/run_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "stratum/core/error.h"
#include "stratum/core/fs.h"

namespace stratum::monitor {
namespace {

// The median of the second half (the first steps warm up).
double steady(std::vector<double> v) {
  if (v.empty()) return 0.0;
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string fmt(double v, const char* f = "%.4g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(path + ": cannot write");
}

}  // namespace

void RunSummary::add_step(const StepMetrics& m, double grad_norm) {
  train_.emplace_back(m.step, m.loss);
  tokens_per_s_.push_back(m.tokens_per_second);
  mfu_.push_back(m.mfu);
  peak_memory_gib_ = std::max(peak_memory_gib_, m.memory_gib);
  skipped_ += m.skipped ? 1 : 0;
  last_grad_norm_ = grad_norm;
}

void RunSummary::add_eval(int64_t step, double loss) { eval_.emplace_back(step, loss); }

nlohmann::json RunSummary::to_json(const nlohmann::json& about, double wall_seconds) const {
  nlohmann::json j = about.is_object() ? about : nlohmann::json::object();
  j["steps"] = train_.empty() ? 0 : train_.back().first;
  if (!train_.empty()) {
    j["first_loss"] = train_.front().second;
    j["final_loss"] = train_.back().second;
    double lowest = train_.front().second;
    for (const auto& [step, loss] : train_) lowest = std::min(lowest, loss);
    j["lowest_loss"] = lowest;
    j["final_grad_norm"] = last_grad_norm_;
  }
  if (!eval_.empty()) {
    j["final_eval_loss"] = eval_.back().second;
    auto best = std::min_element(eval_.begin(), eval_.end(), [](auto& a, auto& b) { return a.second < b.second; });
    j["best_eval_loss"] = best->second;
    j["best_eval_step"] = best->first;
  }
  j["tokens_per_s"] = steady(tokens_per_s_);
  j["mfu"] = steady(mfu_);
  j["peak_memory_gib"] = peak_memory_gib_;
  j["skipped_steps"] = skipped_;
  j["wall_seconds"] = wall_seconds;
  return j;
}

std::string RunSummary::loss_curve_svg(const std::string& title) const {
  const double W = 720, H = 400, left = 70, right = 20, top = 40, bottom = 50;
  const double pw = W - left - right, ph = H - top - bottom;
  int64_t s0 = 0, s1 = 1;
  double lo = 0, hi = 1;
  bool any = false;
  for (const auto* series : {&train_, &eval_})
    for (const auto& [step, loss] : *series) {
      if (!std::isfinite(loss)) continue;
      if (!any) s0 = s1 = step, lo = hi = loss, any = true;
      s0 = std::min(s0, step), s1 = std::max(s1, step), lo = std::min(lo, loss), hi = std::max(hi, loss);
    }
  if (s1 == s0) s1 = s0 + 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  auto x = [&](int64_t s) { return left + pw * static_cast<double>(s - s0) / static_cast<double>(s1 - s0); };
  auto y = [&](double v) { return top + ph * (hi - v) / (hi - lo); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt(W) + "\" height=\"" + fmt(H) +
                    "\" viewBox=\"0 0 " + fmt(W) + " " + fmt(H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + fmt(W / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" + escape(title) + "</text>\n";
  // Axes, five ticks each.
  svg += "<g stroke=\"#888\"><line x1=\"" + fmt(left) + "\" y1=\"" + fmt(top + ph) + "\" x2=\"" + fmt(left + pw) +
         "\" y2=\"" + fmt(top + ph) + "\"/><line x1=\"" + fmt(left) + "\" y1=\"" + fmt(top) + "\" x2=\"" + fmt(left) +
         "\" y2=\"" + fmt(top + ph) + "\"/></g>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4.0;
    const int64_t s = s0 + (s1 - s0) * i / 4;
    svg += "<text x=\"" + fmt(left - 6) + "\" y=\"" + fmt(y(v) + 4) + "\" text-anchor=\"end\">" + fmt(v, "%.3g") +
           "</text>\n";
    svg += "<line x1=\"" + fmt(left) + "\" y1=\"" + fmt(y(v)) + "\" x2=\"" + fmt(left + pw) + "\" y2=\"" + fmt(y(v)) +
           "\" stroke=\"#eee\"/>\n";
    svg += "<text x=\"" + fmt(x(s)) + "\" y=\"" + fmt(top + ph + 18) + "\" text-anchor=\"middle\">" +
           std::to_string(s) + "</text>\n";
  }
  svg += "<text x=\"" + fmt(left + pw / 2) + "\" y=\"" + fmt(H - 10) + "\" text-anchor=\"middle\">step</text>\n";
  svg += "<text x=\"16\" y=\"" + fmt(top + ph / 2) + "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " +
         fmt(top + ph / 2) + ")\">loss</text>\n";
  auto polyline = [&](const std::vector<std::pair<int64_t, double>>& series, const char* color, bool dots) {
    std::string points;
    for (const auto& [step, loss] : series)
      if (std::isfinite(loss)) points += fmt(x(step), "%.1f") + "," + fmt(y(loss), "%.1f") + " ";
    std::string out = "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"1.5\" points=\"" +
                      points + "\"/>\n";
    if (dots)
      for (const auto& [step, loss] : series)
        if (std::isfinite(loss))
          out += "<circle cx=\"" + fmt(x(step), "%.1f") + "\" cy=\"" + fmt(y(loss), "%.1f") + "\" r=\"3\" fill=\"" +
                 color + "\"/>\n";
    return out;
  };
  svg += polyline(train_, "#1f77b4", false);
  if (!eval_.empty()) svg += polyline(eval_, "#ff7f0e", true);
  svg += "<g font-size=\"12\"><line x1=\"" + fmt(left + pw - 120) + "\" y1=\"" + fmt(top + 12) + "\" x2=\"" +
         fmt(left + pw - 100) + "\" y2=\"" + fmt(top + 12) + "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" +
         fmt(left + pw - 94) + "\" y=\"" + fmt(top + 16) + "\">train</text>";
  if (!eval_.empty())
    svg += "<circle cx=\"" + fmt(left + pw - 110) + "\" cy=\"" + fmt(top + 30) + "\" r=\"3\" fill=\"#ff7f0e\"/><text x=\"" +
           fmt(left + pw - 94) + "\" y=\"" + fmt(top + 34) + "\">eval</text>";
  svg += "</g>\n</svg>\n";
  return svg;
}

void RunSummary::write(const std::string& directory, const nlohmann::json& about, double wall_seconds,
                       const std::string& title) const {
  fs::make_directories(directory);
  write_file(directory + "/summary.json", to_json(about, wall_seconds).dump(2) + "\n");
  write_file(directory + "/loss_curve.svg", loss_curve_svg(title));
}

}  // namespace stratum::monitor
