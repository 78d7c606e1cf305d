"""Setting the BLAS thread count of the running process (OpenBLAS, as bundled by numpy).

FastE5 runs its batches on its own worker threads and wants single-threaded GEMMs while
it does (OpenBLAS threads spin-wait and collapse on a shared or busy machine, while
independent batches scale cleanly). Uses threadpoolctl when installed, otherwise the
OpenBLAS ``*_set_num_threads`` symbols of the libraries mapped into the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Iterator
from typing import Any

_lock = threading.Lock()
_setters: list[tuple[Callable[[], int], Callable[[int], None]]] | None = None

_GET = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)
_SET = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


def _openblas_libs() -> list[tuple[Callable[[], int], Callable[[int], None]]]:
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and "openblas" in parts[5].lower():
                    path = parts[5].strip()
                    if path not in paths:
                        paths.append(path)
    except OSError:
        return []
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        get = next((getattr(lib, s) for s in _GET if hasattr(lib, s)), None)
        put = next((getattr(lib, s) for s in _SET if hasattr(lib, s)), None)
        if get is None or put is None:
            continue
        get.restype = ctypes.c_int
        get.argtypes = []
        put.restype = None
        put.argtypes = [ctypes.c_int]
        found.append((get, put))
    return found


def _controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController

        return ThreadpoolController()
    except Exception:
        return None


_tpc: Any = None
_tpc_checked = False


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Limit BLAS to ``n`` threads inside the block (process wide); None: no change."""
    global _setters, _tpc, _tpc_checked
    if n is None:
        yield
        return
    with _lock:
        if not _tpc_checked:
            _tpc = _controller()
            _tpc_checked = True
        if _tpc is None and _setters is None:
            _setters = _openblas_libs()
    if _tpc is not None:
        with _tpc.limit(limits=n, user_api="blas"):
            yield
        return
    saved = [(get(), put) for get, put in _setters or []]
    for _, put in saved:
        put(n)
    try:
        yield
    finally:
        for old, put in saved:
            put(old)
