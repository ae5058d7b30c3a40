// The exact Jacobian of layer norm at a point, its spectrum, and Xiong et al. 2020's Lemma 3.
//
// y = (x - mu) / s, s = sqrt(var + eps), var = mean((x - mu)^2) (gamma = 1, beta = 0). With
// x_hat = (x - mu) / s:
//
//   J_ij = dy_i / dx_j = (delta_ij - 1/d - x_hat_i x_hat_j / d) / s
//
// J is symmetric. Its eigenvalues in closed form: 0 along the ones vector; eps / s^3 along x_hat
// (x_hat is orthogonal to the ones vector, ||x_hat||^2 = d var / s^2); 1 / s on the d - 2 other
// directions. So ||J||_2 = 1 / s for d >= 3 (Xiong's sqrt(d) / ||x - mu|| = 1 / sqrt(var) when
// eps = 0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace addnorm::lab {

struct NormJacobian {
  int64_t d = 0;
  double eps = 0, mean = 0, var = 0, rstd = 0;  // rstd = 1 / s
  std::vector<double> jacobian;                 // (d, d) row-major, J_ij = dy_i / dx_j
  std::vector<double> eigenvalues;              // (d) ascending, from the Jacobi eigenvalue method
  double spectral_norm = 0;                     // max |eigenvalue|
  double spectral_norm_closed_form = 0;         // from the closed form above
  double xiong_lemma3 = 0;                      // sqrt(d) / ||x - mu|| (inf when x is constant)
};

// x: d >= 1 finite values (d <= 4096); eps >= 0 finite, with var + eps > 0.
// Throws Error("[layer_norm_jacobian] ...") otherwise.
NormJacobian layer_norm_jacobian(std::span<const double> x, double eps);

// The eigenvalues of a symmetric (n, n) row-major matrix, ascending (cyclic Jacobi rotations
// until the off-diagonal part is below 1e-15 of the matrix's norm).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, int64_t n);

}  // namespace addnorm::lab
