// Parameter counts of whole models without building them: the layers, the final norm and (for BERT)
// the embedding norm are built as real modules and their parameter lists counted (a layer once,
// times the number of layers); the tables are counted from their shapes (vocab x d, max_len x d),
// the same shapes the models allocate. test_models.cpp checks that the count equals
// count_parameters() of real GptModel / Seq2SeqModel parameter lists for every placement and norm.
// Parts addnorm does not model have documented formulas (BERT's token-type embeddings: types x d;
// its pooler: a d x d Linear with bias, d^2 + d).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "addnorm/nn/layer_config.hpp"

namespace addnorm::nn {

enum class Architecture { decoder_only, encoder_only, encoder_decoder };
enum class PositionKind { learned, sinusoidal, none };
enum class HeadKind { tied, untied, none };

// "decoder" (also "decoder-only", "gpt"), "encoder" ("encoder-only", "bert"), "encoder-decoder"
// ("seq2seq", "transformer"); "learned" / "sinusoidal" / "none"; "tied" / "untied" / "none".
Architecture parse_architecture(std::string_view name);
std::string_view architecture_name(Architecture a);
PositionKind parse_position_kind(std::string_view name);
std::string_view position_kind_name(PositionKind p);
HeadKind parse_head_kind(std::string_view name);
std::string_view head_kind_name(HeadKind h);

struct ModelSpec {
  Architecture architecture = Architecture::decoder_only;
  int64_t vocab = 50257;
  int64_t max_len = 1024;
  int64_t encoder_layers = 0;  // encoder-only and encoder-decoder
  int64_t decoder_layers = 12; // decoder-only and encoder-decoder
  LayerConfig layer = make_layer_config(768, 12, 3072, Activation::gelu_tanh, Placement::pre);
  PositionKind positions = PositionKind::learned;
  HeadKind head = HeadKind::tied;  // untied: a (vocab, d) Linear without bias
  int64_t token_types = 0;         // BERT's segment embeddings (types x d)
  bool embedding_norm = false;     // BERT's LayerNorm after the embeddings
  bool pooler = false;             // BERT's pooler: Linear(d, d) with bias
};

// "gpt2-small", "gpt2-medium", "bert-base", "transformer-base"; throws Error for others.
ModelSpec model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

struct ParameterComponent {
  std::string name;    // e.g. "token embedding", "decoder layer", "final norm"
  std::string detail;  // e.g. "50257 x 768"
  int64_t each = 0;    // parameters of one copy
  int64_t copies = 1;  // e.g. the number of layers
  // each copy's parameters by kind, e.g. {{"attention", 2362368}, {"ffn", 4722432}, {"norm", 3072}}
  std::vector<std::pair<std::string, int64_t>> by_kind;
  [[nodiscard]] int64_t total() const { return each * copies; }
};

struct ParameterCount {
  int64_t total = 0;
  std::vector<ParameterComponent> components;
  // Kinds, in this order: embedding, position, token_type, attention, ffn, norm, residual, head,
  // pooler, other; token_type, residual, pooler and other only where nonzero, the rest always.
  std::vector<std::pair<std::string, int64_t>> by_kind;
};

// The kind of a layer parameter from its name: attention (self_attn.*, cross_attn.*), ffn (ffn.*),
// norm (norm*), residual (rezero*).
std::string_view parameter_kind(std::string_view name);

ParameterCount count_model_parameters(const ModelSpec& spec);

}  // namespace addnorm::nn
