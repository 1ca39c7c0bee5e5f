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


def time_sdpa_backends(timer, q, k, v, row, label, errors, **sdpa_args):
    """Times F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **sdpa_args)
    with the flash and the cuDNN backends into row["flash_us"] / row["cudnn_us"]
    (None, and a line in `errors`, where a backend fails on the shape: never
    fatal), and prints one line."""
    import traceback

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fn(backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **sdpa_args)
        try:
            row[name + "_us"] = timer.us(fn)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name} {label}: {type(e).__name__}: {e}")
            traceback.print_exc()
            row[name + "_us"] = None
    print(f"torch peer sdpa {label}: flash {row['flash_us']} us, cudnn {row['cudnn_us']} us", flush=True)
