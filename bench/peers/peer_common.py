"""Helpers shared by the PyTorch peers of bench/peers/ (imported from the
scripts' own directory): what a compiled peer must report about itself."""


def cudagraph_skips():
    """Inductor's count of compiled graphs it ran without CUDA graphs (e.g. for a
    mutated input): a compiled peer that skipped them timed a slower path, so the
    peers record the count and refuse such a case; None where torch lacks it."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["inductor"].get("cudagraph_skips", 0))
    except Exception:  # noqa: BLE001
        return None
