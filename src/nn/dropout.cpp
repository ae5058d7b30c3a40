// Counter-based dropout. See include/addnorm/nn/dropout.hpp.
#include "addnorm/nn/dropout.hpp"

#include "addnorm/core/error.hpp"

namespace addnorm::nn {
namespace {
template <class T, class U>
void check(View2D<T> out, View2D<U> in, const DropoutSpec& spec, const char* fn) {
  spec.check(fn);
  require(out.rows() == in.rows() && out.cols() == in.cols(), fn, "output is ", out.rows(), " x ", out.cols(),
          " but input is ", in.rows(), " x ", in.cols());
}

// out = in * keep * scale over the call (also the backward: the same mask, the same scale).
template <class T>
void apply(View2D<T> out, View2D<const T> in, const DropoutSpec& spec) {
  const int64_t rows = in.rows(), cols = in.cols();
  if (!spec.active()) {
    for (int64_t r = 0; r < rows; ++r)
      if (out.row(r) != in.row(r))
        for (int64_t c = 0; c < cols; ++c) out(r, c) = in(r, c);
    return;
  }
  const T scale = static_cast<T>(spec.scale());
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = in.row(r);
    T* yr = out.row(r);
    const auto base = static_cast<uint64_t>(r * cols);
    for (int64_t c = 0; c < cols; ++c) yr[c] = spec.keep(base + static_cast<uint64_t>(c)) ? xr[c] * scale : T(0);
  }
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
