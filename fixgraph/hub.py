"""Before loading SWE-bench Lite from the dataset hub: is the hub reachable at all?

Offline, the hub's client retries for about half a minute, printing a warning per retry, before
it fails. One connection attempt with a short timeout answers the same question in seconds; when
the dataset is already cached, the hub's own offline mode then reads the cache without retrying.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from fixgraph.dataset import HUB_DATASET, DatasetError

HUB_TIMEOUT_S = 3.0


def hub_endpoint() -> str:
    # The hub client's own setting, so a mirror configured for it is the one asked.
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def hub_reachable(endpoint: str, timeout_s: float = HUB_TIMEOUT_S) -> bool:
    """A TCP connection to the hub opens within ``timeout_s`` (name lookup included)."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def cached(cache_dir: Path, dataset: str = HUB_DATASET) -> bool:
    hub = cache_dir / "hub"
    want = dataset.split("/")[-1].lower()
    return hub.is_dir() and any(want in p.name.lower() for p in hub.iterdir())


def prepare_hub(cache_dir: Path, dataset: str = HUB_DATASET, timeout_s: float = HUB_TIMEOUT_S) -> None:
    """Raise DatasetError at once when the hub cannot be reached and nothing is cached; when it is
    cached, switch the hub client to offline mode so it reads the cache without retrying."""
    endpoint = hub_endpoint()
    if os.environ.get("HF_HUB_OFFLINE") == "1" or hub_reachable(endpoint, timeout_s):
        return
    if cached(cache_dir, dataset):
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        return
    raise DatasetError(f"the dataset hub ({endpoint}) cannot be reached and {dataset} is not cached; "
                       "pass --dataset PATH to a SWE-bench JSONL")
