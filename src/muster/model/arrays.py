"""Array index sets (pure)."""

from __future__ import annotations


def compress_indices(idx: list[int]) -> str:
    """[1,2,3,5,7,9] → '1-3,5-9:2'; consecutive runs as a-b, constant strides ≥2 over ≥3
    items as a-b:s, the rest as single numbers."""
    if not idx:
        return ""
    out = []
    i = 0
    n = len(idx)
    while i < n:
        j = i
        while j + 1 < n and idx[j + 1] == idx[j] + 1:
            j += 1
        if j > i:
            out.append(f"{idx[i]}-{idx[j]}")
            i = j + 1
            continue
        if i + 2 < n:
            stride = idx[i + 1] - idx[i]
            k = i + 1
            while k + 1 < n and idx[k + 1] - idx[k] == stride:
                k += 1
            if k - i >= 2 and stride > 1:
                out.append(f"{idx[i]}-{idx[k]}:{stride}")
                i = k + 1
                continue
        out.append(str(idx[i]))
        i += 1
    return ",".join(out)
