// Learning-rate schedules, as a function of the step t = 1, 2, ... (the optimizer's step count
// after the update it is used for, as in PyTorch's LambdaLR after t - 1 scheduler steps):
//
//   constant:       lr
//   linear warm-up: lr * min(1, t / warmup)                                 (warmup = 0: lr)
//   inverse sqrt:   lr * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)        (Vaswani et al. 2017,
//                   lr is the factor in front, 1 in the paper; peak at t = warmup)
//   cosine:         t <= warmup: lr * t / warmup
//                   else: min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * s)),
//                   s = min(1, (t - warmup) / (total - warmup))
#pragma once

#include <cstdint>
#include <string_view>

namespace addnorm::nn {

enum class ScheduleKind { constant, linear_warmup, inverse_sqrt, cosine };

// "constant", "linear_warmup" (also "warmup"), "inverse_sqrt" (also "noam"), "cosine".
ScheduleKind parse_schedule(std::string_view name);
std::string_view schedule_name(ScheduleKind kind);

struct Schedule {
  ScheduleKind kind = ScheduleKind::constant;
  double lr = 1e-3;       // base / peak rate (inverse sqrt: the factor)
  int64_t warmup = 0;     // steps; inverse sqrt needs > 0
  int64_t total = 0;      // cosine: the step at which the rate reaches min_lr (> warmup)
  double min_lr = 0.0;    // cosine
  int64_t d_model = 512;  // inverse sqrt

  // The learning rate at step t >= 1. Throws Error for t < 1 or an inconsistent schedule.
  [[nodiscard]] double at(int64_t t) const;
};

}  // namespace addnorm::nn
