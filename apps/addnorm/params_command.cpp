// addnorm params: the parameter count of a model configuration or a preset, with a per-component
// breakdown (nn::count_model_parameters: the layers are built as real modules and counted).
//   addnorm params [--preset gpt2-small|gpt2-medium|bert-base|transformer-base]
//                  [--arch decoder|encoder|encoder-decoder] [--vocab N] [--d-model N] [--heads N]
//                  [--d-ff N] [--layers N | --encoder-layers N --decoder-layers N] [--max-len N]
//                  [--norm KIND] [--placement P] [--positions learned|sinusoidal|none]
//                  [--head tied|untied|none | --tied | --untied] [--no-bias] [--token-types N]
//                  [--embedding-norm] [--pooler] [--json]
// A preset sets every field; flags given with it override those fields. Inconsistent sizes
// (heads not dividing d_model, ...) are usage errors (exit 2).
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/param_count.hpp"
#include "commands.hpp"

namespace addnorm::cli {
namespace {

struct ParamsOptions {
  std::optional<std::string> preset, arch, norm, placement, positions, head;
  std::optional<int64_t> vocab, d_model, heads, d_ff, layers, encoder_layers, decoder_layers, max_len, token_types;
  bool tied = false, untied = false, no_bias = false, embedding_norm = false, pooler = false, json = false;
  nn::ModelSpec spec;  // built by the final callback
  nn::ParameterCount count;
};

// 124439808 -> "124,439,808"
std::string grouped(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return n < 0 ? "-" + out : out;
}

nn::ModelSpec build_spec(const ParamsOptions& o) {
  nn::ModelSpec s;
  if (o.preset) {
    s = nn::model_preset(*o.preset);
  } else if (o.arch) {
    // Without a preset, the architecture's classic shape: GPT-2 small, BERT base, Transformer base.
    const nn::Architecture a = nn::parse_architecture(*o.arch);
    s = nn::model_preset(a == nn::Architecture::decoder_only  ? "gpt2-small"
                         : a == nn::Architecture::encoder_only ? "bert-base"
                                                               : "transformer-base");
    if (a == nn::Architecture::encoder_only) {  // a plain encoder, not BertModel's extras
      s.token_types = 0;
      s.embedding_norm = false;
      s.pooler = false;
    }
  } else {
    s = nn::model_preset("gpt2-small");
  }
  if (o.arch) {
    const nn::Architecture a = nn::parse_architecture(*o.arch);
    if (a != s.architecture) {
      const int64_t n = s.architecture == nn::Architecture::encoder_only ? s.encoder_layers : s.decoder_layers;
      s.architecture = a;
      s.encoder_layers = a == nn::Architecture::decoder_only ? 0 : n;
      s.decoder_layers = a == nn::Architecture::encoder_only ? 0 : n;
    }
  }
  if (o.vocab) s.vocab = *o.vocab;
  if (o.d_model) s.layer.d_model = *o.d_model;
  if (o.heads) s.layer.heads = *o.heads;
  if (o.d_ff) s.layer.d_ff = *o.d_ff;
  if (o.max_len) s.max_len = *o.max_len;
  if (o.layers) {
    s.encoder_layers = s.architecture == nn::Architecture::decoder_only ? 0 : *o.layers;
    s.decoder_layers = s.architecture == nn::Architecture::encoder_only ? 0 : *o.layers;
  }
  if (o.encoder_layers) s.encoder_layers = *o.encoder_layers;
  if (o.decoder_layers) s.decoder_layers = *o.decoder_layers;
  if (o.norm) s.layer.norm.type = nn::parse_norm_type(*o.norm);
  if (o.placement) s.layer.placement = nn::parse_placement(*o.placement);
  if (o.positions) s.positions = nn::parse_position_kind(*o.positions);
  if (o.head) s.head = nn::parse_head_kind(*o.head);
  if (o.tied) s.head = nn::HeadKind::tied;
  if (o.untied) s.head = nn::HeadKind::untied;
  if (o.no_bias) s.layer.bias = false;
  if (o.token_types) s.token_types = *o.token_types;
  if (o.embedding_norm) s.embedding_norm = true;
  if (o.pooler) s.pooler = true;
  return s;
}

std::string describe(const nn::ModelSpec& s) {
  std::ostringstream os;
  os << nn::architecture_name(s.architecture) << ", ";
  if (s.architecture == nn::Architecture::encoder_decoder) {
    os << s.encoder_layers << " + " << s.decoder_layers << " layers";
  } else {
    os << (s.architecture == nn::Architecture::encoder_only ? s.encoder_layers : s.decoder_layers) << " layers";
  }
  os << ", d_model " << s.layer.d_model << ", " << s.layer.heads << " heads, d_ff " << s.layer.d_ff << ", vocab "
     << s.vocab;
  if (s.positions == nn::PositionKind::learned) os << ", max_len " << s.max_len;
  os << "\n  placement " << nn::placement_name(s.layer.placement) << ", norm " << nn::norm_type_name(s.layer.norm.type)
     << ", positions " << nn::position_kind_name(s.positions) << ", head " << nn::head_kind_name(s.head) << ", biases "
     << (s.layer.bias ? "on" : "off");
  if (s.token_types > 0) os << ", token types " << s.token_types;
  if (s.embedding_norm) os << ", embedding norm";
  if (s.pooler) os << ", pooler";
  return os.str();
}

void print_plain(const ParamsOptions& o, std::ostream& out) {
  const nn::ParameterCount& c = o.count;
  out << "addnorm params" << (o.preset ? ": " + *o.preset : std::string()) << "\n  " << describe(o.spec) << "\n\n";
  const auto row = [&](const std::string& name, const std::string& detail, const std::string& each,
                       const std::string& copies, const std::string& total) {
    out << std::left << std::setw(24) << name << std::setw(40) << detail << std::right << std::setw(13) << each
        << std::setw(8) << copies << std::setw(14) << total << "\n";
  };
  row("component", "shape / detail", "each", "copies", "total");
  for (const auto& comp : c.components) {
    row(comp.name, comp.detail, grouped(comp.each), std::to_string(comp.copies), grouped(comp.total()));
    if (comp.by_kind.size() > 1)
      for (const auto& [kind, n] : comp.by_kind)
        row("  " + kind, "", grouped(n), std::to_string(comp.copies), grouped(n * comp.copies));
  }
  out << "\nby kind\n";
  for (const auto& [kind, n] : c.by_kind) out << "  " << std::left << std::setw(14) << kind << std::right
                                               << std::setw(14) << grouped(n) << "\n";
  out << "\ntotal " << grouped(c.total) << "\n";
}

void print_json(const ParamsOptions& o, std::ostream& out) {
  const nn::ModelSpec& s = o.spec;
  nlohmann::ordered_json j;
  j["preset"] = o.preset ? nlohmann::ordered_json(*o.preset) : nlohmann::ordered_json(nullptr);
  j["config"] = {{"architecture", nn::architecture_name(s.architecture)},
                 {"vocab", s.vocab},
                 {"d_model", s.layer.d_model},
                 {"heads", s.layer.heads},
                 {"d_ff", s.layer.d_ff},
                 {"encoder_layers", s.encoder_layers},
                 {"decoder_layers", s.decoder_layers},
                 {"max_len", s.max_len},
                 {"norm", nn::norm_type_name(s.layer.norm.type)},
                 {"placement", nn::placement_name(s.layer.placement)},
                 {"positions", nn::position_kind_name(s.positions)},
                 {"head", nn::head_kind_name(s.head)},
                 {"bias", s.layer.bias},
                 {"token_types", s.token_types},
                 {"embedding_norm", s.embedding_norm},
                 {"pooler", s.pooler}};
  j["total"] = o.count.total;
  j["by_kind"] = nlohmann::ordered_json::object();
  for (const auto& [kind, n] : o.count.by_kind) j["by_kind"][kind] = n;
  j["components"] = nlohmann::ordered_json::array();
  for (const auto& comp : o.count.components) {
    nlohmann::ordered_json e{{"name", comp.name}, {"detail", comp.detail}, {"each", comp.each},
                             {"copies", comp.copies}, {"total", comp.total()}};
    e["by_kind"] = nlohmann::ordered_json::object();
    for (const auto& [kind, n] : comp.by_kind) e["by_kind"][kind] = n;
    j["components"].push_back(std::move(e));
  }
  out << j.dump(2) << "\n";
}

}  // namespace

Command add_params_command(CLI::App& root) {
  auto o = std::make_shared<ParamsOptions>();
  CLI::App* sub = root.add_subcommand("params", "Count the parameters of a model configuration or a preset");
  sub->footer(
      "Examples:\n"
      "  addnorm params --preset gpt2-small\n"
      "  addnorm params --preset transformer-base --json     (\"norm\": the layer norms' 30720)\n"
      "  addnorm params --arch decoder --layers 6 --d-model 256 --heads 4 --d-ff 1024 --vocab 8192 --max-len 128\n"
      "Without --preset, --arch starts from its classic shape (decoder: gpt2-small, encoder: BERT base without\n"
      "token types and pooler, encoder-decoder: transformer-base); flags override single fields. --layers sets\n"
      "every stack. Layers and norms are counted from addnorm's real modules; BERT's token-type embeddings\n"
      "(types x d) and pooler (d x d + d) by formula. Exit codes: 0 ok, 1 error, 2 usage error.");
  const auto names = nn::model_preset_names();
  sub->add_option("--preset", o->preset, "A published model")
      ->check(CLI::IsMember(names));
  sub->add_option("--arch", o->arch, "Architecture")
      ->check(CLI::IsMember({"decoder", "encoder", "encoder-decoder"}));
  const auto& positive = CLI::PositiveNumber;
  sub->add_option("--vocab", o->vocab, "Vocabulary size (shared by source and target)")->check(positive);
  sub->add_option("--d-model", o->d_model, "Model width")->check(positive);
  sub->add_option("--heads", o->heads, "Attention heads (must divide d_model)")->check(positive);
  sub->add_option("--d-ff", o->d_ff, "Feed-forward width")->check(positive);
  auto* layers = sub->add_option("--layers", o->layers, "Layers of every stack")->check(positive);
  sub->add_option("--encoder-layers", o->encoder_layers, "Encoder layers")->check(positive)->excludes(layers);
  sub->add_option("--decoder-layers", o->decoder_layers, "Decoder layers")->check(positive)->excludes(layers);
  sub->add_option("--max-len", o->max_len, "Positions of a learned position table")->check(positive);
  sub->add_option("--norm", o->norm, "Norm kind")
      ->check(CLI::IsMember({"layer", "rms", "batch", "scale", "none"}));
  sub->add_option("--placement", o->placement, "Where the norms sit")
      ->check(CLI::IsMember({"post", "pre", "sandwich", "peri", "deepnorm", "rezero", "none"}));
  sub->add_option("--positions", o->positions, "Position encoding")
      ->check(CLI::IsMember({"learned", "sinusoidal", "none"}));
  auto* head = sub->add_option("--head", o->head, "Output projection: tied to the embedding, untied, or none")
                   ->check(CLI::IsMember({"tied", "untied", "none"}));
  auto* tied = sub->add_flag("--tied", o->tied, "Same as --head tied")->excludes(head);
  sub->add_flag("--untied", o->untied, "Same as --head untied")->excludes(head)->excludes(tied);
  sub->add_flag("--no-bias", o->no_bias, "No biases in the attention and feed-forward projections");
  sub->add_option("--token-types", o->token_types, "Segment embeddings (BERT: 2)")->check(CLI::NonNegativeNumber);
  sub->add_flag("--embedding-norm", o->embedding_norm, "A norm after the embeddings (BERT)");
  sub->add_flag("--pooler", o->pooler, "BERT's pooler (a d x d Linear with bias)");
  sub->add_flag("--json", o->json, "Print {\"total\", \"by_kind\", \"components\", \"config\"} as JSON");
  sub->final_callback([o] {
    try {
      o->spec = build_spec(*o);
      o->count = nn::count_model_parameters(o->spec);
    } catch (const Error& e) {
      throw CLI::ValidationError("params", e.what());
    }
  });
  return {sub, [o] {
            if (o->json) {
              print_json(*o, std::cout);
            } else {
              print_plain(*o, std::cout);
            }
            std::cout.flush();
            return std::cout.good() ? 0 : 1;
          }};
}

}  // namespace addnorm::cli
