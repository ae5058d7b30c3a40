// Counter-based dropout. See include/addnorm/nn/dropout.hpp.
#include "addnorm/nn/dropout.hpp"

#include "simd/row_ops.hpp"
#include "addnorm/core/error.hpp"
#include "addnorm/core/parallel.hpp"

namespace addnorm::nn {
namespace {
template <class T, class U>
void check(View2D<T> out, View2D<U> in, const DropoutSpec& spec, const char* fn) {
  spec.check(fn);
  require(out.rows() == in.rows() && out.cols() == in.cols(), fn, "output is ", out.rows(), " x ", out.cols(),
          " but input is ", in.rows(), " x ", in.cols());
}

// out = in * keep * scale over the call (also the backward: the same mask, the same scale), row by
// row in the SIMD kernels (Philox in vector lanes), rows spread over threads.
template <class T>
void apply(View2D<T> out, View2D<const T> in, const DropoutSpec& spec) {
  const int64_t rows = in.rows(), cols = in.cols();
  if (!spec.active()) {
    for (int64_t r = 0; r < rows; ++r)
      if (out.row(r) != in.row(r))
        for (int64_t c = 0; c < cols; ++c) out(r, c) = in(r, c);
    return;
  }
  const auto& ops = detail::row_ops<T>();
  const uint64_t threshold = spec.threshold();
  const double scale = spec.scale();
  parallel_for(rows, threads_for(rows * cols, int64_t{1} << 15), [&](int64_t r) {
    ops.dropout_row(out.row(r), in.row(r), spec.seed, spec.offset + static_cast<uint64_t>(r * cols), threshold, scale,
                    cols);
  });
}
}  // namespace

// y: (rows, cols) =    x: (rows, cols)
template <class T>
void dropout_forward(View2D<T> y, View2D<const T> x, const DropoutSpec& spec) {
  check(y, x, spec, "dropout_forward");
  apply<T>(y, x, spec);
}

// dx: (rows, cols) =    dy: (rows, cols)
// y = x * keep / (1 - p)  =>  dx = dy * keep / (1 - p)
template <class T>
void dropout_backward(View2D<T> dx, View2D<const T> dy, const DropoutSpec& spec) {
  check(dx, dy, spec, "dropout_backward");
  apply<T>(dx, dy, spec);
}

template void dropout_forward<float>(View2D<float>, View2D<const float>, const DropoutSpec&);
template void dropout_forward<double>(View2D<double>, View2D<const double>, const DropoutSpec&);
template void dropout_backward<float>(View2D<float>, View2D<const float>, const DropoutSpec&);
template void dropout_backward<double>(View2D<double>, View2D<const double>, const DropoutSpec&);

}  // namespace addnorm::nn
