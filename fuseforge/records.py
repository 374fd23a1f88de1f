"""Helpers for the JSON records fuseforge writes (verify, bench, check)."""

import math


def json_safe(value):
    """`value` with non-finite floats as strings ("nan", "inf"), so the record is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
