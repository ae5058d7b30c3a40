// Learning-rate schedules. See include/addnorm/nn/schedule.hpp.
#include "addnorm/nn/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "addnorm/core/error.hpp"

namespace addnorm::nn {

ScheduleKind parse_schedule(std::string_view name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "linear_warmup" || name == "warmup") return ScheduleKind::linear_warmup;
  if (name == "inverse_sqrt" || name == "noam") return ScheduleKind::inverse_sqrt;
  if (name == "cosine") return ScheduleKind::cosine;
  fail("parse_schedule", "unknown schedule '", std::string(name),
       "' (expected constant, linear_warmup, inverse_sqrt or cosine)");
}

std::string_view schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::linear_warmup: return "linear_warmup";
    case ScheduleKind::inverse_sqrt: return "inverse_sqrt";
    case ScheduleKind::cosine: return "cosine";
  }
  return "?";
}

double Schedule::at(int64_t t) const {
  constexpr const char* fn = "Schedule::at";
  require(t >= 1, fn, "step must be >= 1, got ", t);
  require(std::isfinite(lr) && lr >= 0, fn, "lr must be finite and >= 0, got ", lr);
  require(warmup >= 0, fn, "warmup must be >= 0, got ", warmup);
  const auto s = static_cast<double>(t), w = static_cast<double>(warmup);
  switch (kind) {
    case ScheduleKind::constant: return lr;
    case ScheduleKind::linear_warmup: return warmup == 0 ? lr : lr * std::min(1.0, s / w);
    case ScheduleKind::inverse_sqrt:
      require(warmup > 0 && d_model > 0, fn, "inverse_sqrt needs warmup > 0 and d_model > 0, got ", warmup, " and ",
              d_model);
      return lr / std::sqrt(static_cast<double>(d_model)) * std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
    case ScheduleKind::cosine: {
      require(total > warmup, fn, "cosine needs total > warmup, got ", total, " and ", warmup);
      require(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr, fn, "min_lr must be in [0, lr], got ", min_lr);
      if (t <= warmup) return lr * s / w;
      const double progress = std::min(1.0, (s - w) / static_cast<double>(total - warmup));
      return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return lr;
}

}  // namespace addnorm::nn
