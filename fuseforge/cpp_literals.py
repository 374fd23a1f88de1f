"""Python values spelled as C++ literals."""

import math


def cpp_float(x: float) -> str:
    """A float literal that rounds to the same fp32 value as PyTorch's scalar does: `2.0f`, `0.1f`."""
    if math.isnan(x):
        return "NAN"
    if math.isinf(x) or abs(x) > 3.4028234663852886e38:
        return "INFINITY" if x > 0 else "(-INFINITY)"
    text = repr(float(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return f"{text}f" if not text.startswith("-") else f"({text}f)"
