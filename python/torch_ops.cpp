// addnorm._torch_ops: addnorm.torch's autograd functions written against libtorch (python/README.md,
// "PyTorch"). The same kernels, checks and results as the Python autograd Functions of
// python/addnorm/torch.py, which addnorm.torch falls back to when this module was not built (no
// libtorch-dev): what this saves is the Python Function's cost, about 25 us a step of forward and
// backward, which made a 1 x 512 LayerNorm step 2.2x slower than torch.nn.LayerNorm's.
//
// Each function is an operator of PyTorch's dispatcher (addnorm::layer_norm, ..., registered at the
// end: torch.ops.addnorm.*, which TorchScript calls and torch.jit.trace records) whose kernel checks
// its tensors (errors name addnorm.torch.<function>) and applies the autograd Function. The Python
// entry points take the tensors out of their arguments with the GIL held and call the operator
// without it. Backward runs on autograd's threads and calls no Python.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "addnorm/core/dtype.hpp"
#include "addnorm/core/view.hpp"
#include "addnorm/norm/add_norm.hpp"
#include "addnorm/norm/batch_norm.hpp"
#include "addnorm/norm/double_backward.hpp"
#include "addnorm/norm/layer_norm.hpp"
#include "addnorm/norm/rms_norm.hpp"
#include "dispatch.hpp"
#include "torch_grad.hpp"

namespace addnorm::torch_ops {

namespace {

namespace py = pybind11;
using at::ScalarType;
using at::Tensor;
using py_bind::Dt;
using py_bind::fail;
using py_bind::visit;
using py_bind::visit_stream;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// "(4, 3)", as Python prints a shape tuple.
std::string shape_str(c10::IntArrayRef sizes) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << (sizes.size() == 1 ? ",)" : ")");
  return os.str();
}

std::string shape_str(const Tensor& t) { return shape_str(t.sizes()); }

// "torch.float32", as Python prints a dtype; without Python, as the ops' checks run without the GIL
// (and in TorchScript, without an interpreter).
std::string dtype_str(ScalarType st) {
  switch (st) {
    case ScalarType::Float:
      return "torch.float32";
    case ScalarType::Double:
      return "torch.float64";
    case ScalarType::Half:
      return "torch.float16";
    case ScalarType::BFloat16:
      return "torch.bfloat16";
    case ScalarType::Byte:
      return "torch.uint8";
    case ScalarType::Char:
      return "torch.int8";
    case ScalarType::Short:
      return "torch.int16";
    case ScalarType::Int:
      return "torch.int32";
    case ScalarType::Long:
      return "torch.int64";
    case ScalarType::Bool:
      return "torch.bool";
    case ScalarType::ComplexFloat:
      return "torch.complex64";
    case ScalarType::ComplexDouble:
      return "torch.complex128";
    default:
      return std::string("torch.") + c10::toString(st);
  }
}

bool supported(ScalarType st) {
  return st == ScalarType::Float || st == ScalarType::Double || st == ScalarType::Half || st == ScalarType::BFloat16;
}

bool narrow(ScalarType st) { return st == ScalarType::Half || st == ScalarType::BFloat16; }

// The ops' errors: c10::TypeError and c10::ValueError, which torch.ops raises in Python as TypeError
// and ValueError, and this module's functions too (python_errors).
struct ArgTypeError : c10::TypeError {
  explicit ArgTypeError(const std::string& msg) : c10::TypeError(msg, "") {}
};
struct ArgValueError : c10::ValueError {
  explicit ArgValueError(const std::string& msg) : c10::ValueError(msg, "") {}
};

// Calls f(), raising the ops' errors as Python's TypeError and ValueError.
template <class F>
decltype(auto) python_errors(F&& f) {
  try {
    return f();
  } catch (const c10::TypeError& e) {
    throw py::type_error(e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    throw py::value_error(e.what_without_backtrace());
  }
}

// obj as a tensor (not checked further: the op does that).
Tensor tensor_of(py::handle obj, const char* fn, const char* name) {
  if (!THPVariable_Check(obj.ptr())) {
    fail<py::type_error>(fn, name, " must be a torch.Tensor, got ",
                         py::type::of(obj).attr("__name__").cast<std::string>());
  }
  return THPVariable_Unpack(obj.ptr());
}

// An optional tensor argument: None, or a tensor.
c10::optional<Tensor> optional_of(py::handle obj, const char* fn, const char* name) {
  if (obj.is_none()) return c10::nullopt;
  return tensor_of(obj, fn, name);
}

// A CPU tensor of one of the four dtypes.
void check_tensor(const Tensor& t, const char* fn, const char* name) {
  if (!t.device().is_cpu()) {
    fail<ArgTypeError>(fn, name, " is on device ", t.device().str(), "; only CPU tensors are supported");
  }
  if (!supported(t.scalar_type())) {
    fail<ArgTypeError>(fn, name, " has dtype ", dtype_str(t.scalar_type()),
                       "; expected float32, float64, float16 or bfloat16");
  }
}

// Data: shape (..., d) with d > 0.
void check_data(const Tensor& t, const char* fn, const char* name) {
  check_tensor(t, fn, name);
  if (t.dim() < 1 || t.size(-1) < 1) {
    fail<ArgValueError>(fn, name, " has shape ", shape_str(t), "; expected (..., d) with d > 0");
  }
}

// An optional parameter (weight, bias): absent, or shape (d,) and the data's dtype.
void check_param(const c10::optional<Tensor>& t, const char* fn, const char* name, const Tensor& data) {
  if (!t || !t->defined()) return;
  check_tensor(*t, fn, name);
  if (t->scalar_type() != data.scalar_type()) {
    fail<ArgTypeError>(fn, name, " has dtype ", dtype_str(t->scalar_type()), "; expected ",
                       dtype_str(data.scalar_type()));
  }
  if (t->dim() != 1 || t->size(0) != data.size(-1)) {
    fail<ArgValueError>(fn, name, " has shape ", shape_str(*t), "; expected (", data.size(-1), ",)");
  }
}

// The op addnorm::<name> (registered below), called through the dispatcher, so that the tracer
// records it (torch.jit.trace).
template <class Sig>
c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// The element type of a (supported) dtype.
Dt dt_of(ScalarType st) {
  switch (st) {
    case ScalarType::Double:
      return Dt::f64;
    case ScalarType::Half:
      return Dt::f16;
    case ScalarType::BFloat16:
      return Dt::bf16;
    default:
      break;
  }
  return Dt::f32;
}

// Views of contiguous tensors of shape (..., d) as rows x d; spans of vectors (undefined: empty).
int64_t rows_of(const Tensor& t) { return t.size(-1) > 0 ? t.numel() / t.size(-1) : 0; }

template <class T>
View2D<const T> in_view(const Tensor& t) {
  return View2D<const T>(static_cast<const T*>(t.data_ptr()), rows_of(t), t.size(-1));
}

template <class T>
View2D<T> out_view(const Tensor& t) {
  return View2D<T>(static_cast<T*>(t.data_ptr()), rows_of(t), t.size(-1));
}

template <class T>
std::span<const T> in_span(const Tensor& t) {
  if (!t.defined()) return {};
  return {static_cast<const T*>(t.data_ptr()), static_cast<size_t>(t.numel())};
}

template <class T>
std::span<T> out_span(const Tensor& t) {
  if (!t.defined()) return {};
  return {static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel())};
}

// An optional tensor argument of a Function: absent (nullopt) is not an autograd input.
using OptTensor = c10::optional<Tensor>;

// The tensor an optional argument holds, as given (undefined when absent). Backward must be given
// the inputs themselves, not contiguous copies made in forward (made without autograd, they would
// cut a double backward's path to the input), and makes its own contiguous copies for the kernels.
Tensor given(const OptTensor& t) { return t ? *t : Tensor(); }

// A contiguous tensor of t's values (undefined stays undefined).
Tensor dense(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

Tensor contiguous(const OptTensor& t) { return dense(given(t)); }

// An optional argument from a tensor that may be undefined (a Function's inputs must be defined).
OptTensor optional(const Tensor& t) { return t.defined() ? OptTensor(t) : OptTensor(); }

// Large outputs are allocated as NumPy allocates its arrays: aligned as torch's own allocator
// aligns (64 bytes), and from 4 MiB on advised onto transparent huge pages. torch's CPU allocator
// (1.13) gives no such advice, and where the kernel's setting is "madvise" (Debian's default) a new
// output that glibc maps afresh (over its mmap threshold, which reaches 32 MiB) faults on every
// 4 KiB page at its first write: a 64 MiB torch.empty filled took 25.8 ms against 6.3 for np.empty
// (2 threads, 2026-12-05), and a 4096 x 4096 LayerNorm step through this module 47 ms against 16
// through NumPy's arrays. Smaller blocks come back from glibc's heap, where the advice costs nothing.
class HugePageAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    void* p = nullptr;
    if (n > 0 && posix_memalign(&p, 64, n) != 0) throw std::bad_alloc();
    if (n >= kAdviseBytes) {
      const auto begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) / kPage * kPage;
      const auto end = (reinterpret_cast<uintptr_t>(p) + n) / kPage * kPage;
      madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // advice: without THP, ignored
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  static constexpr size_t kAdviseBytes = size_t{4} << 20;

 private:
  static constexpr uintptr_t kPage = 4096;
  static void release(void* p) { std::free(p); }
};

// A new (uninitialized) output of like's dtype (or dtype) and shape; on huge pages from 4 MiB.
Tensor new_output(const Tensor& like, c10::optional<ScalarType> dtype = c10::nullopt) {
  const ScalarType st = dtype.value_or(like.scalar_type());
  if (static_cast<size_t>(like.numel()) * c10::elementSize(st) < HugePageAllocator::kAdviseBytes) {
    return at::empty(like.sizes(), like.options().dtype(st));
  }
  static HugePageAllocator allocator;
  return at::detail::empty_generic(like.sizes(), &allocator, c10::DispatchKeySet(c10::DispatchKey::CPU), st,
                                   c10::nullopt);
}

// Statistics for data x: one per row, shape x.shape[:-1].
Tensor new_stats(const Tensor& x) {
  return at::empty(x.sizes().slice(0, static_cast<size_t>(x.dim() - 1)), x.options().dtype(stat_type(x.scalar_type())));
}

// A parameter gradient for the kernels to accumulate into, or undefined when not wanted.
Tensor new_param_grad(bool wanted, const Tensor& like_data) {
  return wanted ? at::zeros({like_data.size(-1)}, like_data.options()) : Tensor();
}

// Whether backward must compute the gradient of a forward argument. Absent optional tensors are
// not autograd inputs, so an argument's input index counts only the tensors given before it:
// `before` of them, and the argument itself if `given`.
bool needs_grad(AutogradContext* ctx, int64_t before, bool given) {
  return given && ctx->needs_input_grad(static_cast<size_t>(before));
}

// Whether autograd records this backward (create_graph=True): it then runs as differentiable torch
// ops (torch_grad.hpp), as autograd cannot differentiate a kernel.
bool recorded() { return at::GradMode::is_enabled(); }

// The dropout of a forward, kept for its backward, which regenerates the mask from it (the seed
// and offset as int64 bit patterns: an IValue holds no uint64).
void save_dropout(AutogradContext* ctx, const DropoutSpec& dropout) {
  ctx->saved_data["p"] = dropout.p;
  ctx->saved_data["seed"] = std::bit_cast<int64_t>(dropout.seed);
  ctx->saved_data["offset"] = std::bit_cast<int64_t>(dropout.offset);
}

DropoutSpec saved_dropout(AutogradContext* ctx) {
  return {ctx->saved_data["p"].toDouble(), std::bit_cast<uint64_t>(ctx->saved_data["seed"].toInt()),
          std::bit_cast<uint64_t>(ctx->saved_data["offset"].toInt())};
}

// ---------------------------------------------------------------------------------------------
// LayerNorm and RMSNorm

// The backward kernels of LayerNorm (layer) or RMSNorm: {dx, dweight, dbias}, dweight when weight
// is given and need_w, dbias when layer and need_b (undefined otherwise).
variable_list norm_backward_kernels(const Tensor& dy_in, const Tensor& x_in, const Tensor& weight_in,
                                    const Tensor& mean, const Tensor& rstd, bool layer, bool need_w, bool need_b) {
  const Tensor x = x_in.contiguous(), weight = dense(weight_in), dy = dy_in.contiguous();
  // LayerNorm's kernel computes dgamma (given gamma) and dbeta together; the one not asked for is dropped.
  const bool params = layer ? need_w || need_b : need_w;
  const Tensor dx = new_output(x);
  const Tensor dw = new_param_grad(params && weight.defined(), x);
  const Tensor db = new_param_grad(params && layer, x);
  visit(dt_of(x.scalar_type()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (layer) {
      layer_norm_backward<T>(out_view<T>(dx), out_span<T>(dw), out_span<T>(db), in_view<T>(dy), in_view<T>(x),
                             in_span<stat_t<T>>(mean), in_span<stat_t<T>>(rstd), in_span<T>(weight));
    } else {
      rms_norm_backward<T>(out_view<T>(dx), out_span<T>(dw), in_view<T>(dy), in_view<T>(x), in_span<stat_t<T>>(rstd),
                           in_span<T>(weight));
    }
  });
  return {dx, need_w ? dw : Tensor(), need_b && layer ? db : Tensor()};
}

// The backward of LayerNorm (layer) or RMSNorm as a function autograd differentiates, for
// create_graph (a gradient penalty): forward runs the backward kernels and returns dx, then dweight
// and dbias where asked for (a Function's outputs must be defined tensors); backward runs the
// double-backward kernels (addnorm/norm/double_backward.hpp), or, when autograd records that too (a
// third derivative), their formula as torch ops (grad2::norm_double).
struct NormBackwardFn : torch::autograd::Function<NormBackwardFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& dy, const Tensor& x, const OptTensor& weight_in,
                               const OptTensor& mean_in, const Tensor& rstd, double eps, bool layer, bool need_w,
                               bool need_b) {
    ctx->set_materialize_grads(false);
    const Tensor weight = given(weight_in), mean = given(mean_in);
    ctx->save_for_backward({dy, x, weight, mean, rstd});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["layer"] = layer;
    const variable_list g = norm_backward_kernels(dy, x, weight, mean, rstd, layer, need_w, need_b);
    ctx->saved_data["dw"] = g[1].defined();
    ctx->saved_data["db"] = g[2].defined();
    variable_list out{g[0]};
    for (size_t i = 1; i < 3; ++i)
      if (g[i].defined()) out.push_back(g[i]);
    return out;
  }

  // {dx, dweight, dbias} from forward's outputs (or their gradients), given which of dweight and
  // dbias it returned (undefined where it did not).
  static variable_list unpack(const variable_list& out, bool dw, bool db) {
    const Tensor none;
    return {out[0], dw ? out[1] : none, db ? out[1 + dw] : none};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads_in) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &dy = saved[0], &x = saved[1], &weight = saved[2], &mean = saved[3], &rstd = saved[4];
    const bool layer = ctx->saved_data["layer"].toBool();
    const bool need_dy = ctx->needs_input_grad(0), need_x = ctx->needs_input_grad(1);
    const bool need_w = needs_grad(ctx, 2, weight.defined());
    variable_list out(9);  // one per argument of forward
    if (!need_dy && !need_x && !need_w) return out;
    const variable_list grads = unpack(grads_in, ctx->saved_data["dw"].toBool(), ctx->saved_data["db"].toBool());
    const Tensor& ddb = grads[2];
    if (recorded()) {
      const grad2::Grads g = grad2::norm_double(grads[0], grads[1], ddb, dy, x, weight,
                                                ctx->saved_data["eps"].toDouble(), layer, {need_dy, need_x, need_w});
      std::copy(g.begin(), g.end(), out.begin());
      return out;
    }
    const Tensor xc = x.contiguous(), dyc = dy.contiguous(), w = dense(weight);
    const Tensor ddx = dense(grads[0]), ddw = dense(grads[1]), ddbc = dense(ddb);
    const Tensor gdy = need_dy ? new_output(xc) : Tensor(), gx = need_x ? new_output(xc) : Tensor();
    const Tensor gw = new_param_grad(need_w, xc);
    visit(dt_of(xc.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using S = stat_t<T>;
      const auto view = [](const Tensor& t) { return t.defined() ? out_view<T>(t) : View2D<T>{}; };
      const View2D<const T> u = ddx.defined() ? in_view<T>(ddx) : View2D<const T>{};
      if (layer) {
        layer_norm_double_backward<T>(view(gx), view(gdy), out_span<T>(gw), u, in_span<T>(ddw), in_span<T>(ddbc),
                                      in_view<T>(dyc), in_view<T>(xc), in_span<S>(mean), in_span<S>(rstd),
                                      in_span<T>(w));
      } else {
        rms_norm_double_backward<T>(view(gx), view(gdy), out_span<T>(gw), u, in_span<T>(ddw), in_view<T>(dyc),
                                    in_view<T>(xc), in_span<S>(rstd), in_span<T>(w));
      }
    });
    out[0] = gdy;
    out[1] = gx;
    out[2] = gw;
    return out;
  }
};

// The backward of LayerNorm (layer) or RMSNorm of x: the kernels, or under create_graph
// NormBackwardFn. {dx, dweight, dbias}, as norm_backward_kernels.
variable_list norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                            const Tensor& rstd, double eps, bool layer, bool need_w, bool need_b) {
  if (recorded()) {
    return NormBackwardFn::unpack(
        NormBackwardFn::apply(dy, x, optional(weight), optional(mean), rstd, eps, layer, need_w, need_b),
        need_w && weight.defined(), need_b && layer);
  }
  return norm_backward_kernels(dy, x, weight, mean, rstd, layer, need_w, need_b);
}

struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const OptTensor& weight_in, const OptTensor& bias_in,
                        double eps) {
    const Tensor x = x_in.contiguous(), weight = contiguous(weight_in), bias = contiguous(bias_in);
    Tensor y = new_output(x), mean = new_stats(x), rstd = new_stats(x);
    visit(dt_of(x.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      layer_norm_forward<T>(out_view<T>(y), out_span<stat_t<T>>(mean), out_span<stat_t<T>>(rstd), in_view<T>(x),
                            in_span<T>(weight), in_span<T>(bias), eps);
    });
    ctx->save_for_backward({x_in, given(weight_in), mean, rstd});
    ctx->saved_data["bias"] = bias.defined();
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_w = needs_grad(ctx, 1, saved[1].defined());
    const bool need_b = needs_grad(ctx, 1 + saved[1].defined(), ctx->saved_data["bias"].toBool());
    if (!need_x && !need_w && !need_b) return {Tensor(), Tensor(), Tensor(), Tensor()};
    const variable_list g = norm_backward(grads[0], saved[0], saved[1], saved[2], saved[3],
                                          ctx->saved_data["eps"].toDouble(), true, need_w, need_b);
    return {need_x ? g[0] : Tensor(), g[1], g[2], Tensor()};
  }
};

Tensor layer_norm_op(const Tensor& x, const OptTensor& weight, const OptTensor& bias, double eps) {
  const char* fn = "torch.layer_norm";
  check_data(x, fn, "x");
  check_param(weight, fn, "weight", x);
  check_param(bias, fn, "bias", x);
  return LayerNormFn::apply(x, weight, bias, eps);
}

Tensor layer_norm(py::handle x, py::handle weight, py::handle bias, double eps) {
  const char* fn = "torch.layer_norm";
  static const auto call = op<decltype(layer_norm_op)>("addnorm::layer_norm");
  const Tensor xt = tensor_of(x, fn, "x");
  const OptTensor w = optional_of(weight, fn, "weight"), b = optional_of(bias, fn, "bias");
  py::gil_scoped_release nogil;
  return python_errors([&] { return call.call(xt, w, b, eps); });
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

struct RMSNormFn : torch::autograd::Function<RMSNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const OptTensor& weight_in, double eps) {
    const Tensor x = x_in.contiguous(), weight = contiguous(weight_in);
    Tensor y = new_output(x), rstd = new_stats(x);
    visit(dt_of(x.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      rms_norm_forward<T>(out_view<T>(y), out_span<stat_t<T>>(rstd), in_view<T>(x), in_span<T>(weight), eps);
    });
    ctx->save_for_backward({x_in, given(weight_in), rstd});
    ctx->saved_data["eps"] = eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_w = needs_grad(ctx, 1, saved[1].defined());
    if (!need_x && !need_w) return {Tensor(), Tensor(), Tensor()};
    const variable_list g = norm_backward(grads[0], saved[0], saved[1], Tensor(), saved[2],
                                          ctx->saved_data["eps"].toDouble(), false, need_w, false);
    return {need_x ? g[0] : Tensor(), g[1], Tensor()};
  }
};

Tensor rms_norm_op(const Tensor& x, const OptTensor& weight, double eps) {
  const char* fn = "torch.rms_norm";
  check_data(x, fn, "x");
  check_param(weight, fn, "weight", x);
  return RMSNormFn::apply(x, weight, eps);
}

Tensor rms_norm(py::handle x, py::handle weight, double eps) {
  const char* fn = "torch.rms_norm";
  static const auto call = op<decltype(rms_norm_op)>("addnorm::rms_norm");
  const Tensor xt = tensor_of(x, fn, "x");
  const OptTensor w = optional_of(weight, fn, "weight");
  py::gil_scoped_release nogil;
  return python_errors([&] { return call.call(xt, w, eps); });
}

// ---------------------------------------------------------------------------------------------
// Fused residual add + dropout + norm

// add_norm's branch scales as the kernels take them (each undefined: ones).
template <class T>
BranchScale<T> branch_scale(const Tensor& layer, const Tensor& row) {
  return {in_span<T>(layer), in_span<T>(row)};
}

struct AddNormFn : torch::autograd::Function<AddNormFn> {
  static variable_list forward(AutogradContext* ctx, const Tensor& h_in, const Tensor& f_in, const OptTensor& weight_in,
                               const OptTensor& bias_in, const OptTensor& layer_in, const OptTensor& row_in,
                               const AddNormOptions& options) {
    ctx->set_materialize_grads(false);  // an unused output's gradient arrives undefined
    const Tensor h = h_in.contiguous(), f = f_in.contiguous(), weight = contiguous(weight_in),
                 bias = contiguous(bias_in), layer_scale = contiguous(layer_in), row_scale = contiguous(row_in);
    const bool layer = options.kind == NormKind::layer;
    Tensor s = new_output(h), y = new_output(f), mean = layer ? new_stats(f) : Tensor(), rstd = new_stats(f);
    visit_stream(dt_of(f.scalar_type()), dt_of(h.scalar_type()), [&](auto t_tag, auto r_tag) {
      using T = typename decltype(t_tag)::type;
      using R = typename decltype(r_tag)::type;
      add_norm_forward<T, R>(out_view<R>(s), out_view<T>(y), out_span<stat_t<T>>(mean), out_span<stat_t<T>>(rstd),
                             in_view<R>(h), in_view<T>(f), in_span<T>(weight), in_span<T>(bias), options,
                             branch_scale<T>(layer_scale, row_scale));
    });
    // LayerScale's gradient reads the forward's f. (needs_input_grad cannot be asked here: without
    // grad mode the Function has no edges.)
    const bool need_layer = layer_scale.defined() && layer_scale.requires_grad();
    ctx->save_for_backward(
        {s, given(weight_in), mean, rstd, given(layer_in), given(row_in), need_layer ? f_in : Tensor()});
    ctx->saved_data["bias"] = bias.defined();
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["alpha"] = options.alpha;
    ctx->saved_data["eps"] = options.eps;
    save_dropout(ctx, options.dropout);
    ctx->saved_data["f_dtype"] = static_cast<int64_t>(f.scalar_type());
    return {s, y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list none(7);
    const auto saved = ctx->get_saved_variables();
    const Tensor &s = saved[0], &mean = saved[2], &rstd = saved[3];
    const grad2::BranchTensors scales{saved[4], saved[5], saved[6]};
    const bool need_h = ctx->needs_input_grad(0), need_f = ctx->needs_input_grad(1);
    const bool has_bias = ctx->saved_data["bias"].toBool();
    const bool need_w = needs_grad(ctx, 2, saved[1].defined());
    const bool need_b = needs_grad(ctx, 2 + saved[1].defined(), has_bias);
    const bool need_l = needs_grad(ctx, 2 + saved[1].defined() + has_bias, scales.layer.defined());
    const Tensor &ds_in = grads[0], &dy_in = grads[1];
    if ((!ds_in.defined() && !dy_in.defined()) || !(need_h || need_f || need_w || need_b || need_l)) return none;
    AddNormOptions options;
    options.kind = ctx->saved_data["layer"].toBool() ? NormKind::layer : NormKind::rms;
    options.alpha = ctx->saved_data["alpha"].toDouble();
    options.dropout = saved_dropout(ctx);
    const auto f_dtype = static_cast<ScalarType>(ctx->saved_data["f_dtype"].toInt());
    if (recorded()) {
      const bool layer = options.kind == NormKind::layer;
      const double eps = ctx->saved_data["eps"].toDouble();
      if (dy_in.defined() && s.scalar_type() == f_dtype) {
        // The norm's part by its kernels (NormBackwardFn, as in layer_norm), the residual's in torch ops.
        const variable_list n = norm_backward(dy_in, s, saved[1], mean, rstd, eps, layer, need_w, need_b && layer);
        const grad2::Grads g = grad2::add_norm_residual(ds_in, n[0], s, options.alpha, options.dropout, s.scalar_type(),
                                                        f_dtype, {need_h, need_f, need_l}, scales);
        return {g[0], g[1], n[1], n[2], g[2], Tensor(), Tensor()};
      }
      grad2::Grads g = grad2::add_norm(ds_in, dy_in, s, saved[1], eps, layer, options.alpha, options.dropout,
                                       s.scalar_type(), f_dtype, {need_h, need_f, need_w, need_b, need_l}, scales);
      g.resize(7);
      return g;
    }
    const Tensor weight = dense(saved[1]), layer_scale = dense(scales.layer), row_scale = dense(scales.row);
    const Tensor f = need_l ? scales.f.contiguous() : Tensor();
    // y unused: only the residual stream's gradient flows (dy = 0).
    const Tensor dy = dy_in.defined() ? dy_in.contiguous() : new_output(s, f_dtype).zero_();
    const Tensor ds = dense(ds_in);
    const bool layer = options.kind == NormKind::layer;
    const Tensor dh = new_output(s), df = new_output(dy);
    const Tensor dw = new_param_grad((need_w || need_b) && weight.defined(), dy);
    const Tensor db = new_param_grad((need_w || need_b) && layer, dy);
    const Tensor dl = new_param_grad(need_l, dy);
    visit_stream(dt_of(f_dtype), dt_of(s.scalar_type()), [&](auto t_tag, auto r_tag) {
      using T = typename decltype(t_tag)::type;
      using R = typename decltype(r_tag)::type;
      const View2D<const R> dsv = ds.defined() ? in_view<R>(ds) : View2D<const R>{};
      const View2D<const T> fv = f.defined() ? in_view<T>(f) : View2D<const T>{};
      add_norm_backward<T, R>(out_view<R>(dh), out_view<T>(df), out_span<T>(dw), out_span<T>(db), in_view<T>(dy), dsv,
                              in_view<R>(s), in_span<stat_t<T>>(mean), in_span<stat_t<T>>(rstd), in_span<T>(weight),
                              options, branch_scale<T>(layer_scale, row_scale), out_span<T>(dl), fv);
    });
    return {need_h ? dh : Tensor(),
            need_f ? df : Tensor(),
            need_w ? dw : Tensor(),
            need_b ? db : Tensor(),
            need_l ? dl : Tensor(),
            Tensor(),
            Tensor()};
  }
};

// The seed and offset travel through the op as int64 (the schema's int): their bits.
std::tuple<Tensor, Tensor> add_norm_op(const Tensor& h, const Tensor& f, const OptTensor& weight, const OptTensor& bias,
                                       c10::string_view kind, double eps, double alpha, double p, int64_t seed,
                                       int64_t offset, const OptTensor& layerscale, const OptTensor& rowscale) {
  const char* fn = "torch.add_norm";
  check_data(h, fn, "h");
  check_data(f, fn, "f");
  check_param(weight, fn, "weight", f);
  check_param(bias, fn, "bias", f);
  check_param(layerscale, fn, "layerscale", f);
  if (h.sizes() != f.sizes()) {
    fail<ArgValueError>(fn, "h has shape ", shape_str(h), " but f has shape ", shape_str(f));
  }
  if (h.scalar_type() != f.scalar_type() && !(h.scalar_type() == ScalarType::Float && narrow(f.scalar_type()))) {
    fail<ArgTypeError>(fn, "h has dtype ", dtype_str(h.scalar_type()), " and f ", dtype_str(f.scalar_type()),
                       "; expected the same dtype, or h float32 with f float16/bfloat16");
  }
  if (rowscale && rowscale->defined()) {
    check_tensor(*rowscale, fn, "rowscale");
    if (rowscale->scalar_type() != f.scalar_type()) {
      fail<ArgTypeError>(fn, "rowscale has dtype ", dtype_str(rowscale->scalar_type()), "; expected ",
                         dtype_str(f.scalar_type()));
    }
    if (rowscale->sizes() != f.sizes().slice(0, static_cast<size_t>(f.dim() - 1))) {
      fail<ArgValueError>(fn, "rowscale has shape ", shape_str(*rowscale), "; expected f's leading shape ",
                          shape_str(f.sizes().slice(0, static_cast<size_t>(f.dim() - 1))));
    }
    if (rowscale->requires_grad() && at::GradMode::is_enabled()) {
      fail<ArgValueError>(fn, "rowscale requires grad, but it gets none (drop path's per-sample factor is a ",
                          "constant): pass rowscale.detach()");
    }
  }
  if (kind != "layer" && kind != "rms") fail<ArgValueError>(fn, "kind must be 'layer' or 'rms', got '", kind, "'");
  if (kind == "rms" && bias && bias->defined()) fail<ArgValueError>(fn, "kind='rms' takes no bias");
  if (!(p >= 0.0 && p <= 1.0)) fail<ArgValueError>(fn, "dropout p must be in [0, 1], got ", p);
  AddNormOptions options;
  options.kind = kind == "layer" ? NormKind::layer : NormKind::rms;
  options.eps = eps;
  options.alpha = alpha;
  options.dropout = DropoutSpec{p, std::bit_cast<uint64_t>(seed), std::bit_cast<uint64_t>(offset)};
  const variable_list out = AddNormFn::apply(h, f, weight, bias, layerscale, rowscale, options);
  return {out[0], out[1]};
}

std::tuple<Tensor, Tensor> add_norm(py::handle h, py::handle f, py::handle weight, py::handle bias,
                                    const std::string& kind, double eps, double alpha, double p, uint64_t seed,
                                    uint64_t offset, py::handle layerscale, py::handle rowscale) {
  const char* fn = "torch.add_norm";
  static const auto call = op<decltype(add_norm_op)>("addnorm::add_norm");
  const Tensor ht = tensor_of(h, fn, "h"), ft = tensor_of(f, fn, "f");
  const OptTensor w = optional_of(weight, fn, "weight"), b = optional_of(bias, fn, "bias");
  const OptTensor ls = optional_of(layerscale, fn, "layerscale"), rs = optional_of(rowscale, fn, "rowscale");
  py::gil_scoped_release nogil;
  return python_errors([&] {
    return call.call(ht, ft, w, b, kind, eps, alpha, p, std::bit_cast<int64_t>(seed), std::bit_cast<int64_t>(offset),
                     ls, rs);
  });
}

// ---------------------------------------------------------------------------------------------
// ReZero

struct ReZeroFn : torch::autograd::Function<ReZeroFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& h_in, const Tensor& f_in, const Tensor& a,
                        const DropoutSpec& dropout) {
    const Tensor h = h_in.contiguous(), f = f_in.contiguous();
    const double value = a.item<double>();
    Tensor s = new_output(h);
    visit(dt_of(h.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      rezero_forward<T>(out_view<T>(s), in_view<T>(h), in_view<T>(f), value, dropout);
    });
    ctx->save_for_backward({f_in, a});
    ctx->saved_data["a"] = value;
    save_dropout(ctx, dropout);
    return s;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& a = saved[1];
    const bool need_h = ctx->needs_input_grad(0), need_f = ctx->needs_input_grad(1), need_a = ctx->needs_input_grad(2);
    if (!need_h && !need_f && !need_a) return variable_list(4);
    const DropoutSpec dropout = saved_dropout(ctx);
    if (recorded()) {
      grad2::Grads g = grad2::rezero(grads[0], saved[0], a, dropout, {need_h, need_f, need_a});
      g.emplace_back();
      return g;
    }
    const Tensor f = saved[0].contiguous(), ds = grads[0].contiguous();
    const Tensor dh = new_output(f), df = new_output(f);
    double da = 0.0;
    visit(dt_of(f.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      rezero_backward<T>(out_view<T>(dh), out_view<T>(df), da, in_view<T>(ds), in_view<T>(f),
                         ctx->saved_data["a"].toDouble(), dropout);
    });
    return {need_h ? dh : Tensor(), need_f ? df : Tensor(), need_a ? at::full_like(a, da) : Tensor(), Tensor()};
  }
};

Tensor rezero_op(const Tensor& h, const Tensor& f, const Tensor& a, double p, int64_t seed, int64_t offset) {
  const char* fn = "torch.rezero";
  check_data(h, fn, "h");
  check_data(f, fn, "f");
  if (h.scalar_type() != f.scalar_type()) {
    fail<ArgTypeError>(fn, "h has dtype ", dtype_str(h.scalar_type()), " and f ", dtype_str(f.scalar_type()),
                       "; expected the same dtype");
  }
  if (h.sizes() != f.sizes()) fail<ArgValueError>(fn, "h has shape ", shape_str(h), " but f has shape ", shape_str(f));
  check_tensor(a, fn, "a");
  if (a.numel() != 1) fail<ArgValueError>(fn, "a has shape ", shape_str(a), "; expected one element");
  if (!(p >= 0.0 && p <= 1.0)) fail<ArgValueError>(fn, "dropout p must be in [0, 1], got ", p);
  return ReZeroFn::apply(h, f, a, DropoutSpec{p, std::bit_cast<uint64_t>(seed), std::bit_cast<uint64_t>(offset)});
}

Tensor rezero(py::handle h, py::handle f, py::handle a, double p, uint64_t seed, uint64_t offset) {
  const char* fn = "torch.rezero";
  static const auto call = op<decltype(rezero_op)>("addnorm::rezero");
  const Tensor ht = tensor_of(h, fn, "h"), ft = tensor_of(f, fn, "f"), at_ = tensor_of(a, fn, "a");
  py::gil_scoped_release nogil;
  return python_errors(
      [&] { return call.call(ht, ft, at_, p, std::bit_cast<int64_t>(seed), std::bit_cast<int64_t>(offset)); });
}

// ---------------------------------------------------------------------------------------------
// BatchNorm (features last)

// What BatchNorm's forward takes besides the autograd inputs (x, weight, bias): the running
// statistics (updated in place in training), the row mask, the options.
struct BatchNormArgs {
  Tensor running_mean, running_var, mask;
  BatchNormOptions options;
};

std::span<const uint8_t> mask_span(const Tensor& mask) {
  if (!mask.defined()) return {};
  return {static_cast<const uint8_t*>(mask.data_ptr()), static_cast<size_t>(mask.numel())};
}

// Backward in inference, y = (x - mean) * rstd * weight + bias on the valid rows (0 on padding
// rows), in the statistics' precision: the same torch ops in the same order as torch.py's
// _bn_eval_backward, so both backends give the same bits.
variable_list bn_eval_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                               const Tensor& rstd, const Tensor& mask, bool need_x, bool need_wb) {
  const int64_t d = x.size(-1);
  const ScalarType st = mean.scalar_type();
  Tensor g = dy.to(st);
  if (mask.defined()) g = g * mask.unsqueeze(-1).to(st);
  Tensor dx, dw, db;
  if (need_x) dx = (g * (weight.defined() ? rstd * weight.to(st) : rstd)).to(x.scalar_type());
  if (need_wb) {
    const Tensor xhat = (x.to(st) - mean) * rstd;
    if (weight.defined()) dw = (g * xhat).reshape({-1, d}).sum(0).to(x.scalar_type());
    db = g.reshape({-1, d}).sum(0).to(x.scalar_type());
  }
  return {dx, dw, db};
}

struct BatchNormFn : torch::autograd::Function<BatchNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const OptTensor& weight_in, const OptTensor& bias_in,
                        const BatchNormArgs& args) {
    const Tensor x = x_in.contiguous(), weight = contiguous(weight_in), bias = contiguous(bias_in);
    const Tensor mask = dense(args.mask);
    const auto features = x.sizes().slice(static_cast<size_t>(x.dim() - 1));
    const auto stat_options = x.options().dtype(stat_type(x.scalar_type()));
    Tensor y = new_output(x), mean = at::empty(features, stat_options), rstd = at::empty(features, stat_options);
    visit(dt_of(x.scalar_type()), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using S = stat_t<T>;
      batch_norm_forward<T>(out_view<T>(y), out_span<S>(mean), out_span<S>(rstd), out_span<S>(args.running_mean),
                            out_span<S>(args.running_var), in_view<T>(x), mask_span(mask), in_span<T>(weight),
                            in_span<T>(bias), args.options);
    });
    ctx->save_for_backward({x_in, given(weight_in), mean, rstd, mask});
    ctx->saved_data["bias"] = bias.defined();
    ctx->saved_data["training"] = args.options.training;
    ctx->saved_data["eps"] = args.options.eps;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &mean = saved[2], &rstd = saved[3], &mask = saved[4];
    const bool need_x = ctx->needs_input_grad(0);
    const bool need_w = needs_grad(ctx, 1, saved[1].defined());
    const bool need_b = needs_grad(ctx, 1 + saved[1].defined(), ctx->saved_data["bias"].toBool());
    if (!need_x && !need_w && !need_b) return variable_list(4);
    const Tensor dy = grads[0].contiguous();
    Tensor dx, dw, db;
    if (ctx->saved_data["training"].toBool() && recorded()) {  // the eval backward is torch ops already
      const grad2::Grads g = grad2::batch_norm(grads[0], saved[0], saved[1], ctx->saved_data["eps"].toDouble(), mask,
                                               need_x, need_w, need_b);
      dx = g[0], dw = g[1], db = g[2];
    } else if (ctx->saved_data["training"].toBool()) {
      const Tensor x = saved[0].contiguous(), weight = dense(saved[1]);
      const bool params = need_w || need_b;
      dx = new_output(x);
      dw = new_param_grad(params && weight.defined(), x);
      db = new_param_grad(params, x);
      visit(dt_of(x.scalar_type()), [&](auto tag) {
        using T = typename decltype(tag)::type;
        batch_norm_backward<T>(out_view<T>(dx), out_span<T>(dw), out_span<T>(db), in_view<T>(dy), in_view<T>(x),
                               mask_span(mask), in_span<stat_t<T>>(mean), in_span<stat_t<T>>(rstd), in_span<T>(weight));
      });
    } else {
      const variable_list g = bn_eval_backward(dy, saved[0], saved[1], mean, rstd, mask, need_x, need_w || need_b);
      dx = g[0], dw = g[1], db = g[2];
    }
    return {need_x ? dx : Tensor(), need_w ? dw : Tensor(), need_b ? db : Tensor(), Tensor()};
  }
};

// A running statistic: absent, or a contiguous (d,) tensor of the statistics' dtype, not requiring
// grad (the kernel updates it in place).
Tensor running_stat(const OptTensor& t, const char* fn, const char* name, const Tensor& x) {
  if (!t || !t->defined()) return {};
  check_tensor(*t, fn, name);
  const ScalarType st = stat_type(x.scalar_type());
  if (t->scalar_type() != st) {
    fail<ArgTypeError>(fn, name, " has dtype ", dtype_str(t->scalar_type()), "; expected ", dtype_str(st));
  }
  if (t->dim() != 1 || t->size(0) != x.size(-1)) {
    fail<ArgValueError>(fn, name, " has shape ", shape_str(*t), "; expected (", x.size(-1), ",)");
  }
  if (!t->is_contiguous() || t->requires_grad()) {
    fail<ArgValueError>(fn, name, " must be contiguous and not require grad (it is updated in place)");
  }
  return *t;
}

Tensor batch_norm_op(const Tensor& x, const OptTensor& running_mean, const OptTensor& running_var,
                     const OptTensor& weight, const OptTensor& bias, bool training, double momentum, double eps,
                     const OptTensor& mask) {
  const char* fn = "torch.batch_norm";
  check_data(x, fn, "x");
  check_param(weight, fn, "weight", x);
  check_param(bias, fn, "bias", x);
  BatchNormArgs args;
  args.running_mean = running_stat(running_mean, fn, "running_mean", x);
  args.running_var = running_stat(running_var, fn, "running_var", x);
  if (!training && (!args.running_mean.defined() || !args.running_var.defined())) {
    fail<ArgValueError>(fn, "inference (training=False) needs running_mean and running_var");
  }
  if (mask && mask->defined()) {
    args.mask = *mask;
    const ScalarType st = args.mask.scalar_type();
    if ((st != ScalarType::Bool && st != ScalarType::Byte) || !args.mask.device().is_cpu()) {
      fail<ArgTypeError>(fn, "mask must be a bool or uint8 tensor");
    }
    if (args.mask.sizes() != x.sizes().slice(0, static_cast<size_t>(x.dim() - 1))) {
      fail<ArgValueError>(fn, "mask has shape ", shape_str(args.mask), "; expected ",
                          shape_str(x.sizes().slice(0, static_cast<size_t>(x.dim() - 1))));
    }
  }
  args.options.training = training;
  args.options.momentum = momentum;
  args.options.eps = eps;
  return BatchNormFn::apply(x, weight, bias, args);
}

Tensor batch_norm(py::handle x, py::handle running_mean, py::handle running_var, py::handle weight, py::handle bias,
                  bool training, double momentum, double eps, py::handle mask) {
  const char* fn = "torch.batch_norm";
  static const auto call = op<decltype(batch_norm_op)>("addnorm::batch_norm");
  const Tensor xt = tensor_of(x, fn, "x");
  const OptTensor rm = optional_of(running_mean, fn, "running_mean"), rv = optional_of(running_var, fn, "running_var");
  const OptTensor w = optional_of(weight, fn, "weight"), b = optional_of(bias, fn, "bias");
  if (!mask.is_none() && !THPVariable_Check(mask.ptr()))
    fail<py::type_error>(fn, "mask must be a bool or uint8 tensor");
  const OptTensor mt = optional_of(mask, fn, "mask");
  py::gil_scoped_release nogil;
  return python_errors([&] { return call.call(xt, rm, rv, w, b, training, momentum, eps, mt); });
}

}  // namespace

}  // namespace addnorm::torch_ops

// The functions as operators of the dispatcher (torch.ops.addnorm.*), so that torch.jit.trace
// records them (a Function called past the dispatcher would leave only its output's aten::empty in
// the trace) and TorchScript can call them. Each is CompositeImplicitAutograd: its autograd is the
// Function inside.
TORCH_LIBRARY(addnorm, m) {
  m.def("layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor? weight=None, float eps=1e-05) -> Tensor");
  m.def(
      "add_norm(Tensor h, Tensor f, Tensor? weight=None, Tensor? bias=None, str kind=\"layer\", float eps=1e-05, "
      "float alpha=1.0, float p=0.0, int seed=0, int offset=0, Tensor? layerscale=None, Tensor? rowscale=None) -> "
      "(Tensor, Tensor)");
  m.def("rezero(Tensor h, Tensor f, Tensor a, float p=0.0, int seed=0, int offset=0) -> Tensor");
  m.def(
      "batch_norm(Tensor x, Tensor(a!)? running_mean=None, Tensor(b!)? running_var=None, Tensor? weight=None, "
      "Tensor? bias=None, bool training=True, float momentum=0.1, float eps=1e-05, Tensor? mask=None) -> Tensor");
}

TORCH_LIBRARY_IMPL(addnorm, CompositeImplicitAutograd, m) {
  using namespace addnorm::torch_ops;
  m.impl("layer_norm", &layer_norm_op);
  m.impl("rms_norm", &rms_norm_op);
  m.impl("add_norm", &add_norm_op);
  m.impl("rezero", &rezero_op);
  m.impl("batch_norm", &batch_norm_op);
}

PYBIND11_MODULE(_torch_ops, m) {
  namespace py = pybind11;
  using namespace addnorm::torch_ops;
  m.doc() = "addnorm.torch's autograd functions in C++ (libtorch); addnorm.torch calls them, see python/README.md";
  const auto none = py::none();
  m.def("layer_norm", &layer_norm, py::arg("x"), py::arg("weight") = none, py::arg("bias") = none,
        py::arg("eps") = 1e-5, "LayerNorm over the last dimension (autograd: x, weight, bias).");
  m.def("rms_norm", &rms_norm, py::arg("x"), py::arg("weight") = none, py::arg("eps") = 1e-5,
        "RMSNorm over the last dimension (autograd: x, weight).");
  m.def("add_norm", &add_norm, py::arg("h"), py::arg("f"), py::arg("weight") = none, py::arg("bias") = none,
        py::arg("kind") = "layer", py::arg("eps") = 1e-5, py::arg("alpha") = 1.0, py::arg("p") = 0.0,
        py::arg("seed") = 0, py::arg("offset") = 0, py::arg("layerscale") = none, py::arg("rowscale") = none,
        "Fused residual add + dropout + norm: (s, y), s = alpha * h + Dropout(f) * rowscale * layerscale, "
        "y = Norm(s) (autograd: h, f, weight, bias, layerscale).");
  m.def("batch_norm", &batch_norm, py::arg("x"), py::arg("running_mean") = none, py::arg("running_var") = none,
        py::arg("weight") = none, py::arg("bias") = none, py::arg("training") = true, py::arg("momentum") = 0.1,
        py::arg("eps") = 1e-5, py::arg("mask") = none,
        "BatchNorm of the last dimension over the rows (autograd: x, weight, bias); running statistics updated "
        "in place in training.");
  m.def("rezero", &rezero, py::arg("h"), py::arg("f"), py::arg("a"), py::arg("p") = 0.0, py::arg("seed") = 0,
        py::arg("offset") = 0, "ReZero: s = h + a * Dropout(f), a a tensor of one element (autograd: h, f, a).");
}
