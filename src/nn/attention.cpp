// Multi-head attention forward and backward. See include/addnorm/nn/attention.hpp.
#include "addnorm/nn/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"
#include "addnorm/nn/gemm.hpp"
#include "addnorm/nn/init.hpp"
#include "addnorm/nn/softmax.hpp"
#include "buffer.hpp"
#include "simd/row_ops.hpp"

namespace addnorm::nn {

template <class T>
MultiHeadAttention<T>::MultiHeadAttention(const AttentionConfig& config, uint64_t seed)
    : q_proj(config.d_model, config.d_model, config.bias, mix_seed(seed, 0)),
      k_proj(config.d_model, config.d_model, config.bias, mix_seed(seed, 1)),
      v_proj(config.d_model, config.d_model, config.bias, mix_seed(seed, 2)),
      out_proj(config.d_model, config.d_model, config.bias, mix_seed(seed, 3)),
      config_(config) {
  constexpr const char* fn = "MultiHeadAttention";
  require(config.d_model > 0 && config.heads > 0, fn, "d_model and heads must be > 0, got ", config.d_model,
          " and ", config.heads);
  require(config.d_model % config.heads == 0, fn, "heads = ", config.heads, " does not divide d_model = ",
          config.d_model);
  // Xavier-uniform over the stacked (3d, d) in-projection: fan_in = d, fan_out = 3d.
  const auto d = static_cast<double>(config.d_model);
  const double bound = std::sqrt(6.0 / (d + 3 * d));
  init_uniform<T>(q_proj.weight.value, -bound, bound, mix_seed(seed, 4));
  init_uniform<T>(k_proj.weight.value, -bound, bound, mix_seed(seed, 5));
  init_uniform<T>(v_proj.weight.value, -bound, bound, mix_seed(seed, 6));
  for (Linear<T>* l : {&q_proj, &k_proj, &v_proj, &out_proj}) l->bias.value.assign(l->bias.value.size(), T(0));
}

// y: (B*Tq, d) =    xq: (B*Tq, d)    xkv: (B*Tk, d)    key_valid: (B*Tk) or empty
template <class T>
void MultiHeadAttention<T>::forward(View2D<T> y, View2D<const T> xq, View2D<const T> xkv, int64_t batch,
                                   bool causal, std::span<const uint8_t> key_valid, const DropoutSpec& dropout) {
  constexpr const char* fn = "MultiHeadAttention::forward";
  const int64_t d = config_.d_model, H = config_.heads;
  require(d > 0, fn, "the module is not configured");
  require(batch > 0, fn, "batch must be > 0, got ", batch);
  require(xq.cols() == d && xkv.cols() == d, fn, "xq and xkv must have d_model = ", d, " columns, got ", xq.cols(),
          " and ", xkv.cols());
  require(xq.rows() % batch == 0 && xkv.rows() % batch == 0, fn, "rows ", xq.rows(), " and ", xkv.rows(),
          " are not multiples of batch ", batch);
  require(y.rows() == xq.rows() && y.cols() == d, fn, "y is ", y.rows(), " x ", y.cols(), ", expected ", xq.rows(),
          " x ", d);
  const int64_t tq = xq.rows() / batch, tk = xkv.rows() / batch;
  require(key_valid.empty() || static_cast<int64_t>(key_valid.size()) == batch * tk, fn, "key_valid has ",
          key_valid.size(), " elements, expected ", batch * tk);
  dropout.check(fn);
  batch_ = batch;
  tq_ = tq;
  tk_ = tk;
  dropout_ = dropout;
  const int64_t dh = d / H, tt = tq * tk;

  View2D<T> q = sized_view(q_, batch * tq, d), k = sized_view(k_, batch * tk, d), v = sized_view(v_, batch * tk, d);
  q_proj.forward(q, xq);
  k_proj.forward(k, xkv);
  v_proj.forward(v, xkv);
  T* p = sized(p_, batch * H * tt);
  T* pd = dropout.active() ? sized(pd_, batch * H * tt) : p;
  View2D<T> ctx = sized_view(ctx_, batch * tq, d);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
  const uint64_t threshold = dropout.threshold();
  const auto& ops = detail::row_ops<T>();
  const int nt = threads_for(batch * H * tt * dh, int64_t{1} << 16);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t bh = 0; bh < batch * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const T* qbh = q.data() + b * tq * d + h * dh;  // (Tq, dh), stride d
    const T* kbh = k.data() + b * tk * d + h * dh;  // (Tk, dh), stride d
    const T* vbh = v.data() + b * tk * d + h * dh;  // (Tk, dh), stride d
    T* pbh = p + bh * tt;                           // (Tq, Tk)
    // S = Q K^T / sqrt(dh)
    gemm<T>(false, true, tq, tk, dh, scale, qbh, d, kbh, d, T(0), pbh, tk);
    for (int64_t i = 0; i < tq; ++i) {
      T* row = pbh + i * tk;
      // Causal: key j is visible from query i when j <= i + tk - tq; the rest get probability 0.
      const int64_t visible = causal ? std::clamp<int64_t>(i + tk - tq + 1, 0, tk) : tk;
      if (!key_valid.empty()) {
        const uint8_t* kv = key_valid.data() + b * tk;
        for (int64_t j = 0; j < visible; ++j)
          if (kv[j] == 0) row[j] = -std::numeric_limits<T>::infinity();
      }
      softmax_row_inplace(row, visible);
      for (int64_t j = visible; j < tk; ++j) row[j] = T(0);
    }
    T* pdbh = pd + bh * tt;
    if (dropout.active())
      ops.dropout_row(pdbh, pbh, dropout.seed, dropout.offset + static_cast<uint64_t>(bh * tt), threshold,
                      dropout.scale(), tt);
    // O = Pd V
    gemm<T>(false, false, tq, dh, tk, T(1), pdbh, tk, vbh, d, T(0), ctx.data() + b * tq * d + h * dh, d);
  }
  out_proj.forward(y, View2D<const T>(ctx));
}

// dxq: (B*Tq, d) =    dxkv: (B*Tk, d) = or +=    parameter grads +=
//
// With dO the gradient of O (from dy through the output projection):
//   dPd = dO V^T          dV = Pd^T dO           dP = Dropout'(dPd) = dPd * keep / (1 - p)
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)       (softmax; 0 where masked since P = 0)
//   dQ = dS K / sqrt(dh)  dK = dS^T Q / sqrt(dh)
//   then back through the projections: dxq = dQ Wq, dxkv = dK Wk + dV Wv.
template <class T>
void MultiHeadAttention<T>::backward(View2D<T> dxq, View2D<T> dxkv, View2D<const T> dy, View2D<const T> xq,
                                    View2D<const T> xkv, bool accumulate_dxkv) {
  constexpr const char* fn = "MultiHeadAttention::backward";
  const int64_t d = config_.d_model, H = config_.heads, batch = batch_, tq = tq_, tk = tk_;
  require(batch > 0 && static_cast<int64_t>(p_.size()) == batch * H * tq * tk, fn, "no forward to differentiate");
  require(dy.rows() == batch * tq && dy.cols() == d, fn, "dy is ", dy.rows(), " x ", dy.cols(), ", expected ",
          batch * tq, " x ", d);
  require(xq.rows() == batch * tq && xq.cols() == d && xkv.rows() == batch * tk && xkv.cols() == d, fn,
          "xq or xkv differs in shape from the forward's");
  const int64_t dh = d / H, tt = tq * tk;
  const T* p = p_.data();
  const T* pd = dropout_.active() ? pd_.data() : p;
  View2D<T> dctx = sized_view(dctx_, batch * tq, d);
  View2D<T> dq = sized_view(dq_, batch * tq, d), dk = sized_view(dk_, batch * tk, d),
            dv = sized_view(dv_, batch * tk, d);
  T* dp = sized(dp_, batch * H * tt);
  out_proj.backward(dctx, dy, cview(ctx_, batch * tq, d));
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dh)));
  const uint64_t threshold = dropout_.threshold();
  const DropoutSpec drop = dropout_;
  const auto& ops = detail::row_ops<T>();
  const int nt = threads_for(batch * H * tt * dh, int64_t{1} << 16);

#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t bh = 0; bh < batch * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    const int64_t qoff = b * tq * d + h * dh, koff = b * tk * d + h * dh;
    const T* dobh = dctx.data() + qoff;  // (Tq, dh), stride d
    const T* pbh = p + bh * tt;          // (Tq, Tk)
    const T* pdbh = pd + bh * tt;        // (Tq, Tk)
    T* dpbh = dp + bh * tt;              // (Tq, Tk)
    // dPd = dO V^T;  dV = Pd^T dO
    gemm<T>(false, true, tq, tk, dh, T(1), dobh, d, v_.data() + koff, d, T(0), dpbh, tk);
    gemm<T>(true, false, tk, dh, tq, T(1), pdbh, tk, dobh, d, T(0), dv.data() + koff, d);
    if (drop.active())
      ops.dropout_row(dpbh, dpbh, drop.seed, drop.offset + static_cast<uint64_t>(bh * tt), threshold, drop.scale(),
                      tt);
    for (int64_t i = 0; i < tq; ++i) softmax_row_backward_inplace(dpbh + i * tk, pbh + i * tk, tk);
    // dQ = dS K / sqrt(dh);  dK = dS^T Q / sqrt(dh)
    gemm<T>(false, false, tq, dh, tk, scale, dpbh, tk, k_.data() + koff, d, T(0), dq.data() + qoff, d);
    gemm<T>(true, false, tk, dh, tq, scale, dpbh, tk, q_.data() + qoff, d, T(0), dk.data() + koff, d);
  }
  q_proj.backward(dxq, View2D<const T>(dq), xq);
  k_proj.backward(dxkv, View2D<const T>(dk), xkv, accumulate_dxkv);
  v_proj.backward(dxkv, View2D<const T>(dv), xkv, true);
}

template <class T>
void MultiHeadAttention<T>::parameters(ParameterList<T>& list, const std::string& prefix) {
  q_proj.parameters(list, prefix + "q_proj.");
  k_proj.parameters(list, prefix + "k_proj.");
  v_proj.parameters(list, prefix + "v_proj.");
  out_proj.parameters(list, prefix + "out_proj.");
}

template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;

}  // namespace addnorm::nn
