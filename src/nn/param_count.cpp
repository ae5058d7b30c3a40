// Parameter counts of whole models. See include/addnorm/nn/param_count.hpp.
#include "addnorm/nn/param_count.hpp"

#include <map>
#include <string>

#include "addnorm/core/error.hpp"
#include "addnorm/nn/decoder_layer.hpp"
#include "addnorm/nn/encoder_layer.hpp"
#include "addnorm/nn/norm.hpp"

namespace addnorm::nn {
namespace {

using Kinds = std::vector<std::pair<std::string, int64_t>>;

// A real module's parameters, by kind (first-seen order), named with prefix.
template <class Module>
Kinds kinds_of(Module& m, const std::string& prefix) {
  ParameterList<float> list;
  m.parameters(list, prefix);
  Kinds out;
  for (const auto& e : list) {
    const std::string kind(parameter_kind(e.name));
    bool found = false;
    for (auto& [k, n] : out)
      if (k == kind) {
        n += e.param->numel();
        found = true;
      }
    if (!found) out.emplace_back(kind, e.param->numel());
  }
  return out;
}

int64_t sum(const Kinds& k) {
  int64_t n = 0;
  for (const auto& e : k) n += e.second;
  return n;
}

std::string times(int64_t a, int64_t b) { return std::to_string(a) + " x " + std::to_string(b); }

}  // namespace

Architecture parse_architecture(std::string_view name) {
  if (name == "decoder" || name == "decoder-only" || name == "gpt") return Architecture::decoder_only;
  if (name == "encoder" || name == "encoder-only" || name == "bert") return Architecture::encoder_only;
  if (name == "encoder-decoder" || name == "seq2seq" || name == "transformer") return Architecture::encoder_decoder;
  fail("parse_architecture", "unknown architecture '", std::string(name),
       "' (expected decoder, encoder or encoder-decoder)");
}

std::string_view architecture_name(Architecture a) {
  switch (a) {
    case Architecture::decoder_only: return "decoder-only";
    case Architecture::encoder_only: return "encoder-only";
    case Architecture::encoder_decoder: return "encoder-decoder";
  }
  return "?";
}

PositionKind parse_position_kind(std::string_view name) {
  if (name == "learned") return PositionKind::learned;
  if (name == "sinusoidal") return PositionKind::sinusoidal;
  if (name == "none") return PositionKind::none;
  fail("parse_position_kind", "unknown positions '", std::string(name), "' (expected learned, sinusoidal or none)");
}

std::string_view position_kind_name(PositionKind p) {
  switch (p) {
    case PositionKind::learned: return "learned";
    case PositionKind::sinusoidal: return "sinusoidal";
    case PositionKind::none: return "none";
  }
  return "?";
}

HeadKind parse_head_kind(std::string_view name) {
  if (name == "tied") return HeadKind::tied;
  if (name == "untied") return HeadKind::untied;
  if (name == "none") return HeadKind::none;
  fail("parse_head_kind", "unknown head '", std::string(name), "' (expected tied, untied or none)");
}

std::string_view head_kind_name(HeadKind h) {
  switch (h) {
    case HeadKind::tied: return "tied";
    case HeadKind::untied: return "untied";
    case HeadKind::none: return "none";
  }
  return "?";
}

std::string_view parameter_kind(std::string_view name) {
  const auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (has("self_attn.") || has("cross_attn.")) return "attention";
  if (has("ffn.")) return "ffn";
  if (has("rezero")) return "residual";
  if (has("norm")) return "norm";
  return "other";
}

ModelSpec model_preset(std::string_view name) {
  ModelSpec s;
  if (name == "gpt2-small" || name == "gpt2-medium") {
    const bool medium = name == "gpt2-medium";
    s.architecture = Architecture::decoder_only;
    s.vocab = 50257;
    s.max_len = 1024;
    s.decoder_layers = medium ? 24 : 12;
    s.layer = make_layer_config(medium ? 1024 : 768, medium ? 16 : 12, medium ? 4096 : 3072, Activation::gelu_tanh,
                                Placement::pre);
    s.positions = PositionKind::learned;
    s.head = HeadKind::tied;
  } else if (name == "bert-base") {
    s.architecture = Architecture::encoder_only;
    s.vocab = 30522;
    s.max_len = 512;
    s.encoder_layers = 12;
    s.decoder_layers = 0;
    s.layer = make_layer_config(768, 12, 3072, Activation::gelu, Placement::post);
    s.layer.norm.eps = 1e-12;
    s.positions = PositionKind::learned;
    s.head = HeadKind::none;  // BertModel: no LM head
    s.token_types = 2;
    s.embedding_norm = true;
    s.pooler = true;
  } else if (name == "transformer-base") {
    s.architecture = Architecture::encoder_decoder;
    s.vocab = 37000;  // the shared source-target BPE vocabulary of WMT 2014 English-German
    s.max_len = 0;
    s.encoder_layers = 6;
    s.decoder_layers = 6;
    s.layer = make_layer_config(512, 8, 2048, Activation::relu, Placement::post);
    s.positions = PositionKind::sinusoidal;
    s.head = HeadKind::tied;
  } else {
    fail("model_preset", "unknown preset '", std::string(name),
         "' (expected gpt2-small, gpt2-medium, bert-base or transformer-base)");
  }
  return s;
}

std::vector<std::string> model_preset_names() { return {"gpt2-small", "gpt2-medium", "bert-base", "transformer-base"}; }

ParameterCount count_model_parameters(const ModelSpec& s) {
  constexpr const char* fn = "count_model_parameters";
  const int64_t d = s.layer.d_model;
  require(s.vocab > 0, fn, "vocab must be > 0, got ", s.vocab);
  require(d > 0 && s.layer.heads > 0 && d % s.layer.heads == 0, fn, "heads ", s.layer.heads,
          " must be > 0 and divide d_model ", d);
  require(s.layer.d_ff > 0, fn, "d_ff must be > 0, got ", s.layer.d_ff);
  require(s.positions != PositionKind::learned || s.max_len > 0, fn, "learned positions need max_len > 0, got ",
          s.max_len);
  require(s.token_types >= 0, fn, "token_types must be >= 0, got ", s.token_types);
  const bool enc = s.architecture != Architecture::decoder_only, dec = s.architecture != Architecture::encoder_only;
  require(!enc || s.encoder_layers > 0, fn, "encoder layers must be > 0, got ", s.encoder_layers);
  require(!dec || s.decoder_layers > 0, fn, "decoder layers must be > 0, got ", s.decoder_layers);

  ParameterCount out;
  const auto add = [&](std::string name, std::string detail, int64_t copies, Kinds kinds) {
    ParameterComponent c{std::move(name), std::move(detail), sum(kinds), copies, std::move(kinds)};
    out.components.push_back(std::move(c));
  };
  add("token embedding", times(s.vocab, d), 1, {{"embedding", s.vocab * d}});
  if (s.positions == PositionKind::learned) add("positions (learned)", times(s.max_len, d), 1, {{"position", s.max_len * d}});
  if (s.positions == PositionKind::sinusoidal) add("positions (sinusoidal)", "no parameters", 1, {{"position", 0}});
  if (s.token_types > 0) add("token-type embedding", times(s.token_types, d), 1, {{"token_type", s.token_types * d}});
  if (s.embedding_norm) {
    Norm<float> norm(d, s.layer.norm);
    add("embedding norm", std::string(norm_type_name(s.layer.norm.type)), 1, kinds_of(norm, "norm."));
  }
  const bool final_norm = needs_final_norm(s.layer.placement);
  const auto final = [&](const char* name) {
    if (!final_norm) return;
    Norm<float> norm(d, s.layer.norm);
    add(name, std::string(norm_type_name(s.layer.norm.type)), 1, kinds_of(norm, "norm."));
  };
  if (enc) {
    EncoderLayer<float> layer(s.layer, 0);
    add("encoder layer", "self-attention + ffn", s.encoder_layers, kinds_of(layer, ""));
    final(s.architecture == Architecture::encoder_only ? "final norm" : "encoder final norm");
  }
  if (s.architecture == Architecture::decoder_only) {
    EncoderLayer<float> layer(s.layer, 0);  // causal self-attention + ffn (GptModel's blocks)
    add("decoder layer", "causal self-attention + ffn", s.decoder_layers, kinds_of(layer, ""));
    final("final norm");
  } else if (dec) {
    DecoderLayer<float> layer(s.layer, 0);
    add("decoder layer", "self-attention + cross-attention + ffn", s.decoder_layers, kinds_of(layer, ""));
    final("decoder final norm");
  }
  if (s.head == HeadKind::tied) add("head", "tied to the token embedding", 1, {{"head", 0}});
  if (s.head == HeadKind::untied) add("head", times(s.vocab, d) + ", no bias", 1, {{"head", s.vocab * d}});
  if (s.pooler) add("pooler", times(d, d) + " + bias " + std::to_string(d), 1, {{"pooler", d * d + d}});

  std::map<std::string, int64_t> totals;
  for (const auto& c : out.components) {
    out.total += c.total();
    for (const auto& [k, n] : c.by_kind) totals[k] += n * c.copies;
  }
  for (const char* k :
       {"embedding", "position", "token_type", "attention", "ffn", "norm", "residual", "head", "pooler", "other"}) {
    const std::string key(k);
    const bool always = key != "token_type" && key != "residual" && key != "pooler" && key != "other";
    const auto it = totals.find(key);
    const int64_t n = it == totals.end() ? 0 : it->second;
    if (always || n != 0) out.by_kind.emplace_back(key, n);
  }
  return out;
}

}  // namespace addnorm::nn
