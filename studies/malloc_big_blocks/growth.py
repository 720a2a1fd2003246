"""Is memory that glibc keeps for reuse actually reused? Two blocks of one size, allocated with torch's
alignment (posix_memalign, 64 bytes), filled, then freed, round after round, in a fresh process per allocator
setting and block size: the resident set after each round. Writes out/growth.json and out/growth.md.

    python studies/malloc_big_blocks/growth.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = {"glibc's defaults": [], "runtime: mmap above 1 GiB, trim above 2 GiB": [(-1, 2**31 - 1), (-2, 1 << 28), (-3, 1 << 30)],
            "no mmap, never trim": [(-1, -1), (-2, 1 << 28), (-4, 0)]}
SIZES = (300_000_000, 1_200_000_000)
ROUNDS = 5

CHILD = """
import ctypes, ctypes.util, json, sys
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
libc.memset.argtypes, libc.free.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t], [ctypes.c_void_p]
calls, size, rounds = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assert all(libc.mallopt(p, v) for p, v in calls)
rss = lambda: int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1e6
out = []
for _ in range(rounds):
    blocks = [ctypes.c_void_p(), ctypes.c_void_p()]
    for b in blocks:
        assert libc.posix_memalign(ctypes.byref(b), 64, size) == 0
        libc.memset(b, 1, size)
    out.append(rss())
    for b in blocks:
        libc.free(b)
print(json.dumps(out))
"""


def main() -> None:
    res = {name: {str(n): json.loads(subprocess.run([sys.executable, "-c", CHILD, json.dumps(calls), str(n), str(ROUNDS)],
                                                    check=True, capture_output=True, text=True).stdout)
                  for n in SIZES} for name, calls in SETTINGS.items()}
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "growth.json").write_text(json.dumps(res, indent=1))
    lines = [f"# Two blocks allocated, filled and freed, {ROUNDS} rounds: resident GB after each round", "",
             "| setting | " + " | ".join(f"blocks of {n / 1e9:.1f} GB" for n in SIZES) + " |", "|---|" + "---|" * len(SIZES)]
    lines += [f"| {name} | " + " | ".join(", ".join(f"{v:.2f}" for v in r[str(n)]) for n in SIZES) + " |"
              for name, r in res.items()]
    (HERE / "out" / "growth.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
