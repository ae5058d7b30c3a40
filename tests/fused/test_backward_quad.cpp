// Streamed wide f32 LayerNorm and RMSNorm backward rows go four at a time (RowOps::ln_backward_quad,
// rms_backward_quad: two pairs' sums passes, then one joint dx pass over the four rows that adds
// their parameter gradients into the partials). They must give the results of ln_backward_pair /
// rms_backward_pair on rows 0-1 and then 2-3 to a rounding, both with nothing to prefetch
// (LayerNorm's pairs then take their joint dx pass) and with next rows (their sums pass adds the
// partials): every row's dx and the partials, on every SIMD target, for rows of 4096 (whole
// vectors) and 4100 (a scalar tail) on cache lines, streamed and not; LayerNorm with gamma and both
// partials, gamma with dgamma alone, and neither gamma nor dgamma (dbeta alone); RMSNorm with gamma
// and dgamma, gamma alone, neither. Not to the bit: the compiler may contract the two code forms'
// multiply-adds differently (GCC did at -O2 with the sanitizers), and the bits that must not change
// with the threads do not depend on it (rows are grouped in fours by chunk, never by thread).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../../src/simd/row_ops.hpp"
#include "addnorm/norm/simd.hpp"
#include "norm_testing.hpp"

namespace {

using addnorm::detail::NextRows;
using addnorm::testing::Placed;

struct Outputs {
  std::vector<float> dx, pdg, pdb;
};

// Every element of got within a few roundings of want: |got - want| <= 2^-20 * max |want| over the
// array (16 units of the last place at its largest element). A row's missing or doubled term, or a
// dx off by a term, is of the order of the values themselves.
void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  const float tol = std::ldexp(scale, -20);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  EXPECT_EQ(bad, 0) << what << ": first at " << first << " got " << (first >= 0 ? got[first] : 0.0f) << " want "
                    << (first >= 0 ? want[first] : 0.0f) << " (tolerance " << tol << ")";
}

void expect_near(const Outputs& got, const Outputs& want, const char* against) {
  SCOPED_TRACE(against);
  expect_near_all(got.dx, want.dx, "dx");
  expect_near_all(got.pdg, want.pdg, "dgamma partials");
  expect_near_all(got.pdb, want.pdb, "dbeta partials");
}

struct Rows {
  int64_t d, stride;
  Placed<float> x, dy, g;
  std::vector<float> mean, rstd, pdg0, pdb0;
};

Rows make_rows(int64_t d) {
  const int64_t stride = (d + 15) / 16 * 16;  // every row on a cache line
  addnorm::testing::Rng rng(static_cast<uint64_t>(d));
  using addnorm::testing::random_vector;
  return {d,
          stride,
          Placed<float>(random_vector<float>(4 * stride, rng, 0.5, 2), 0),
          Placed<float>(random_vector<float>(4 * stride, rng), 0),
          Placed<float>(random_vector<float>(d, rng, 1, 0.3), 0),
          random_vector<float>(4, rng, 0.5, 0.1),
          random_vector<float>(4, rng, 1, 0.2),
          random_vector<float>(d, rng),
          random_vector<float>(d, rng)};
}

// quad: ln_backward_quad; else ln_backward_pair on rows 0-1 then 2-3 with `next` (or null) for both
// of its next rows. layer false: RMSNorm's (rms_backward_quad, rms_backward_pair; no dbeta).
Outputs run(const Rows& k, bool layer, bool quad, const NextRows* next, bool gamma, bool dg, bool db, bool stream) {
  const auto& ops = addnorm::detail::row_ops<float>();
  Placed<float> dx(4 * k.stride, 0);
  Outputs o{{}, k.pdg0, k.pdb0};
  float* pdg = dg ? o.pdg.data() : nullptr;
  float* pdb = db ? o.pdb.data() : nullptr;
  const float* g = gamma ? k.g.data() : nullptr;
  if (!layer) {
    if (quad)
      ops.rms_backward_quad(dx.data(), k.stride, pdg, k.dy.data(), k.stride, k.x.data(), k.stride, k.rstd.data(), g,
                            k.d, stream);
    else
      for (int64_t r = 0; r < 4; r += 2) {
        const int64_t o0 = r * k.stride, o1 = o0 + k.stride;
        ops.rms_backward_pair(dx.data() + o0, dx.data() + o1, pdg, k.dy.data() + o0, k.dy.data() + o1, k.x.data() + o0,
                              k.x.data() + o1, k.rstd[r], k.rstd[r + 1], g, k.d, stream, next, next);
      }
  } else if (quad) {
    ops.ln_backward_quad(dx.data(), k.stride, pdg, pdb, k.dy.data(), k.stride, k.x.data(), k.stride, k.mean.data(),
                         k.rstd.data(), g, k.d, stream);
  } else {
    for (int64_t r = 0; r < 4; r += 2) {
      const int64_t o0 = r * k.stride, o1 = o0 + k.stride;
      ops.ln_backward_pair(dx.data() + o0, dx.data() + o1, pdg, pdb, k.dy.data() + o0, k.dy.data() + o1,
                           k.x.data() + o0, k.x.data() + o1, k.mean[r], k.mean[r + 1], k.rstd[r], k.rstd[r + 1], g, k.d,
                           stream, next, next);
    }
  }
  addnorm::detail::store_fence();
  for (int64_t r = 0; r < 4; ++r) o.dx.insert(o.dx.end(), dx.data() + r * k.stride, dx.data() + r * k.stride + k.d);
  return o;
}

TEST(BackwardQuad, GivesTwoPairsResultsToARounding) {
  addnorm::testing::for_each_simd_target([] {
    ASSERT_NE(addnorm::detail::row_ops<float>().ln_backward_quad, nullptr);
    ASSERT_NE(addnorm::detail::row_ops<float>().rms_backward_quad, nullptr);
    for (int64_t d : {4096, 4100}) {
      const Rows k = make_rows(d);
      // Rows a pair's sums pass prefetches: any readable memory of the row's length.
      const std::vector<float> n0(static_cast<size_t>(d)), n1(static_cast<size_t>(d));
      const NextRows next = NextRows::of(n0.data(), n1.data());
      struct Flags {
        bool gamma, dg, db;
      };
      // LayerNorm: gamma with both partials, gamma with dgamma alone, dbeta alone; RMSNorm (no dbeta):
      // gamma with dgamma, gamma alone, neither (dx alone).
      for (const bool layer : {true, false})
        for (const Flags f : layer
                                 ? std::vector<Flags>{{true, true, true}, {true, true, false}, {false, false, true}}
                                 : std::vector<Flags>{{true, true, false}, {true, false, false}, {false, false, false}})
          for (bool stream : {false, true}) {
            SCOPED_TRACE(std::string("target ") + addnorm::simd_target() + (layer ? " LayerNorm" : " RMSNorm") + " d " +
                         std::to_string(d) + (f.gamma ? " gamma" : "") + (f.dg ? " dgamma" : "") +
                         (f.db ? " dbeta" : "") + (stream ? " streamed" : ""));
            const Outputs quad = run(k, layer, true, nullptr, f.gamma, f.dg, f.db, stream);
            const Outputs joint = run(k, layer, false, nullptr, f.gamma, f.dg, f.db, stream);
            const Outputs summed = run(k, layer, false, &next, f.gamma, f.dg, f.db, stream);
            expect_near(quad, joint, "against pairs with nothing to prefetch (LayerNorm's: their joint dx pass)");
            expect_near(quad, summed, "against pairs with next rows (their sums pass adds the partials)");
            // The partials moved: the check would see a missing row's terms.
            EXPECT_NE(quad.pdg == k.pdg0, f.dg);
            EXPECT_NE(quad.pdb == k.pdb0, f.db);
          }
    }
  });
}

}  // namespace

// The fused Add & Norm backward's fours (RowOps::add_norm_backward_quad: two pairs' sums passes,
// which fetch ds along the way, then one joint pass giving the four rows' dh and df and adding
// their parameter gradients into the partials) must give add_norm_backward_row's results on each
// row to a rounding: dh, df and the partials, on every SIMD target, for rows of 4096 and 4100 on
// cache lines, streamed and not; LayerNorm (dgamma and dbeta partials) and RMSNorm (dgamma), with
// ds (pre-norm) or without (post-norm), a keep row per row (dropout), one keep row for all four (a
// layer scale alone, stride 0) or none, alpha 1 and 0.7 (DeepNorm's scale on dh).
namespace {

struct FusedOutputs {
  std::vector<float> dh, df, pdg, pdb;
};

enum class Keep { none, per_row, shared };

struct FusedCase {
  bool layer, has_ds;
  Keep keep;
  float alpha;
  bool stream;
};

FusedOutputs run_fused(const Rows& k, const Placed<float>& ds, const Placed<float>& keep, const FusedCase& c,
                       bool quad) {
  const auto& ops = addnorm::detail::row_ops<float>();
  Placed<float> dh(4 * k.stride, 0), df(4 * k.stride, 0);
  FusedOutputs o{{}, {}, k.pdg0, c.layer ? k.pdb0 : std::vector<float>{}};
  float* pdb = c.layer ? o.pdb.data() : nullptr;
  const float* dsp = c.has_ds ? ds.data() : nullptr;
  const float* kp = c.keep == Keep::none ? nullptr : keep.data();
  const int64_t ks = c.keep == Keep::per_row ? k.stride : 0;
  if (quad) {
    ops.add_norm_backward_quad(dh.data(), k.stride, df.data(), k.stride, o.pdg.data(), pdb, k.dy.data(), k.stride,
                               k.x.data(), k.stride, dsp, k.stride, kp, ks, c.layer ? k.mean.data() : nullptr,
                               k.rstd.data(), k.g.data(), c.alpha, k.d, c.stream, c.stream);
  } else {
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t off = r * k.stride;
      ops.add_norm_backward_row(dh.data() + off, df.data() + off, o.pdg.data(), pdb, k.dy.data() + off,
                                k.x.data() + off, dsp != nullptr ? dsp + off : nullptr,
                                kp != nullptr ? kp + r * ks : nullptr, c.layer ? k.mean[r] : 0.0f, k.rstd[r],
                                k.g.data(), k.g.data(), c.alpha, k.d, c.layer, c.stream, c.stream, nullptr);
    }
  }
  addnorm::detail::store_fence();
  for (int64_t r = 0; r < 4; ++r) {
    o.dh.insert(o.dh.end(), dh.data() + r * k.stride, dh.data() + r * k.stride + k.d);
    o.df.insert(o.df.end(), df.data() + r * k.stride, df.data() + r * k.stride + k.d);
  }
  return o;
}

TEST(BackwardQuad, FusedGivesRowByRowResultsToARounding) {
  addnorm::testing::for_each_simd_target([] {
    ASSERT_NE(addnorm::detail::row_ops<float>().add_norm_backward_quad, nullptr);
    for (int64_t d : {4096, 4100}) {
      const Rows k = make_rows(d);
      addnorm::testing::Rng rng(static_cast<uint64_t>(d) + 7);
      const Placed<float> ds(addnorm::testing::random_vector<float>(4 * k.stride, rng), 0);
      std::vector<float> kv = addnorm::testing::random_vector<float>(4 * k.stride, rng);
      for (float& v : kv) v = v > -1.0f ? 1.25f : 0.0f;  // dropout's factors, p about 0.16
      const Placed<float> keep(kv, 0);
      for (const bool layer : {true, false})
        for (const bool has_ds : {true, false})
          for (const Keep kp : {Keep::none, Keep::per_row, Keep::shared})
            for (const float alpha : {1.0f, 0.7f})
              for (const bool stream : {false, true}) {
                const FusedCase c{layer, has_ds, kp, alpha, stream};
                SCOPED_TRACE(std::string("target ") + addnorm::simd_target() + (layer ? " LayerNorm" : " RMSNorm") +
                             " d " + std::to_string(d) + (has_ds ? " ds" : "") +
                             (kp == Keep::per_row  ? " keep per row"
                              : kp == Keep::shared ? " keep shared"
                                                   : "") +
                             " alpha " + std::to_string(alpha) + (stream ? " streamed" : ""));
                const FusedOutputs quad = run_fused(k, ds, keep, c, true);
                const FusedOutputs rows = run_fused(k, ds, keep, c, false);
                expect_near_all(quad.dh, rows.dh, "dh");
                expect_near_all(quad.df, rows.df, "df");
                expect_near_all(quad.pdg, rows.pdg, "dgamma partials");
                expect_near_all(quad.pdb, rows.pdb, "dbeta partials");
                // The partials moved: the check would see a missing row's terms.
                EXPECT_NE(quad.pdg, k.pdg0);
                if (layer) {
                  EXPECT_NE(quad.pdb, k.pdb0);
                }
              }
    }
  });
}

}  // namespace
