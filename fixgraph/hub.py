"""SWE-bench task sets from the dataset hub: reachability, revision pinning, the cached test split.

Offline, the hub's client retries for about half a minute, printing a warning per retry, before
it fails. One connection attempt with a short timeout answers the same question in seconds; when
the dataset is already cached, it is read from the cache without asking the hub at all.

A set is read as the parquet files of its ``test`` split at one commit of the dataset's repository
(the hub's own file cache, under ``<cache_dir>/hub``): the commit is the pinned revision when one is
pinned, so a dataset edited upstream does not move scores unnoticed; otherwise the run says which
commit it read.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

HUB_TIMEOUT_S = 3.0


class HubError(Exception):
    """The hub cannot give the set asked for; the message is one line meant for the user."""

TEST_SPLIT = re.compile(r"data/test-\d+-of-\d+\.parquet")
COMMIT = re.compile(r"[0-9a-f]{40}")


def hub_endpoint() -> str:
    # The hub client's own setting, so a mirror configured for it is the one asked.
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_reachable(endpoint: str, timeout_s: float = HUB_TIMEOUT_S) -> bool:
    """A TCP connection to the hub opens within ``timeout_s`` (name lookup included)."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def repo_cache(cache_dir: Path, dataset: str) -> Path:
    """Where the hub's client keeps ``dataset``'s files (its documented cache layout)."""
    return cache_dir / "hub" / f"datasets--{dataset.replace('/', '--')}"


def cached_commit(cache_dir: Path, dataset: str, revision: str | None) -> str | None:
    """The commit ``revision`` (None: the main branch) names in the cache, when its test split is there."""
    repo = repo_cache(cache_dir, dataset)
    rev = revision or "main"
    if not COMMIT.fullmatch(rev):
        ref = repo / "refs" / rev
        rev = ref.read_text().strip() if ref.is_file() else ""
    snapshot = repo / "snapshots" / rev
    if rev and snapshot.is_dir() and any(TEST_SPLIT.fullmatch(f"data/{p.name}") for p in snapshot.glob("data/*")):
        return rev
    return None


def cached(cache_dir: Path, dataset: str, revision: str | None = None) -> bool:
    return cached_commit(cache_dir, dataset, revision) is not None


def prepare_hub(cache_dir: Path, dataset: str, timeout_s: float = HUB_TIMEOUT_S,
                revision: str | None = None) -> None:
    """Raise HubError at once when the hub cannot be reached and nothing is cached; when it is
    cached, switch the hub client to offline mode so it reads the cache without retrying."""
    endpoint = hub_endpoint()
    if os.environ.get("HF_HUB_OFFLINE") == "1" or hub_reachable(endpoint, timeout_s):
        return
    if cached(cache_dir, dataset, revision):
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        return
    at = f" at revision {revision}" if revision else ""
    raise HubError(f"the dataset hub ({endpoint}) cannot be reached and {dataset}{at} is not cached; "
                       "pass --dataset PATH to a SWE-bench JSONL")


def _download(cache_dir: Path, dataset: str, revision: str | None) -> tuple[str, list[Path]]:
    """Ask the hub which commit ``revision`` is and fetch that commit's test split into the cache."""
    from huggingface_hub import HfApi, hf_hub_download

    endpoint = hub_endpoint()
    info = HfApi(endpoint=endpoint).dataset_info(dataset, revision=revision or "main")
    names = sorted(s.rfilename for s in info.siblings or [] if TEST_SPLIT.fullmatch(s.rfilename))
    if not info.sha or not names:
        raise HubError(f"{dataset} at revision {revision or 'main'} has no test split on the hub")
    # The revision's own name, so the client records which commit a branch name meant (refs/).
    files = [Path(hf_hub_download(dataset, name, repo_type="dataset", revision=revision or "main",
                                  cache_dir=cache_dir / "hub", endpoint=endpoint)) for name in names]
    return info.sha, files


def read_split(files: list[Path]) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    return [row for f in files for row in pq.read_table(f).to_pylist()]


def load_hub(cache_dir: Path, dataset: str, revision: str | None,
             pinned: str | None) -> tuple[str, list[dict[str, object]]]:
    """The commit read and the rows of ``dataset``'s test split at ``revision`` (None: the hub's main
    branch); says on stderr which commit it read when that is not the ``pinned`` one."""
    commit = cached_commit(cache_dir, dataset, revision) if revision and COMMIT.fullmatch(revision) else None
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    if commit is None and offline:
        commit = cached_commit(cache_dir, dataset, revision)
    if commit is not None:
        files = sorted((repo_cache(cache_dir, dataset) / "snapshots" / commit / "data").glob("test-*.parquet"))
    elif offline:
        raise HubError(f"{dataset} at revision {revision or 'main'} is not cached and the hub is offline; "
                           "pass --dataset PATH to a SWE-bench JSONL")
    else:
        try:
            commit, files = _download(cache_dir, dataset, revision)
        except HubError:
            raise
        except Exception as exc:  # the hub's client raises many kinds
            raise HubError(f"could not load {dataset} at revision {revision or 'main'} from the dataset hub "
                               f"({type(exc).__name__}); pass --dataset PATH to a SWE-bench JSONL") from None
    if commit != pinned:
        why = f"not the pinned {pinned}" if pinned else "no revision is pinned for it"
        print(f"note: read {dataset} at revision {commit} ({why})", file=sys.stderr)
    try:
        return commit, read_split(files)
    except Exception as exc:  # a cut or foreign file in the cache
        raise HubError(f"{dataset} at revision {commit}: cannot read its test split ({type(exc).__name__}: "
                           f"{str(exc)[:120]})") from None
