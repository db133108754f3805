"""Built-in templates, each with a good default config and a numpy reference."""

from . import conv2d, dense, matmul, norm  # noqa: F401  (registers the templates)
from . import attention, gelu, moe, norm_grad  # noqa: F401
