"""repo-expert core: the shared async pipeline (config → ingest → chunk → embed → store →
retrieve → answer) that the command line and the chat adapters call."""

import sys

__version__ = "0.1.0"


def _load_system_libstdcxx() -> None:
    """Load the system's libstdc++ (globally) before anything imports usearch.

    usearch's extension links libstdc++ statically and exports its locale facet ids as unique
    symbols, which bind process-wide whatever the load flags: a C++ library loaded after it
    against the system libstdc++ then finds facet tables it did not build, and onnxruntime 1.23+
    segfaults on import (``std::codecvt<char16_t>::do_unshift``, seen with 1.32). With the
    system libstdc++ loaded first, both use its ids. ``tests/test_e5int8.py`` runs both import
    orders in fresh interpreters."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    except OSError:  # no glibc libstdc++ (musl, a static build): nothing to collide with
        pass


_load_system_libstdcxx()
