// A row's last pass walked backward gives the same bits as walked forward. Rows of 4096 or more
// elements that prefetch their next row walk it backward on every other row, and LayerNorm's dx
// passes on every row (NextRows::backward, kBackwardWalkCols in src/simd/row_ops.hpp, after_sums
// in src/simd/norm_backward.inc). On every SIMD target, every row kernel that takes
// a NextRows is run with nothing to prefetch, with a next row walked forward and walked backward,
// streamed and not, on rows on a cache line and 3 elements past one (a scalar head), of lengths
// with and without a tail, and the fused backward's two outputs each streamed or not: every output,
// partial sum and statistic must be the same bits. This fails when the backward walk skips, repeats
// or splits elements differently (checked by making it skip its first pair).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::bf16;
using addnorm::detail::NextRows;
using addnorm::testing::Placed;

// The bytes of every output of one run, in a fixed order.
using Bytes = std::vector<unsigned char>;

// The bytes of a Placed array or a vector.
template <class V>
void append(Bytes& out, const V& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(*v.data()));
}

template <class T>
void append_value(Bytes& out, const T& v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// The outputs of every row kernel that takes a NextRows, for one row of d elements `shift` past a
// line, with `next` (or null) and `stream` (the fused backward's df with `stream_df`).
template <class T>
Bytes run_kernels(int64_t d, int64_t shift, const NextRows* next, bool stream, bool stream_df) {
  using C = addnorm::compute_t<T>;
  using S = addnorm::stat_t<T>;
  const auto& ops = addnorm::detail::row_ops<T>();
  addnorm::testing::Rng rng(static_cast<uint64_t>(d * 10 + shift));
  using addnorm::testing::random_vector;
  Placed<T> x(random_vector<T>(d, rng, 0.5, 2), shift), dy(random_vector<T>(d, rng), shift);
  Placed<T> h(random_vector<T>(d, rng), shift), f(random_vector<T>(d, rng), shift);
  Placed<T> g(random_vector<T>(d, rng, 1, 0.3), shift);
  Placed<C> gc(random_vector<C>(d, rng, 1, 0.3), shift), bc(random_vector<C>(d, rng), shift);
  Placed<C> keep(random_vector<C>(d, rng, 1, 0.2), shift), a(random_vector<C>(d, rng, 1, 0.3), shift);
  Placed<T> out(d, shift), out2(d, shift);
  std::vector<S> pdg(static_cast<size_t>(d), S{0.25}), pdb(static_cast<size_t>(d), S{-0.5});
  const double eps = 1e-5;
  Bytes bytes;

  const auto st = ops.ln_forward(out.data(), x.data(), gc.data(), bc.data(), d, eps, stream, next);
  append(bytes, out);
  append_value(bytes, st.mean);
  append_value(bytes, st.rstd);
  append_value(bytes, ops.rms_forward(out.data(), x.data(), gc.data(), d, eps, stream, next));
  append(bytes, out);
  ops.ln_backward(out.data(), pdg.data(), pdb.data(), dy.data(), x.data(), S{0.375}, S{0.875}, g.data(), d, stream,
                  next);
  append(bytes, out);
  ops.rms_backward(out.data(), pdg.data(), dy.data(), x.data(), S{0.875}, g.data(), d, stream, next);
  append(bytes, out);
  ops.ln_backward_pair(out.data(), out2.data(), pdg.data(), pdb.data(), dy.data(), h.data(), x.data(), f.data(),
                       S{0.375}, S{-0.125}, S{0.875}, S{1.25}, g.data(), d, stream, next, next);
  append(bytes, out);
  append(bytes, out2);
  append(bytes, pdg);
  append(bytes, pdb);
  ops.rms_backward_pair(out.data(), out2.data(), pdg.data(), dy.data(), h.data(), x.data(), f.data(), S{0.875}, S{1.25},
                        g.data(), d, stream, next, next);
  append(bytes, out);
  append(bytes, out2);
  append(bytes, pdg);
  for (bool layer : {true, false}) {
    const auto fst = ops.add_norm_forward_row(out.data(), out2.data(), h.data(), f.data(), keep.data(), C{0.75},
                                              gc.data(), bc.data(), d, eps, layer, stream, x.data(), next);
    append(bytes, out);
    append(bytes, out2);
    append_value(bytes, fst.mean);
    append_value(bytes, fst.rstd);
  }
  for (bool layer : {true, false}) {  // ds = h
    ops.add_norm_backward_row(out.data(), out2.data(), pdg.data(), layer ? pdb.data() : nullptr, dy.data(), x.data(),
                              h.data(), keep.data(), S{0.375}, S{0.875}, g.data(), g.data(), C{0.75}, d, layer, stream,
                              stream_df, next);
    append(bytes, out);
    append(bytes, out2);
    append(bytes, pdg);
    append(bytes, pdb);
  }
  ops.bn_forward_row(out.data(), x.data(), gc.data(), a.data(), bc.data(), d, stream, next);
  append(bytes, out);
  // The double backward's rows, with both outputs (the next row fetched during gx's pass) and with
  // gdy alone (during gdy's).
  for (const auto row : {ops.ln_double_backward_row, ops.rms_double_backward_row}) {
    std::vector<S> pg(static_cast<size_t>(d), S{0.5});
    row(out.data(), out2.data(), pg.data(), h.data(), dy.data(), x.data(), S{0.375}, S{0.875}, gc.data(), keep.data(),
        bc.data(), d, stream, next);
    append(bytes, out);
    append(bytes, out2);
    append(bytes, pg);
    row(nullptr, out2.data(), pg.data(), h.data(), dy.data(), x.data(), S{0.375}, S{0.875}, gc.data(), keep.data(),
        bc.data(), d, stream, next);
    append(bytes, out2);
    append(bytes, pg);
  }
  return bytes;
}

template <class T>
void check_walks(int64_t d, int64_t shift) {
  SCOPED_TRACE(std::string(sizeof(T) == 2   ? "bf16"
                           : sizeof(T) == 4 ? "f32"
                                            : "f64") +
               " d " + std::to_string(d) + " shift " + std::to_string(shift));
  // The rows a kernel prefetches: any readable memory of the right length.
  const std::vector<T> n0(static_cast<size_t>(d)), n1(static_cast<size_t>(d)), n2(static_cast<size_t>(d));
  const NextRows forward = NextRows::of(n0.data(), n1.data(), n2.data()).then(true, 0, 0, 0);
  NextRows backward = forward;
  backward.backward = true;
  const Bytes alone = run_kernels<T>(d, shift, nullptr, false, false);
  for (bool stream : {false, true})
    for (bool stream_df : {false, true}) {
      SCOPED_TRACE(std::string(stream ? "streamed" : "not streamed") + (stream_df ? ", df streamed" : ""));
      const Bytes fwd = run_kernels<T>(d, shift, &forward, stream, stream_df);
      const Bytes bwd = run_kernels<T>(d, shift, &backward, stream, stream_df);
      ASSERT_EQ(fwd, alone) << "walked forward with a next row";
      ASSERT_EQ(bwd, alone) << "walked backward";
    }
}

TEST(BackwardWalk, GivesTheSameBitsAsTheForwardWalk) {
  addnorm::testing::for_each_simd_target([] {
    for (int64_t d : {16, 100, 4096, 4100})
      for (int64_t shift : {0, 3}) {
        check_walks<float>(d, shift);
        check_walks<bf16>(d, shift);
        check_walks<double>(d, shift);
      }
  });
}

}  // namespace
