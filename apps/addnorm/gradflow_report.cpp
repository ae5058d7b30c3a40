// addnorm gradflow transformer: the text report (a summary table, per-layer tables with bars, the
// literature's claims next to the measurements), --json, --csv and --plot.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "addnorm/io/csv.hpp"
#include "addnorm/io/svg.hpp"
#include "gradflow.hpp"

namespace addnorm::cli::gradflow {
namespace {

using lab::TransformerGradflow;

std::string name_of(const TransformerGradflow& t) { return std::string(nn::placement_name(t.config.placement)); }
std::string norm_of(const TransformerGradflow& t) { return std::string(nn::norm_type_name(t.config.norm)); }
double last(const std::vector<double>& v) { return v.empty() ? NAN : v.back(); }

std::string pad(std::string s, size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}
std::string lpad(const std::string& s, size_t n) { return s.size() < n ? std::string(n - s.size(), ' ') + s : s; }

// "1.23e-02 ± 4.5e-04"
std::string pm(double mean, double sd) { return fmt_e(mean, 2) + " \u00b1 " + fmt_e(sd, 1); }

// The results of one (placement, norm), by depth ascending.
std::map<std::pair<std::string, std::string>, std::vector<const TransformerGradflow*>> by_curve(
    const TransformerReport& r) {
  std::map<std::pair<std::string, std::string>, std::vector<const TransformerGradflow*>> m;
  for (const auto& t : r.results) m[{name_of(t), norm_of(t)}].push_back(&t);
  for (auto& [k, v] : m)
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->config.layers < b->config.layers; });
  return m;
}

// The curves in the order of the results (placements as given).
std::vector<std::pair<std::string, std::string>> curve_order(const TransformerReport& r) {
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& t : r.results) {
    const std::pair<std::string, std::string> k{name_of(t), norm_of(t)};
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  }
  return order;
}

// a / b in %.2e, "n/a (both 0)" for 0 / 0, "inf" for a / 0.
std::string ratio_text(double a, double b) {
  if (b == 0) return a == 0 ? "n/a (both 0)" : "inf";
  return fmt_e(a / b, 2);
}

void print_layer_table(const TransformerGradflow& t, std::ostream& os) {
  constexpr int kWidth = 20;
  const lab::Spread* w2 = t.group("ffn_w2");
  const lab::Spread* at = t.group("attention");
  const auto d = static_cast<double>(t.config.d_model);
  double lo = INFINITY, hi = 0, hhi = 0;
  for (const auto* g : {w2, at})
    for (const double v : g->mean)
      if (v > 0 && std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  for (const double v : t.hidden_norm_sq.mean)
    if (std::isfinite(v)) hhi = std::max(hhi, v / d);
  os << "\n" << name_of(t) << " (" << norm_of(t) << "), " << t.config.layers
     << " layers: per layer, top to bottom (gradient bars on one log scale";
  if (hi > 0) os << ", " << fmt_e(lo, 1) << " .. " << fmt_e(hi, 1);
  os << "; hidden bars linear from 0)\n";
  os << "  layer  " << pad("||dL/dW2||", kWidth + 10) << pad("||dL/d attention||", kWidth + 10) << "||x_l||^2 / d\n";
  for (auto l = static_cast<int64_t>(t.config.layers); l >= 1; --l) {
    const auto i = static_cast<size_t>(l - 1);
    const double h = t.hidden_norm_sq.mean[i] / d;
    os << lpad(std::to_string(l), 7) << "  " << fmt_e(w2->mean[i], 2) << " " << bar(log_fraction(w2->mean[i], lo, hi), kWidth)
       << "  " << fmt_e(at->mean[i], 2) << " " << bar(log_fraction(at->mean[i], lo, hi), kWidth) << "  "
       << fmt_f(h, 3) << " " << bar(hhi > 0 ? h / hhi : 0.0, 12) << "\n";
  }
}

void print_claims(const TransformerReport& r, std::ostream& os) {
  const auto by = by_curve(r);
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<const TransformerGradflow*>>> curves;
  for (const auto& key : curve_order(r)) curves.emplace_back(key, by.at(key));
  const auto d = static_cast<double>(r.base.d_model);
  os << "\nClaims from the literature, next to this measurement (judge for yourself; nothing was tuned):\n";

  // Theorem 1: the last layer's W2 gradient against depth.
  os << "\n1. Xiong et al. 2020, Theorem 1: the last layer's ||dL/dW2|| stays about constant as L grows for Post-LN\n"
        "   and falls like 1/sqrt(L) for Pre-LN. Measured (mean over seeds):\n";
  for (const auto& [key, runs] : curves) {
    if (key.first != "post" && key.first != "pre") continue;
    os << "   " << pad(key.first + " (" + key.second + ")", 18);
    for (const auto* t : runs) os << "L=" << t->config.layers << ": " << fmt_e(last(t->group("ffn_w2")->mean), 2) << "  ";
    if (runs.size() >= 2) {
      const double l0 = static_cast<double>(runs.front()->config.layers), l1 = static_cast<double>(runs.back()->config.layers);
      const double ratio = last(runs.back()->group("ffn_w2")->mean) / last(runs.front()->group("ffn_w2")->mean);
      os << "\n" << std::string(21, ' ') << "ratio L=" << runs.back()->config.layers << " / L=" << runs.front()->config.layers
         << ": " << fmt_f(ratio, 3) << "   (constant: 1; 1/sqrt(L): " << fmt_f(std::sqrt(l0 / l1), 3) << ")";
    }
    os << "\n";
  }
  // Inside the deepest stack.
  os << "   Inside a stack (deepest L): their figure shows ||dL/dW2|| growing with the layer index for Post-LN and\n"
        "   nearly flat for Pre-LN; NormFormer (Shleifer et al. 2021) reports early Pre-LN layers getting much larger\n"
        "   gradients than late ones. Measured top layer / bottom layer:\n";
  for (const auto& [key, runs] : curves) {
    const auto& w2 = runs.back()->group("ffn_w2")->mean;
    os << "   " << pad(key.first + " (" + key.second + ")", 18) << "L=" << runs.back()->config.layers << ": "
       << ratio_text(w2.back(), w2.front()) << "\n";
  }

  // Lemma 2.
  os << "\n2. Xiong et al. 2020, Lemma 2 (their setting, --setup xiong" << (r.base.setup == lab::GradflowSetup::xiong ? ", as here" : "; this run is --setup standard")
     << "):\n   Post-LN E||x^{post,5}_l||^2 = 1.5 d; Pre-LN (1 + l/2) d <= E||x_l||^2 <= (1 + 3l/2) d, x_l the stream\n"
        "   after l layers. Measured, / d:\n";
  for (const auto& [key, runs] : curves) {
    const auto* t = runs.back();
    if (key.first == "post" || key.first == "deepnorm") {
      const auto& s = t->sum_norm_sq.mean;
      double lo = INFINITY, hi = -INFINITY, sum = 0;
      for (const double v : s) lo = std::min(lo, v / d), hi = std::max(hi, v / d), sum += v / d;
      os << "   " << pad(key.first + " (" + key.second + ")", 18) << "L=" << t->config.layers
         << ": ||h + FFN(h)||^2 / d mean over layers " << fmt_f(sum / static_cast<double>(s.size()), 3) << " (range "
         << fmt_f(lo, 3) << " .. " << fmt_f(hi, 3) << ")" << (key.first == "post" ? "   claim: 1.5" : "") << "\n";
    } else if (key.first == "pre") {
      int inside = 0;
      const auto& h = t->hidden_norm_sq.mean;
      for (size_t i = 0; i < h.size(); ++i) {
        const double l = static_cast<double>(i + 1), v = h[i] / d;
        inside += (v >= 1 + l / 2 && v <= 1 + 3 * l / 2) ? 1 : 0;
      }
      const double l = static_cast<double>(h.size());
      os << "   " << pad(key.first + " (" + key.second + ")", 18) << "L=" << t->config.layers
         << ": layers inside the bounds " << inside << " of " << h.size() << "; l=1: " << fmt_f(h.front() / d, 3)
         << " in [1.5, 2.5]; l=" << h.size() << ": " << fmt_f(h.back() / d, 3) << " in [" << fmt_f(1 + l / 2, 1) << ", "
         << fmt_f(1 + 3 * l / 2, 1) << "]\n";
    }
  }

  // No residual.
  os << "\n3. Without residual connections the gradients at the bottom of a 12-layer stack vanish. Measured\n"
        "   ||dL/dW2|| of the bottom layer / the top layer (and the bottom layer's value):\n";
  for (const auto& [key, runs] : curves) {
    const TransformerGradflow* t = runs.back();
    for (const auto* u : runs)
      if (u->config.layers == 12) t = u;
    const auto& w2 = t->group("ffn_w2")->mean;
    os << "   " << pad(key.first + " (" + key.second + ")", 18) << "L=" << t->config.layers << ": "
       << ratio_text(w2.front(), w2.back()) << " (" << fmt_e(w2.front(), 2) << ")"
       << (key.first == "none" ? "   claim: vanishes" : "") << "\n";
  }
}

nlohmann::ordered_json spread_json(const lab::Spread& s) { return {{"mean", s.mean}, {"sd", s.sd}}; }

}  // namespace

void print_transformer_text(const TransformerReport& r, std::ostream& os) {
  const auto& b = r.base;
  os << "gradflow transformer: setup " << lab::gradflow_setup_name(b.setup) << ", d_model " << b.d_model << ", heads "
     << (b.setup == lab::GradflowSetup::xiong ? 1 : b.heads) << ", d_ff " << b.d_ff << ", seq " << b.seq << ", batch "
     << b.batch << ", vocab " << b.vocab << ", " << r.seeds << (r.seeds == 1 ? " seed" : " seeds") << ", " << r.dtype
     << "\nmean \u00b1 standard deviation over the seeds; log(vocab) = " << fmt_f(std::log(static_cast<double>(b.vocab)), 3)
     << "\n\n";
  os << "placement  norm   layers  loss             last ||dL/dW2||      bottom ||dL/dW2||    ||x_L||^2 / d\n";
  for (const auto& t : r.results) {
    const lab::Spread* w2 = t.group("ffn_w2");
    os << pad(name_of(t), 11) << pad(norm_of(t), 7) << pad(std::to_string(t.config.layers), 8)
       << pad(fmt_f(t.loss.mean[0], 3) + " \u00b1 " + fmt_f(t.loss.sd[0], 3), 17) << pad(pm(last(w2->mean), last(w2->sd)), 21)
       << pad(pm(w2->mean.front(), w2->sd.front()), 21) << fmt_f(last(t.hidden_norm_sq.mean) / static_cast<double>(b.d_model), 3)
       << "\n";
  }
  const auto curves = by_curve(r);
  for (const auto& key : curve_order(r)) print_layer_table(*curves.at(key).back(), os);
  print_claims(r, os);
}

void print_transformer_json(const TransformerReport& r, std::ostream& os) {
  nlohmann::ordered_json j;
  const auto& b = r.base;
  j["config"] = {{"setup", lab::gradflow_setup_name(b.setup)},
                 {"d_model", b.d_model},
                 {"heads", b.setup == lab::GradflowSetup::xiong ? 1 : b.heads},
                 {"d_ff", b.d_ff},
                 {"seq", b.seq},
                 {"batch", b.batch},
                 {"vocab", b.vocab},
                 {"eps", b.eps},
                 {"seeds", r.seeds},
                 {"seed", r.seed},
                 {"dtype", r.dtype}};
  j["results"] = nlohmann::ordered_json::array();
  for (const auto& t : r.results) {
    const lab::Spread* w2 = t.group("ffn_w2");
    nlohmann::ordered_json e;
    e["placement"] = name_of(t);
    e["norm"] = norm_of(t);
    e["layers"] = t.config.layers;
    e["seeds"] = t.seeds;
    e["loss"] = t.loss.mean[0];
    e["loss_sd"] = t.loss.sd[0];
    e["last_ffn_w2_grad_norm"] = last(w2->mean);
    e["last_ffn_w2_grad_norm_sd"] = last(w2->sd);
    e["ffn_w2_grad_norm"] = w2->mean;
    e["ffn_w2_grad_norm_sd"] = w2->sd;
    e["hidden_norm_sq"] = t.hidden_norm_sq.mean;
    e["hidden_norm_sq_sd"] = t.hidden_norm_sq.sd;
    if (!t.sum_norm_sq.mean.empty()) {
      e["sum_norm_sq"] = t.sum_norm_sq.mean;
      e["sum_norm_sq_sd"] = t.sum_norm_sq.sd;
    }
    e["input_norm_sq"] = t.input_norm_sq.mean[0];
    e["groups"] = nlohmann::ordered_json::object();
    for (size_t k = 0; k < t.group_names.size(); ++k) e["groups"][t.group_names[k]] = spread_json(t.groups[k]);
    e["model_groups"] = nlohmann::ordered_json::object();
    for (size_t k = 0; k < t.model_group_names.size(); ++k)
      e["model_groups"][t.model_group_names[k]] = {{"mean", t.model_groups[k].mean[0]}, {"sd", t.model_groups[k].sd[0]}};
    j["results"].push_back(e);
  }
  os << j.dump() << "\n";
}

std::string transformer_csv(const TransformerReport& r) {
  // Columns: every group that any result has, each as mean and sd. Cells a result lacks are empty.
  std::vector<std::string> groups;
  for (const auto& t : r.results)
    for (const auto& g : t.group_names)
      if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  std::string s = "placement,norm,layers,layer,loss,loss_sd,hidden_norm_sq,hidden_norm_sq_sd,sum_norm_sq,sum_norm_sq_sd";
  for (const auto& g : groups) {
    s.append(",grad_").append(g).append(",grad_").append(g).append("_sd");
  }
  s += "\n";
  // One field per call, comma-separated within a line (appends: GCC 12 misreports -Wrestrict on
  // chains of std::string operator+).
  bool first = true;
  const auto field = [&](const std::string& v) {
    if (!first) s += ',';
    s += v;
    first = false;
  };
  const auto num = [](double v) { return io::shortest_number(v); };
  for (const auto& t : r.results)
    for (size_t i = 0; i < static_cast<size_t>(t.config.layers); ++i) {
      first = true;
      field(name_of(t));
      field(norm_of(t));
      field(std::to_string(t.config.layers));
      field(std::to_string(i + 1));
      field(num(t.loss.mean[0]));
      field(num(t.loss.sd[0]));
      field(num(t.hidden_norm_sq.mean[i]));
      field(num(t.hidden_norm_sq.sd[i]));
      const bool has_sum = !t.sum_norm_sq.mean.empty();
      field(has_sum ? num(t.sum_norm_sq.mean[i]) : "");
      field(has_sum ? num(t.sum_norm_sq.sd[i]) : "");
      for (const auto& g : groups) {
        const lab::Spread* sp = t.group(g);
        field(sp ? num(sp->mean[i]) : "");
        field(sp ? num(sp->sd[i]) : "");
      }
      s += "\n";
    }
  return s;
}

void write_transformer_plot(const TransformerReport& r, const std::string& path) {
  int64_t deepest = 0;
  for (const auto& t : r.results) deepest = std::max(deepest, t.config.layers);
  io::LineChart c;
  c.title = "FFN W2 gradient norm per layer at initialization, L = " + std::to_string(deepest) + " (" +
            std::string(lab::gradflow_setup_name(r.base.setup)) + ", d = " + std::to_string(r.base.d_model) +
            ", mean of " + std::to_string(r.seeds) + " seeds)";
  c.x_label = "layer (1 = bottom)";
  c.y_label = "||dL/dW2||";
  c.log_y = true;
  const auto curves = by_curve(r);
  for (const auto& key : curve_order(r)) {
    const auto* t = curves.at(key).back();
    if (t->config.layers != deepest) continue;
    const auto& w2 = t->group("ffn_w2")->mean;
    std::vector<double> x(w2.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i + 1);
    c.series.push_back({key.first + " (" + key.second + ")", x, w2});
  }
  io::write_line_chart(path, c);
}

}  // namespace addnorm::cli::gradflow
