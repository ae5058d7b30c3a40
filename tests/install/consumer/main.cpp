// A program outside the addnorm tree: layer-normalizes the seeds' token "cat".
#include <addnorm/norm/layer_norm.hpp>
#include <cstdio>
#include <vector>

int main() {
  std::vector<float> cat{2.0f, 4.0f, 6.0f, 8.0f}, y(4);
  std::vector<float> mean(1), rstd(1);
  addnorm::layer_norm_forward<float>(addnorm::View2D<float>(y.data(), 1, 4), mean, rstd,
                                     addnorm::View2D<const float>(cat.data(), 1, 4), {}, {}, 1e-5);
  std::printf("mean: %g\nx_hat: %.4f %.4f %.4f %.4f\n", mean[0], y[0], y[1], y[2], y[3]);
  return 0;
}
