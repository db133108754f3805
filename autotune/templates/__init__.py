"""Built-in templates, each with a good default config and a numpy reference."""

from . import (  # noqa: F401  (registers the templates)
    attention,
    conv2d,
    dense,
    depthwise_conv2d,
    gelu,
    matmul,
    moe,
    norm,
    norm_grad,
    winograd,
)
