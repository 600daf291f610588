"""Whether the Hugging Face Hub can be reached, asked quickly before a hub download.

Without this check an offline machine spends a minute in retries and prints a page of
warnings before it fails.
"""

import socket
from urllib.parse import urlparse

from huggingface_hub import constants


def hub_offline_mode():
    """Return True if the user asked for offline mode (HF_HUB_OFFLINE=1): use the cache only."""
    return bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout=3.0):
    """Return True if a TCP connection to the hub's host (HF_ENDPOINT) opens within timeout."""
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False
