"""addnorm: residual connections and normalization for transformers.

The library's kernels on NumPy arrays: LayerNorm, RMSNorm and BatchNorm, the fused residual add +
dropout + norm and ReZero, forward and backward, and LayerNorm's and RMSNorm's double backward (see
python/README.md for arrays, dtypes and errors). `addnorm.torch` wraps them as autograd functions and torch.nn modules.

    >>> import numpy as np, addnorm
    >>> y, mean, rstd = addnorm.layer_norm_forward(np.array([2.0, 4.0, 6.0, 8.0], np.float32))
    >>> np.round(y, 4)
    array([-1.3416, -0.4472,  0.4472,  1.3416], dtype=float32)
"""
from ._addnorm import (  # noqa: F401  (the public API)
    __version__,
    add_norm_backward,
    add_norm_forward,
    batch_norm_backward,
    batch_norm_forward,
    dropout_keep,
    layer_norm_backward,
    layer_norm_double_backward,
    layer_norm_forward,
    num_threads,
    rezero_backward,
    rezero_forward,
    rms_norm_backward,
    rms_norm_double_backward,
    rms_norm_forward,
    set_num_threads,
    set_simd_target,
    simd_target,
    supported_simd_targets,
)

__all__ = [
    "add_norm_backward", "add_norm_forward", "batch_norm_backward", "batch_norm_forward", "dropout_keep",
    "layer_norm_backward", "layer_norm_double_backward", "layer_norm_forward", "num_threads", "rezero_backward",
    "rezero_forward", "rms_norm_backward", "rms_norm_double_backward", "rms_norm_forward", "set_num_threads", "set_simd_target", "simd_target",
    "supported_simd_targets",
]
